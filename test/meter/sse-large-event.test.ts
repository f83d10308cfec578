// /v1/responses and /v1/completions events larger than the hold bound (sse-scanner.ts maxPassedEventBytes,
// sse-large-event.ts): passed through byte for byte, in order, however the bytes are cut into chunks and
// turns, and read for their `response.usage` and top-level `delta` (completions: top-level `usage`, text
// left unread) without being kept.
import t from 'tap';
import { createSseMeter, SseEventTooLargeError, type SseMeter, type SseMeterOptions } from '../../src/meter/sse-scanner.ts';
import { COMPLETIONS, RESPONSES } from '../../src/meter/formats.ts';
import { seededInts } from '../helpers/seeded.ts';

const ev = (type: string, fields: Record<string, unknown>, eol = '\n') =>
  `event: ${type}${eol}data: ${JSON.stringify({ type, ...fields })}${eol}${eol}`;
const usage = {
  input_tokens: 11,
  input_tokens_details: { cached_tokens: 0 },
  output_tokens: 7,
  output_tokens_details: { reasoning_tokens: 0 },
};
const MAX = 300;
const opts: SseMeterOptions = { dropUsageOnlyChunk: true, format: RESPONSES, maxPendingBytes: MAX, maxPassedEventBytes: 100_000 };

/** A Responses stream whose text repeats and image are far over MAX; `"usage"` decoys in strings and a top-level usage that is not the response's. */
function stream(eol = '\n', withUsage = true): string {
  const text = 'é "quoted" \\ back\nslash usage":{"input_tokens":999} '.repeat(40);
  const image = 'iVBORw0KGgo'.repeat(400);
  return [
    ev('response.created', { response: { id: 'r', usage: null, instructions: 'x'.repeat(50) } }, eol),
    ev('response.output_text.delta', { delta: 'Hel' }, eol),
    ev('response.output_text.delta', { delta: 'lo' }, eol),
    ev('response.image_generation_call.partial_image', { usage: { input_tokens: 1, output_tokens: 1 }, partial_image_b64: image }, eol),
    ev('response.output_text.done', { text }, eol),
    ev(
      'response.completed',
      { response: { id: 'r', output: [{ content: [{ text }] }, { result: image }], ...(withUsage && { usage }), user: null } },
      eol,
    ),
  ].join('');
}

function out(o: ReturnType<SseMeter['flush']>, into: Buffer[]): void {
  if (Buffer.isBuffer(o)) into.push(o);
  else if (o !== null) into.push(...o);
}

/** Feeds `sse` cut at random points (chunks up to `maxChunk`), several chunks a turn at random; returns what was forwarded. */
function feedRandom(m: SseMeter, sse: Buffer, rand: (n: number) => number, maxChunk: number): string {
  const got: Buffer[] = [];
  for (let at = 0; at < sse.length;) {
    const turn = 1 + rand(3);
    for (let k = 0; k < turn && at < sse.length; k++) {
      const n = 1 + rand(maxChunk);
      m.add(sse.subarray(at, at + n));
      at += n;
    }
    out(m.flush(), got);
  }
  const tail = m.end();
  if (tail) got.push(tail);
  return Buffer.concat(got).toString('utf8');
}

t.test('events past the hold bound pass through byte for byte; the response usage is read from the passed event', async (t) => {
  for (const eol of ['\n', '\r\n']) {
    const sse = Buffer.from(stream(eol));
    t.ok(sse.length > 10 * MAX);
    const whole = createSseMeter(opts);
    const got: Buffer[] = [];
    out(whole.push(sse), got);
    t.equal(whole.end(), null);
    t.equal(Buffer.concat(got).toString(), sse.toString(), `one chunk (eol ${JSON.stringify(eol)})`);
    t.same(whole.usage, { prompt_tokens: 11, completion_tokens: 7 });
    t.equal(whole.completionText(), '', 'the usage covers the deltas');
    const rand = seededInts(eol.length);
    let bad = 0;
    for (let i = 0; i < 300; i++) {
      const m = createSseMeter(opts);
      const forwarded = feedRandom(m, sse, rand, i % 2 === 0 ? 40 : 2000);
      if (forwarded !== sse.toString() || m.usage?.completion_tokens !== 7 || m.completionText() !== '' || m.midEvent) bad++;
    }
    t.equal(bad, 0, `300 random cuts into chunks and turns (eol ${JSON.stringify(eol)})`);
  }
});

t.test('without usage: decoys are not usage, the text of a passed delta is counted, escapes split across chunks included', async (t) => {
  const big = 'a\\"b\\u00e9\\n'.repeat(60); // raw JSON escapes: a"bé + LF, 60 times
  const sse = Buffer.from(
    stream('\n', false) + `event: response.output_text.delta\ndata: {"type":"response.output_text.delta","delta":"${big}"}\n\n`,
  );
  const rand = seededInts(7);
  let bad = 0;
  for (let i = 0; i < 200; i++) {
    const m = createSseMeter(opts);
    const forwarded = feedRandom(m, sse, rand, 1 + (i % 50));
    if (forwarded !== sse.toString() || m.usage !== null || m.completionText() !== `Hello${'a"bé\n'.repeat(60)}`) bad++;
  }
  t.equal(bad, 0, 'usage null, text = small deltas + the passed delta, decoded');
});

t.test('a passed event larger than maxPassedEventBytes throws; chat keeps the hold bound', async (t) => {
  const m = createSseMeter({ ...opts, maxPassedEventBytes: 1000 });
  const huge = Buffer.from(`data: {"type":"x","partial_image_b64":"${'A'.repeat(5000)}`);
  t.throws(() => {
    for (let at = 0; at < huge.length; at += 100) m.push(huge.subarray(at, at + 100));
  }, SseEventTooLargeError);
  t.throws(
    () => createSseMeter({ ...opts, maxPassedEventBytes: 1000 }).push(Buffer.from(stream())),
    { code: 'SSE_EVENT_TOO_LARGE', limit: 1000 },
    'whole in one chunk too',
  );
  const chat = createSseMeter({ dropUsageOnlyChunk: true, maxPendingBytes: MAX });
  const tooLarge = { code: 'SSE_EVENT_TOO_LARGE', limit: MAX };
  t.throws(() => chat.push(huge), tooLarge, 'no maxPassedEventBytes: the event bound cuts');
  t.throws(() => createSseMeter({ ...opts, maxPassedEventBytes: -1 }), RangeError);
});

t.test('a stream ending inside a passed event: usage only when its JSON was whole; midEvent tells the relay', async (t) => {
  const completed = ev('response.completed', { response: { output: [{ result: 'A'.repeat(1000) }], usage } });
  // Cut right after the usage object: it was read whole, but the event's JSON was not.
  const cut = Buffer.from(completed.slice(0, completed.indexOf('"usage"') + 8 + JSON.stringify(usage).length));
  const m = createSseMeter(opts);
  out(m.push(cut), []);
  t.equal(m.midEvent, true);
  t.equal(m.end(), null, 'nothing held: it was passed');
  t.equal(m.usage, null, 'a usage object whose event was cut is not taken');
  const noBlank = Buffer.from(completed.trimEnd());
  const m2 = createSseMeter(opts);
  out(m2.push(noBlank), []);
  t.equal(m2.end(), null);
  t.same(m2.usage, { prompt_tokens: 11, completion_tokens: 7 }, 'whole data without the final blank line counts, as a held tail does');
});

t.test('differential: the streaming reader finds what JSON.parse finds, over random documents cut at random', async (t) => {
  const rand = seededInts(20261203);
  const pick = <T>(xs: readonly T[]): T => xs[rand(xs.length)]!;
  const pieces = ['a', '"', '\\', '\n', 'é', '😀', 'usage', '"usage":{', 'response', '{', '}', '[', ']', ':', ',', ' ', 'delta'];
  const str = () => Array.from({ length: rand(6) }, () => pick(pieces)).join('');
  const keys = ['usage', 'response', 'delta', 'type', 'output', 'text', 'x'];
  const value = (depth: number): unknown => {
    const k = rand(depth > 3 ? 3 : 6);
    if (k === 0) return str();
    if (k === 1) return rand(1000);
    if (k === 2) return pick([null, true, false]);
    if (k === 3) return Array.from({ length: rand(3) }, () => value(depth + 1));
    if (k === 4) return { input_tokens: rand(100), output_tokens: rand(100) };
    const o: Record<string, unknown> = {};
    for (let i = rand(4); i > 0; i--) o[pick(keys)] = value(depth + 1);
    return o;
  };
  let bad = 0;
  let withUsage = 0;
  for (let run = 0; run < 400; run++) {
    const doc: Record<string, unknown> = { type: 'x' };
    for (let i = rand(4); i > 0; i--) doc[pick(keys)] = value(1);
    if (rand(2) === 0) {
      // A response object with a usage among other members (the usage sometimes not an object, or a bad one).
      const response: Record<string, unknown> = {};
      for (let i = rand(3); i > 0; i--) response[pick(keys)] = value(2);
      response['usage'] = rand(5) === 0 ? value(2) : { input_tokens: rand(100), output_tokens: rand(100), note: str() };
      for (let i = rand(3); i > 0; i--) response[pick(['output', 'x', 'user'])] = value(2);
      doc['response'] = response;
      if (rand(3) === 0) doc['tail'] = value(1);
    }
    // Padding first, so the event is past MAX and passed through, whatever else it holds.
    const data = JSON.stringify({ pad: 'p'.repeat(MAX), ...doc });
    const parsed = JSON.parse(data) as Record<string, unknown>;
    const want = RESPONSES.eventUsage(parsed);
    if (want) withUsage++;
    const delta = typeof parsed['delta'] === 'string' ? parsed['delta'] : '';
    const sse = Buffer.from(`event: x\ndata: ${data}\n\n`);
    const m = createSseMeter(opts);
    const forwarded = feedRandom(m, sse, rand, 1 + rand(200));
    const ok =
      forwarded === sse.toString() && JSON.stringify(m.usage) === JSON.stringify(want) && (want ? '' : delta) === m.completionText();
    if (!ok) bad++;
  }
  t.equal(bad, 0, '400 documents');
  t.ok(withUsage > 20, `${withUsage} of them with a response usage`);
});

/** A completions chunk as vLLM streams it: `text`, then `logprobs` (null, or vLLM's object), then `usage`. */
const cmpl = (text: string, logprobs: unknown, usage: unknown, choices = true) =>
  `data: ${JSON.stringify({
    id: 'c',
    object: 'text_completion',
    choices: choices ? [{ index: 0, text, logprobs, finish_reason: null }] : [],
    usage,
  })}\n\n`;

t.test('completions: a passed echo chunk is relayed byte for byte, its usage read, its text (the echoed prompt) not', async (t) => {
  const copts: SseMeterOptions = { dropUsageOnlyChunk: false, format: COMPLETIONS, maxPendingBytes: MAX, maxPassedEventBytes: 100_000 };
  const prompt = 'usage":{"prompt_tokens":999} text "x" '.repeat(20);
  const tokens = Array.from({ length: 60 }, (_, i) => `t${i}`);
  const logprobs = {
    text_offset: tokens.map((_, i) => i),
    tokens,
    top_logprobs: tokens.map((tk) => ({ [tk]: -1.5, usage: -2, text: -3 })),
  };
  const u = { prompt_tokens: 60, completion_tokens: 3, total_tokens: 63 };
  const final = cmpl('', null, u, false);
  const cases: [string, string, unknown, string, boolean][] = [
    // [name, stream, usage, completionText, unreadText]
    ['usage-only chunk at the end', cmpl(prompt + 'tok0 ', logprobs, null) + cmpl('tok1 ', null, null) + final, u, '', true],
    ['continuous usage on the passed chunk', cmpl(prompt + 'tok0 ', logprobs, u) + cmpl('tok1 ', null, null), u, 'tok1 ', true],
    ['no usage', cmpl(prompt + 'tok0 ', logprobs, null) + cmpl('tok1 ', null, null), null, 'tok1 ', true],
    ['small chunks only', cmpl('tok0 ', null, null) + final, u, '', false],
  ];
  for (const [name, stream, want, text, unread] of cases) {
    const sse = Buffer.from(`${stream}data: [DONE]\n\n`);
    const rand = seededInts(sse.length);
    let bad = 0;
    for (let i = 0; i < 200; i++) {
      const m = createSseMeter(copts);
      const forwarded = feedRandom(m, sse, rand, 1 + (i % 2 === 0 ? 40 : 2000));
      const usageOk = JSON.stringify(m.usage) === JSON.stringify(want === null ? null : { prompt_tokens: 60, completion_tokens: 3 });
      if (forwarded !== sse.toString() || !usageOk || m.completionText() !== text || m.unreadText !== unread || !m.sawDone) bad++;
    }
    t.equal(bad, 0, `${name}: 200 random cuts into chunks and turns`);
  }
  // Several choices asked for: a usage on a chunk with choices may be one choice's (sse-scanner.ts severalChoices).
  const several = createSseMeter({ ...copts, severalChoices: true });
  out(several.push(Buffer.from(cmpl(prompt, logprobs, u))), []);
  t.equal(several.usage, null, 'several choices: the usage of a passed chunk with choices is not taken');
  out(several.push(Buffer.from(final)), []);
  t.same(several.usage, { prompt_tokens: 60, completion_tokens: 3 }, 'the usage-only chunk is');
  const cut = createSseMeter({ ...copts, maxPassedEventBytes: 1000 });
  t.throws(
    () => cut.push(Buffer.from(cmpl(prompt, logprobs, null))),
    { code: 'SSE_EVENT_TOO_LARGE', limit: 1000 },
    'past maxPassedEventBytes',
  );
});
