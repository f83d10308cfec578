import t from 'tap';
import { createSseMeter, SseEventTooLargeError, type SseMeter, type SseMeterOptions } from '../../src/meter/sse-scanner.ts';
import { buildStream, event, withoutUsageEvent } from './sse-fixture.ts';
import { seededInts } from '../helpers/seeded.ts';

/** Feeds `chunks` and returns everything forwarded, end() included. */
function feed(meter: SseMeter, chunks: Buffer[]): string {
  const out: Buffer[] = [];
  for (const c of chunks) {
    const o = meter.push(c);
    if (Buffer.isBuffer(o)) out.push(o);
    else if (o !== null) out.push(...o);
  }
  const tail = meter.end();
  if (tail !== null) out.push(tail);
  return Buffer.concat(out).toString('utf8');
}

function splitAt(buf: Buffer, ...cuts: number[]): Buffer[] {
  const parts: Buffer[] = [];
  let prev = 0;
  for (const c of cuts) {
    parts.push(buf.subarray(prev, c));
    prev = c;
  }
  parts.push(buf.subarray(prev));
  return parts;
}

const drop: SseMeterOptions = { dropUsageOnlyChunk: true };
const keep: SseMeterOptions = { dropUsageOnlyChunk: false };

t.test('one push: forwards byte-for-byte, records usage and [DONE]', async (t) => {
  const { sse } = buildStream({ usageNullOnChunks: true });
  const m = createSseMeter(keep);
  t.equal(feed(m, [Buffer.from(sse)]), sse);
  t.same(m.usage, { prompt_tokens: 21, completion_tokens: 10 });
  t.equal(m.sawDone, true);
  t.equal(m.completionText(), '', 'the usage covers every piece before it');
});

t.test('drops the usage-only chunk when asked, and only it', async (t) => {
  for (const eol of ['\n', '\r\n'] as const) {
    const { sse } = buildStream({ eol, usageNullOnChunks: true });
    const m = createSseMeter(drop);
    const out = feed(m, [Buffer.from(sse)]);
    t.equal(out, withoutUsageEvent(sse, eol), `eol ${JSON.stringify(eol)}`);
    t.notMatch(out, /"usage":\{/);
    t.match(out, /"usage":null/, 'usage:null chunks are ordinary chunks');
    t.same(m.usage, { prompt_tokens: 21, completion_tokens: 10 }, 'usage still metered');
  }
});

t.test('split at every byte offset: same output, usage, text; CRLF and LF', async (t) => {
  for (const eol of ['\n', '\r\n'] as const) {
    for (const opts of [drop, keep]) {
      const { sse } = buildStream({ eol, reasoning: ['think "a"'], toolArgs: ['{"city":', '"Paris"}'] });
      const buf = Buffer.from(sse);
      const expected = opts.dropUsageOnlyChunk ? withoutUsageEvent(sse, eol) : sse;
      let bad = 0;
      for (let i = 0; i <= buf.length; i++) {
        const m = createSseMeter(opts);
        const out = feed(m, splitAt(buf, i));
        if (out !== expected || m.usage?.completion_tokens !== 10 || !m.sawDone || m.completionText() !== '') bad++;
      }
      t.equal(bad, 0, `eol ${JSON.stringify(eol)} drop=${opts.dropUsageOnlyChunk}: ${buf.length + 1} splits`);
    }
  }
});

t.test('split into three at every pair of offsets around the usage event (inside "usage", inside \\r\\n)', async (t) => {
  const { sse } = buildStream({ eol: '\r\n' });
  const buf = Buffer.from(sse);
  const from = sse.indexOf('"choices":[]') - 40;
  const to = sse.indexOf('[DONE]') + 10;
  let bad = 0;
  let runs = 0;
  for (let i = from; i < to; i++) {
    for (let j = i; j < to; j++) {
      const m = createSseMeter(drop);
      runs++;
      if (feed(m, splitAt(buf, i, j)) !== withoutUsageEvent(sse, '\r\n') || m.usage?.prompt_tokens !== 21) bad++;
    }
  }
  t.equal(bad, 0, `${runs} three-way splits`);
});

t.test('one byte at a time, and collected text survives every split', async (t) => {
  const { sse, text } = buildStream({ usage: null, reasoning: ['r1 ', 'r2 '], toolArgs: ['{"a":', '"\\"q\\""}'] });
  const buf = Buffer.from(sse);
  const bytes = [...buf].map((b) => Buffer.from([b]));
  const m = createSseMeter(drop);
  t.equal(feed(m, bytes), sse);
  t.equal(m.completionText(), text);
  t.equal(m.usage, null);
  let bad = 0;
  for (let i = 0; i <= buf.length; i++) {
    const m2 = createSseMeter(keep);
    feed(m2, splitAt(buf, i));
    if (m2.completionText() !== text) bad++;
  }
  t.equal(bad, 0);
});

t.test('holds an incomplete event until its end arrives', async (t) => {
  const a = event({ choices: [{ delta: { content: 'a' } }] });
  const b = event({ choices: [{ delta: { content: 'b' } }] });
  const m = createSseMeter(keep);
  t.equal(m.push(Buffer.from(a + b.slice(0, 10)))?.toString(), a, 'complete event forwarded, partial held');
  t.equal(m.push(Buffer.from(b.slice(10, -1))), null, 'still incomplete (one LF missing)');
  t.equal(m.push(Buffer.from('\n'))?.toString(), b);
  t.equal(m.completionText(), 'ab');
  t.equal(m.end(), null);
});

t.test('common case forwards the chunk itself or a zero-copy view; held bytes are copies', async (t) => {
  const whole = Buffer.from(event({ choices: [{ delta: { content: 'a' } }] }) + event({ choices: [] }));
  t.equal(createSseMeter(keep).push(whole), whole, 'a chunk of whole events is returned as is');
  const a = event({ choices: [{ delta: { content: 'a' } }] });
  const chunk = Buffer.from(a + 'data: {"choices":[{"delta":{"content":"b"}}]}');
  const m = createSseMeter(keep);
  const out = m.push(chunk);
  t.ok(Buffer.isBuffer(out) && out.buffer === chunk.buffer, 'no copy of forwarded bytes');
  chunk.fill(0x78); // the upstream may reuse or free its chunk
  t.equal(m.push(Buffer.from('\n\n'))?.toString(), 'data: {"choices":[{"delta":{"content":"b"}}]}\n\n');
  t.equal(m.completionText(), 'ab');
});

t.test('an upstream that reuses its chunk buffer for new bytes is read anew on every push', async (t) => {
  // Same length, the key at another offset: a stale copy of the old bytes would look in the wrong place.
  const a = Buffer.from(event({ choices: [{ delta: { content: 'aaaa' } }], id: 'x1' }));
  const b = event({ id: 'x1', choices: [{ delta: { content: 'bbbb' } }] });
  t.equal(a.length, Buffer.byteLength(b));
  const m = createSseMeter(keep);
  m.push(a);
  a.write(b, 'utf8'); // same Buffer object, new event
  m.push(a);
  t.equal(m.completionText(), 'aaaabbbb');
});

t.test('usage: null is not usage, zeros are, partial objects are not, latest wins', async (t) => {
  const m = createSseMeter(keep);
  m.push(Buffer.from(event({ choices: [{ delta: { content: 'x' } }], usage: null })));
  t.equal(m.usage, null, '"usage":null');
  m.push(Buffer.from(event({ choices: [], usage: { prompt_tokens: 5 } })));
  t.equal(m.usage, null, 'no completion_tokens');
  m.push(Buffer.from(event({ choices: [], usage: { prompt_tokens: -1, completion_tokens: 2 } })));
  t.equal(m.usage, null, 'negative');
  m.push(Buffer.from(event({ choices: [], usage: { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 } })));
  t.same(m.usage, { prompt_tokens: 0, completion_tokens: 0 }, 'zeros are real usage');
  m.push(Buffer.from(event({ choices: [{ delta: { content: 'y' } }], usage: { prompt_tokens: 7, completion_tokens: 1 } })));
  m.push(Buffer.from(event({ choices: [{ delta: { content: 'z' } }], usage: { prompt_tokens: 7, completion_tokens: 2 } })));
  t.same(m.usage, { prompt_tokens: 7, completion_tokens: 2 }, 'latest cumulative usage wins');
  m.push(Buffer.from('data: {"choices":[],"usage" : {"prompt_tokens":7,"completion_tokens":3}}\n\n'));
  t.same(m.usage, { prompt_tokens: 7, completion_tokens: 3 }, 'whitespace around the colon');
  m.push(Buffer.from('data: {"usage":{"prompt_tokens":9,"completion_tokens":9}, broken\n\n'));
  t.same(m.usage, { prompt_tokens: 7, completion_tokens: 3 }, 'malformed JSON is not metered');
});

t.test('completionText covers only text after the latest usage', async (t) => {
  const m = createSseMeter(drop);
  m.push(Buffer.from(event({ choices: [{ delta: { content: 'before ' } }] })));
  t.equal(m.completionText(), 'before ');
  // vLLM continuous_usage_stats: content and usage in one event; not a usage-only chunk, so forwarded.
  const both = event({ choices: [{ delta: { content: 'with' } }], usage: { prompt_tokens: 3, completion_tokens: 2 } });
  t.equal(m.push(Buffer.from(both))?.toString(), both);
  t.equal(m.completionText(), '', 'text covered by usage is released');
  m.push(Buffer.from(event({ choices: [{ delta: { content: ' after' } }] })));
  t.equal(m.completionText(), ' after', 'stream cut after a mid-stream usage: bill usage + this');
});

t.test('drops a usage-only chunk in the middle of a chunk and keeps both neighbours', async (t) => {
  const a = event({ choices: [{ delta: {}, finish_reason: 'stop' }] }, '\r\n');
  const u = event({ choices: [], usage: { prompt_tokens: 1, completion_tokens: 1 } }, '\r\n');
  const d = 'data: [DONE]\r\n\r\n';
  const m = createSseMeter(drop);
  const chunk = Buffer.from(a + u + d);
  const out = m.push(chunk);
  if (!Array.isArray(out)) throw new Error('expected the two neighbours as separate views');
  t.same(out.map(String), [a, d], 'the events before and after, in order');
  t.ok(
    out.every((b) => b.buffer === chunk.buffer),
    'views of the upstream chunk: nothing copied',
  );
  const m2 = createSseMeter(drop);
  t.equal(m2.push(Buffer.from(u)), null, 'only the dropped event: nothing to forward');
  t.equal(m2.push(Buffer.from(d))?.toString(), d);
  const m3 = createSseMeter(drop);
  t.equal(m3.push(Buffer.from(u.slice(0, 30))), null);
  t.equal(m3.push(Buffer.from(u.slice(30) + d))?.toString(), d, 'dropped event that had held bytes');
  t.same(m3.usage, { prompt_tokens: 1, completion_tokens: 1 });
});

t.test('[DONE] detection', async (t) => {
  const m = createSseMeter(keep);
  m.push(Buffer.from('data: {"choices":[{"delta":{"content":"[DONE]"}}]}\n\n'));
  t.equal(m.sawDone, false, '[DONE] inside content is not the terminator');
  m.push(Buffer.from('data:[DONE]\n\n'));
  t.equal(m.sawDone, true, 'no space after the colon');
  const m2 = createSseMeter(keep);
  t.equal(m2.push(Buffer.from('data: [DONE]\n')), null, 'held: no blank line yet');
  t.equal(m2.end()?.toString(), 'data: [DONE]\n', 'end() forwards the tail as-is');
  t.equal(m2.sawDone, true, 'and meters it');
  t.equal(m2.end(), null, 'end() twice');
  t.throws(() => m2.push(Buffer.from('x')), /after end/);
});

t.test('usage in an unterminated tail is metered at end(); the usage-only chunk is dropped there too', async (t) => {
  for (const eol of ['', '\n', '\r\n']) {
    const tail = `data: {"choices":[],"usage":{"prompt_tokens":4,"completion_tokens":6}}${eol}`;
    const m = createSseMeter(drop);
    const hi = event({ choices: [{ delta: { content: 'Hi' } }] });
    t.equal(m.push(Buffer.from(hi + tail))?.toString(), hi, 'the complete event goes out');
    t.equal(m.end(), null, `not asked for: not forwarded (${JSON.stringify(eol)} after it)`);
    t.same(m.usage, { prompt_tokens: 4, completion_tokens: 6 });
    const k = createSseMeter(keep);
    t.equal(k.push(Buffer.from(tail)), null);
    t.equal(k.end()?.toString(), tail, 'asked for: forwarded as-is');
    t.same(k.usage, { prompt_tokens: 4, completion_tokens: 6 });
  }
  const m = createSseMeter(drop);
  const last = 'data: {"choices":[{"delta":{"content":"x"}}],"usage":{"prompt_tokens":4,"completion_tokens":6}}';
  m.push(Buffer.from(last));
  t.equal(m.end()?.toString(), last, 'a usage chunk with content is not the usage-only chunk: forwarded');
});

t.test('comments, keep-alives, other fields and multi-line data', async (t) => {
  const m = createSseMeter(drop);
  const ping = ': ping\n\n';
  const named = 'event: message\nid: 7\ndata: {"choices":[{"delta":{"content":"hi"}}]}\n\n';
  t.equal(m.push(Buffer.from(ping + named + '\n'))?.toString(), ping + named + '\n', 'stray blank line forwarded');
  t.equal(m.completionText(), 'hi');
  const multi = 'data: {"choices":[],\ndata: "usage":{"prompt_tokens":2,"completion_tokens":3}}\n\n';
  t.equal(m.push(Buffer.from(multi)), null, 'multi-line usage-only event dropped');
  t.same(m.usage, { prompt_tokens: 2, completion_tokens: 3 });
});

t.test('escaped quotes, backslashes and unicode escapes in content', async (t) => {
  const raw = 'data: {"choices":[{"delta":{"content":"say \\"hi\\" \\\\ \\u00e9 \\ud83d\\ude00 \\n end"}}]}\n\n';
  const m = createSseMeter(keep);
  m.push(Buffer.from(raw));
  t.equal(m.completionText(), 'say "hi" \\ é 😀 \n end');
  const m2 = createSseMeter(keep);
  m2.push(Buffer.from(event({ choices: [{ delta: { content: 'k: \\"content\\":\\"no\\" "content": "x"' } }] })));
  t.equal(m2.completionText(), 'k: \\"content\\":\\"no\\" "content": "x"', 'keys inside strings are text, not keys');
  const m3 = createSseMeter(keep);
  m3.push(Buffer.from('data: {"choices":[{"delta":{"content": "spaced", "reasoning":"r"},"logprobs":{"content":[{"token":"t"}]}}]}\n\n'));
  t.equal(m3.completionText(), 'spacedr', 'space after colon; logprobs.content array ignored');
  const m4 = createSseMeter(keep);
  m4.push(Buffer.from('data: {"choices":[{"delta":{"content":null,"tool_calls":[{"function":{"arguments":"{\\"a\\":1}"}}]}}]}\n\n'));
  t.equal(m4.completionText(), '{"a":1}', 'content null skipped, arguments kept');
});

t.test('a blank line at the stream start ends no event: it goes with the first event, dropped with it', async (t) => {
  // The meter tells events apart by searching back from a chunk's end; a line feed before any byte of
  // the stream must not read as the end of an event there either.
  for (const eol of ['\n', '\r\n']) {
    const u = `data: {"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2}}${eol}${eol}`;
    const d = `data: [DONE]${eol}${eol}`;
    const buf = Buffer.from(eol + u + d);
    let bad = 0;
    for (let i = 0; i <= buf.length; i++) {
      for (const turns of [1, 2]) {
        const m = createSseMeter(drop);
        const out = feedTurns(m, splitAt(buf, i), () => turns);
        if (out !== d || m.usage?.completion_tokens !== 2) bad++;
      }
    }
    t.equal(bad, 0, `eol ${JSON.stringify(eol)}: the leading blank line is dropped with the usage-only chunk`);
  }
});

t.test('event too large', async (t) => {
  const big = event({ choices: [{ delta: { content: 'x'.repeat(200) } }] });
  const code = { code: 'SSE_EVENT_TOO_LARGE' };
  t.throws(() => createSseMeter({ dropUsageOnlyChunk: false, maxPendingBytes: 100 }).push(Buffer.from(big)), code, 'complete event');
  const m = createSseMeter({ dropUsageOnlyChunk: false, maxPendingBytes: 100 });
  t.equal(m.push(Buffer.from(big.slice(0, 90))), null);
  t.throws(() => m.push(Buffer.from(big.slice(90, 150))), SseEventTooLargeError, 'held tail grows past the limit');
  const exact = createSseMeter({ dropUsageOnlyChunk: false, maxPendingBytes: Buffer.byteLength(big) });
  t.equal(exact.push(Buffer.from(big))?.toString(), big, 'an event of exactly the limit passes');
  const many = createSseMeter({ dropUsageOnlyChunk: false, maxPendingBytes: Buffer.byteLength(big) });
  t.equal(many.push(Buffer.from(big + big + big))?.length, 3 * Buffer.byteLength(big), 'the limit is per event, not per chunk');
  t.throws(() => createSseMeter({ dropUsageOnlyChunk: false, maxPendingBytes: 0 }), RangeError);
});

t.test('retained text is capped; the overflow is counted', async (t) => {
  const m = createSseMeter({ dropUsageOnlyChunk: false, maxTextBytes: 10 });
  m.push(Buffer.from(event({ choices: [{ delta: { content: '12345678' } }] })));
  m.push(Buffer.from(event({ choices: [{ delta: { content: 'abcdef' } }] })));
  t.equal(m.completionText(), '12345678');
  t.equal(m.droppedTextBytes, 6);
});

t.test('random partitions of a long stream (seeded)', async (t) => {
  const rnd = seededInts(0x2f6b1d);
  const pieces = Array.from({ length: 64 }, (_, i) => ['tok', ' "q"', '\\', '\n', 'é', '😀', '漢'][i % 7]! + i);
  const { sse, text } = buildStream({ eol: '\r\n', pieces, usage: null, done: false });
  const buf = Buffer.from(sse);
  let bad = 0;
  for (let run = 0; run < 500; run++) {
    const cuts: number[] = [];
    for (let at = rnd(64); at < buf.length; at += 1 + rnd(run % 2 === 0 ? 16 : 400)) cuts.push(at);
    const m = createSseMeter(drop);
    if (feed(m, splitAt(buf, ...cuts)) !== sse || m.completionText() !== text || m.sawDone) bad++;
  }
  t.equal(bad, 0);
});

/** Feeds `chunks` in turns of `turnSizes` chunks each (add… then flush), as the relay does; returns everything forwarded. */
function feedTurns(meter: SseMeter, chunks: Buffer[], turnSize: (turn: number) => number): string {
  const out: Buffer[] = [];
  const take = (o: ReturnType<SseMeter['flush']>) => {
    if (Buffer.isBuffer(o)) out.push(o);
    else if (o !== null) out.push(...o);
  };
  for (let i = 0, turn = 0; i < chunks.length; turn++) {
    const n = Math.max(1, turnSize(turn));
    for (const c of chunks.slice(i, i + n)) meter.add(c);
    i += n;
    take(meter.flush());
  }
  const tail = meter.end();
  if (tail !== null) out.push(tail);
  return Buffer.concat(out).toString('utf8');
}

const eventsOf = (sse: string): Buffer[] => sse.split(/(?<=\n\n)/).map((e) => Buffer.from(e));

t.test('turns of many chunks: the same bytes, usage and text as one chunk a turn', async (t) => {
  const cases = [
    { name: 'usage at the end', ...buildStream({ usageNullOnChunks: true }), usage: { prompt_tokens: 21, completion_tokens: 10 } },
    { name: 'no usage', ...buildStream({ usage: null, reasoning: ['r "1"'], toolArgs: ['{"a":', '1}'] }), usage: null },
  ];
  for (const c of cases) {
    const chunks = eventsOf(c.sse);
    for (const opts of [drop, keep]) {
      const expected = opts.dropUsageOnlyChunk ? withoutUsageEvent(c.sse) : c.sse;
      for (const size of [1, 2, 3, 5, chunks.length]) {
        const m = createSseMeter(opts);
        const label = `${c.name}, ${size} a turn, drop ${opts.dropUsageOnlyChunk}`;
        t.equal(
          feedTurns(m, chunks, () => size),
          expected,
          label,
        );
        t.same(m.usage, c.usage, `${label}: usage`);
        t.equal(m.completionText(), c.usage === null ? c.text : '', `${label}: text`);
        t.equal(m.sawDone, true, `${label}: [DONE]`);
      }
    }
  }
});

t.test('a turn with usage in the middle: only the text after it is kept, the last usage wins', async (t) => {
  const piece = (s: string) => event({ choices: [{ delta: { content: s } }] });
  const usage = (n: number) => event({ choices: [], usage: { prompt_tokens: 1, completion_tokens: n } });
  const m = createSseMeter(drop);
  const chunks = [piece('a'), piece('b'), usage(2), piece('c'), piece('d')].map((e) => Buffer.from(e));
  t.equal(
    feedTurns(m, chunks, () => 5),
    piece('a') + piece('b') + piece('c') + piece('d'),
    'usage-only chunk dropped',
  );
  t.same(m.usage, { prompt_tokens: 1, completion_tokens: 2 });
  t.equal(m.completionText(), 'cd', 'the text the usage does not cover');

  for (const after of [['c'], ['c', 'd', 'e']]) {
    // One event after the usage: found looking back from the end; three: found metering front to back.
    const done = 'data: [DONE]\n\n';
    const turn = [piece('a'), usage(2), ...after.map(piece), done];
    const mm = createSseMeter(drop);
    t.equal(
      feedTurns(
        mm,
        turn.map((e) => Buffer.from(e)),
        () => turn.length,
      ),
      [piece('a'), ...after.map(piece), done].join(''),
    );
    t.same(mm.usage, { prompt_tokens: 1, completion_tokens: 2 });
    t.equal(mm.completionText(), after.join(''), `${after.length} after the usage: their text only`);
    t.equal(mm.sawDone, true);
  }

  const two = createSseMeter(keep);
  feedTurns(
    two,
    [piece('a'), usage(1), piece('b'), usage(2), piece('c')].map((e) => Buffer.from(e)),
    () => 5,
  );
  t.same(two.usage, { prompt_tokens: 1, completion_tokens: 2 }, 'cumulative usage: the latest wins');
  t.equal(two.completionText(), 'c');
});

t.test('a turn whose usage is not valid still counts every piece of text', async (t) => {
  const piece = (s: string) => event({ choices: [{ delta: { content: s } }] });
  const chunks = [
    piece('a'),
    piece('b'),
    event({ choices: [], usage: { prompt_tokens: 'x', completion_tokens: 2 } }),
    'data: {"choices":[],"usage":{"prompt_tokens":1,\n\n',
    piece('c'),
  ].map((e) => Buffer.from(e));
  const m = createSseMeter(drop);
  t.equal(
    feedTurns(m, chunks, () => 5),
    chunks.join(''),
    'events without a valid usage are forwarded',
  );
  t.equal(m.usage, null);
  t.equal(m.completionText(), 'abc');
});

t.test('the events of a turn are kept by reference until flush; end() refuses an unflushed turn', async (t) => {
  const a = Buffer.from(event({ choices: [{ delta: { content: 'a' } }] }));
  const b = Buffer.from(event({ choices: [{ delta: { content: 'b' } }] }));
  const m = createSseMeter(keep);
  m.add(a);
  m.add(b);
  t.throws(() => m.end(), /before flush/);
  const out = m.flush();
  t.ok(Array.isArray(out) && out[0] === a && out[1] === b, 'each chunk forwarded as itself, no copy');
  t.equal(m.flush(), null, 'nothing left');
  t.equal(m.end(), null);
});

t.test('random partitions and random turns of a long stream with usage (seeded)', async (t) => {
  const rnd = seededInts(0x51ed27);
  const pieces = Array.from({ length: 48 }, (_, i) => ['tok', ' "q"', '\\', '\n', 'é', '😀', '漢'][i % 7]! + i);
  const full = buildStream({ eol: '\r\n', pieces, usageNullOnChunks: true, usage: { prompt_tokens: 5, completion_tokens: 48 } });
  const buf = Buffer.from(full.sse);
  const expected = withoutUsageEvent(full.sse, '\r\n');
  let bad = 0;
  for (let run = 0; run < 300; run++) {
    // Cut the stream short in a third of the runs: the text after the last complete usage must be exact.
    const cutAt = run % 3 === 0 ? rnd(buf.length) : buf.length;
    const cuts: number[] = [];
    for (let at = rnd(64); at < cutAt; at += 1 + rnd(run % 2 === 0 ? 16 : 400)) cuts.push(at);
    const chunks = splitAt(buf.subarray(0, cutAt), ...cuts);
    const m = createSseMeter(drop);
    const out = feedTurns(m, chunks, () => 1 + rnd(12));
    const ref = createSseMeter(drop);
    const refOut = feed(ref, chunks);
    if (out !== refOut || JSON.stringify(m.usage) !== JSON.stringify(ref.usage) || m.completionText() !== ref.completionText()) bad++;
    if (cutAt === buf.length && (out !== expected || m.usage?.completion_tokens !== 48 || m.completionText() !== '')) bad++;
  }
  t.equal(bad, 0, 'turns give what one chunk a turn gives');
});

t.test('in a turn of many events only the last usage-only chunk is dropped (the one a stream ends with)', async (t) => {
  const piece = (s: string) => event({ choices: [{ delta: { content: s } }] });
  const usage = (n: number) => event({ choices: [], usage: { prompt_tokens: 1, completion_tokens: n } });
  const events = [piece('a'), usage(1), piece('b'), usage(2), 'data: [DONE]\n\n'];
  const m = createSseMeter(drop);
  t.equal(
    feedTurns(
      m,
      events.map((e) => Buffer.from(e)),
      () => events.length,
    ),
    piece('a') + usage(1) + piece('b') + 'data: [DONE]\n\n',
  );
  t.same(m.usage, { prompt_tokens: 1, completion_tokens: 2 });
  const paced = createSseMeter(drop);
  t.equal(
    feedTurns(
      paced,
      events.map((e) => Buffer.from(e)),
      () => 1,
    ),
    piece('a') + piece('b') + 'data: [DONE]\n\n',
    'one event a turn: each is dropped',
  );
});

t.test('a turn of one large chunk (a burst, as undici hands it over) is metered as the same events a chunk each', async (t) => {
  const rnd = seededInts(0xb0057);
  let bad = 0;
  let bursts = 0;
  for (let run = 0; run < 400; run++) {
    const eol = run % 2 === 0 ? '\n' : '\r\n';
    const piece = (s: string) => event({ object: 'chat.completion.chunk', choices: [{ delta: { content: s } }], usage: null }, eol);
    const usage = (n: number, content?: string) =>
      event({ choices: content === undefined ? [] : [{ delta: { content } }], usage: { prompt_tokens: 3, completion_tokens: n } }, eol);
    // A turn before the burst: the meter reads its last bytes as the ones before the burst's first.
    const before = [piece('p0'), piece('p1')];
    const events: string[] = [];
    const n = 20 + rnd(40);
    for (let i = 0; i < n; i++) {
      const r = rnd(20);
      if (r === 0) events.push(`: keep-alive${eol}${eol}`);
      else if (r === 1) events.push(usage(i, rnd(2) === 0 ? undefined : `u${i}`));
      else if (r === 2)
        events.push(eol); // a stray blank line: an event of its own, with no data
      else if (r === 3) events.push(`event: x${eol}data: {"choices":[{"delta":{"content":"m${i}"}}],${eol}data: "usage":null}${eol}${eol}`);
      else events.push(piece(`t${i} "q" é`));
    }
    const tail = rnd(4);
    if (tail === 0) events.push(usage(n), `data: [DONE]${eol}${eol}`);
    else if (tail === 1) events.push(usage(n, 'last'), `: c${eol}${eol}`, `data: [DONE]${eol}${eol}`);
    else if (tail === 2) events.push(usage(n));
    else events.push(`data: [DONE]${eol}${eol}`);
    const whole = Buffer.from(events.join(''));
    if (whole.length < 2048) continue; // a burst of many events
    bursts++;
    for (const opts of [drop, keep]) {
      const ref = createSseMeter(opts);
      const refOut = feedTurns(
        ref,
        [...before, ...events].map((e) => Buffer.from(e)),
        (turn) => (turn === 0 ? before.length : events.length),
      );
      const m = createSseMeter(opts);
      const out = feedTurns(m, [...before.map((e) => Buffer.from(e)), whole], (turn) => (turn === 0 ? before.length : 1));
      if (
        out !== refOut ||
        JSON.stringify(m.usage) !== JSON.stringify(ref.usage) ||
        m.completionText() !== ref.completionText() ||
        m.sawDone !== ref.sawDone
      )
        bad++;
    }
  }
  t.ok(bursts > 300, `${bursts} bursts`);
  t.equal(bad, 0, 'same bytes, usage, text and [DONE]');
});
