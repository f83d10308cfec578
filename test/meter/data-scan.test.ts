import t from 'tap';
import { findStringEnd, KeyFinder, scanData, scanTruncated, UsageFinder } from '../../src/meter/data-scan.ts';
import { CHAT, COMPLETIONS, RESPONSES } from '../../src/meter/formats.ts';
import { TextCollector } from '../../src/meter/text-slices.ts';

function scan(json: string): { usage: boolean; text: string } {
  const c = new TextCollector();
  // Surrounded by bytes that must be ignored: the scan stays inside [start, end).
  const buf = Buffer.from(`"content":"OUT"${json}"content":"OUT"`);
  const usage = scanData(buf, 15, buf.length - 15, c);
  return { usage, text: c.text() };
}

t.test('findStringEnd honours backslash escapes', async (t) => {
  const b = (s: string): Buffer => Buffer.from(s);
  t.equal(findStringEnd(b('abc"'), 0), 3);
  t.equal(findStringEnd(b('a\\"b"'), 0), 4, 'escaped quote');
  t.equal(findStringEnd(b('a\\\\"b"'), 0), 3, 'escaped backslash then real quote');
  t.equal(findStringEnd(b('a\\\\\\"b"'), 0), 6, 'three backslashes: quote escaped');
  t.equal(findStringEnd(b('\\"'), 0), -1, 'unterminated');
});

t.test('collects string values of text keys only', async (t) => {
  t.same(scan('{"content":"a\\u00e9","id":"content","x":{"content":1},"reasoning_content":"R"}'), { usage: false, text: 'aéR' });
  t.same(scan('{"reasoning":"r","refusal":"no","function":{"name":"f","arguments":"{\\"a\\":1}"}}'), { usage: false, text: 'rno{"a":1}' });
  t.same(
    scan('{"content" : "spaced","logprobs":{"content":[{"token":"t"}]}}'),
    { usage: false, text: 'spaced' },
    'whitespace; arrays skipped',
  );
  t.same(scan('{"content":null,"contents":"no","reasoning_contentx":"no"}'), { usage: false, text: '' }, 'null values, longer keys');
  t.same(
    scan('{"content":"say \\"content\\":\\"x\\" and \\\\"}'),
    { usage: false, text: 'say "content":"x" and \\' },
    'key-like text inside a value',
  );
  t.same(scan('{"k\\"content":"v"}'), { usage: false, text: '' }, 'a key ending in an escaped quote is not "content"');
  t.same(scan('{"content":"ok"} {"content":"never closed'), { usage: false, text: 'ok' }, 'unterminated string ends the scan');
  t.same(scan('{"content'), { usage: false, text: '' }, 'truncated key');
  t.same(scan('{"content":'), { usage: false, text: '' }, 'truncated after the colon');
  t.same(scan('{"content":"abc'), { usage: false, text: '' }, 'value runs past the end');
  t.same(scan('\\\\"content":"x"'), { usage: false, text: 'x' }, 'escaped backslash before the quote: a real key');
  t.same(scan('\\"content":"x"'), { usage: false, text: '' }, 'escaped quote: not a key');
});

t.test('usage: object yes, null no', async (t) => {
  t.equal(scan('{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2}}').usage, true);
  t.equal(scan('{"choices":[],"usage" :\t{}}').usage, true, 'any object: validity is checked after parsing');
  t.equal(scan('{"choices":[{"delta":{"content":"x"}}],"usage":null}').usage, false);
  t.equal(scan('{"content":"\\"usage\\":{"}').usage, false, 'inside a string');
  t.equal(scan('{"usage_x":{}}').usage, false);
  t.equal(scan('{"usage":').usage, false, 'truncated');
});

t.test('one KeyFinder shared by the events of a buffer gives what a fresh one per event gives', async (t) => {
  const events = [
    '{"id":"a","choices":[{"delta":{"role":"assistant","content":""}}],"usage":null}',
    '{"id":"a","choices":[{"delta":{}}],"usage":null}', // no candidate: the search runs into the next event
    '{"id":"a","choices":[{"delta":{"content":"x\\"y"}}],"usage":null}',
    '{"id":"a","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2}}',
    '{"id":"a","choices":[{"delta":{"reasoning":"r","content":"z"}}]}',
  ];
  const buf = Buffer.from(events.join('\n\n'));
  const ranges: [number, number][] = [];
  let at = 0;
  for (const e of events) {
    ranges.push([at, at + Buffer.byteLength(e)]);
    at += Buffer.byteLength(e) + 2;
  }
  const shared = new KeyFinder();
  const got = ranges.map(([a, b]) => {
    const c = new TextCollector();
    return { usage: scanData(buf, a, b, c, shared), text: c.text() };
  });
  const fresh = ranges.map(([a, b]) => {
    const c = new TextCollector();
    return { usage: scanData(buf, a, b, c), text: c.text() };
  });
  t.same(got, fresh);
  t.same(
    got.map((g) => g.text),
    ['', '', 'x"y', '', 'rz'],
  );
  t.same(
    got.map((g) => g.usage),
    [false, false, false, true, false],
  );
});

t.test('a key cut by the end of its range is found in neither range', async (t) => {
  const buf = Buffer.from('{"a":1,"content":"x"}');
  const cut = buf.indexOf(':"x"');
  const f = new KeyFinder();
  const a = new TextCollector();
  const b = new TextCollector();
  t.equal(scanData(buf, 0, cut, a, f), false);
  t.equal(scanData(buf, cut, buf.length, b, f), false);
  t.same([a.text(), b.text()], ['', ''], 'the key lies in the first range, its value in the second');
  const u = Buffer.from('{"usage":{"prompt_tokens":1}}');
  t.equal(scanData(u, 0, u.indexOf('{', 2), new TextCollector(), f), false, 'a usage object that starts past the end is not seen');
});

t.test('release() forgets the copy: a buffer rewritten in place is read again', async (t) => {
  // Same length, the key at another offset: a stale copy would look for it where it no longer is.
  const before = '{"content":"aaaa","x":"zzzzzz"}';
  const after = '{"x":"z","refusal":"bbbbbbbbb"}';
  t.equal(before.length, after.length);
  const buf = Buffer.from(before);
  const f = new KeyFinder();
  const c = new TextCollector();
  scanData(buf, 0, buf.length, c, f);
  f.release();
  buf.write(after, 'latin1');
  scanData(buf, 0, buf.length, c, f);
  t.equal(c.text(), 'aaaabbbbbbbbb');
});

t.test('UsageFinder: a usage key holding an object, in one event or several of one buffer asked from the end', async (t) => {
  const has = (s: string) => new UsageFinder().hasObject(Buffer.from(s), 0, Buffer.byteLength(s));
  t.equal(has('{"choices":[],"usage":{"prompt_tokens":1}}'), true);
  t.equal(has('{"usage" :\n {"prompt_tokens":1}}'), true, 'whitespace around the colon');
  t.equal(has('{"choices":[{"delta":{"content":"x"}}],"usage":null}'), false, 'usage null');
  t.equal(has('{"usage_stats":{"a":1}}'), false, 'a longer key');
  t.equal(has('{"content":"usage"}'), false, 'the word as a value');
  t.equal(has('{"content":"say \\"usage\\":{ here"}'), false, 'an escaped key inside a string');
  t.equal(has('{"content":"a\\\\","usage":{"prompt_tokens":1}}'), true, 'an escaped backslash before the key');
  t.equal(has('{"k":"a\\"usage":{"p":1}}'), false, 'an escaped quote cannot open the key (not JSON: never parsed)');
  t.equal(has('{"usage":null,"response":{"usage":{"input_tokens":1}}}'), true, 'a nested usage behind a null one');

  // Events of one buffer asked last to first (as the meter does) get the answers a fresh finder gives.
  const events = ['{"usage":null}', '{"content":"a"}', '{"choices":[],"usage":{"p":1}}', '{"usage":null}', '{"x":1}'];
  const buf = Buffer.from(events.join('\n'));
  const shared = new UsageFinder();
  const starts: number[] = [];
  events.reduce((at, e) => (starts.push(at), at + Buffer.byteLength(e) + 1), 0);
  for (let i = events.length - 1; i >= 0; i--) {
    const end = starts[i]! + Buffer.byteLength(events[i]!);
    t.equal(shared.hasObject(buf, starts[i]!, end), has(events[i]!), `event ${i}`);
  }
});

t.test('scanTruncated: a body cut mid-way gives its complete text values and the cut one up to the cut', async (t) => {
  const text = (body: string, candidate = CHAT.bodyCandidate) => {
    const c = new TextCollector();
    scanTruncated(Buffer.from(body), c, candidate);
    return c.text();
  };
  const chat = '{"id":"x","choices":[{"index":0,"message":{"role":"assistant","reasoning_content":"think","content":"Hello wor';
  t.equal(text(chat), 'thinkHello wor', 'the cut string counts up to the cut');
  t.equal(text(chat.slice(0, chat.indexOf('"content"') + 3)), 'think', 'cut inside a key');
  t.equal(text('{"choices":[{"message":{"content":"a\\n b\\'), 'a\n b', 'a backslash cut in half is dropped');
  t.equal(text('{"choices":[{"message":{"content":"caf\\u00'), 'caf', 'a \\u escape cut in half is dropped');
  t.equal(text('{"choices":[{"message":{"content":"caf\\u00e9'), 'café', 'a whole \\u escape at the cut is kept');
  t.equal(text('{"choices":[{"message":{"content":"a\\\\'), 'a\\', 'an escaped backslash at the cut is kept');
  t.equal(
    text('{"choices":[{"message":{"content":"done"},"logprobs":{"content":[{"token":"x"}]}}],"usage":{"prompt_tokens":1'),
    'done',
    'arrays and a usage object are not text',
  );
  t.equal(text('{"choices":[{"text":"abc","index":0},{"text":"de', COMPLETIONS.bodyCandidate), 'abcde', 'completions');
  t.equal(
    text(
      '{"id":"resp_1","instructions":"say \\"text\\":\\"no\\"","text":{"format":{"type":"text"}},"output":[{"type":"reasoning","summary":[{"type":"summary_text","text":"S"}]},' +
        '{"type":"function_call","arguments":"{}"},{"type":"message","content":[{"type":"output_text","text":"Hi th',
      RESPONSES.bodyCandidate,
    ),
    'S{}Hi th',
    'responses: output item text, summaries and arguments; not the echoed instructions, not text.format',
  );
});

t.test('reasoning under both reasoning_content and its alias reasoning in one object is counted once', async (t) => {
  const delta = (d: string) => `{"id":"c","choices":[{"index":0,"delta":${d},"finish_reason":null}]}`;
  t.same(scan(delta('{"reasoning_content":"think","reasoning":"think"}')).text, 'think', 'the same text twice: once');
  t.same(scan(delta('{"reasoning":"think","reasoning_content":"think"}')).text, 'think', 'either order');
  t.same(scan(delta('{"content":"a","reasoning_content":"xy","reasoning":"xyz"}')).text, 'axyz', 'the longer, the second here');
  t.same(scan(delta('{"reasoning_content":"xyz","reasoning":"xy","content":"a"}')).text, 'xyza', 'the longer, the first here');
  t.same(
    scan(delta('{"reasoning_content":"xy","content":"a","reasoning":"xyz","tool_calls":[]}')).text,
    'xyaxyz',
    'content appended between them: the longer second cannot replace the first, both count (never less)',
  );
  t.same(scan(delta('{"reasoning_content":"r","content":"a","reasoning":"r"}')).text, 'ra', 'content between, the same text: once');
  t.same(
    scan('{"choices":[{"index":0,"delta":{"reasoning_content":"A"}},{"index":1,"delta":{"reasoning":"B"}}]}').text,
    'AB',
    'different choices (a brace between): both',
  );
  t.same(scan(delta('{"reasoning":"r1","reasoning":"r2"}')).text, 'r1r2', 'the same name twice: not aliases, both');
  t.same(scan(delta('{"reasoning_content":"r","role":"{","reasoning":"r"}')).text, 'rr', 'a brace in a string between: both, never less');
  t.same(
    scan(delta('{"reasoning_content":"r","refusal":"no","reasoning":"r"}')).text,
    'rno',
    'a refusal between: appended, not reasoning; the pair once',
  );
  // Each event is scanned on its own: the alias in the next event is its own delta.
  const c = new TextCollector();
  const buf = Buffer.from(delta('{"reasoning_content":"a"}') + delta('{"reasoning":"a"}'));
  const finder = new KeyFinder();
  const first = delta('{"reasoning_content":"a"}').length;
  scanData(buf, 0, first, c, finder);
  scanData(buf, first, buf.length, c, finder);
  t.equal(c.text(), 'aa', 'one name per event: both events count');
  // Past the keep cap, the pair is still counted once: what the first left in overflow is taken back.
  const capped = new TextCollector({ maxBytes: 4 });
  scanData(Buffer.from(delta('{"reasoning":"abcdef","reasoning_content":"abcdefg"}')), 0, 100, capped);
  t.equal(capped.overflowBytes, 7, 'overflow: only the longer one');
});

t.test('scanTruncated: reasoning under both names in one message is counted once, the cut one too', async (t) => {
  const text = (body: string) => {
    const c = new TextCollector();
    scanTruncated(Buffer.from(body), c, CHAT.bodyCandidate);
    return c.text();
  };
  const head = '{"id":"x","choices":[{"index":0,"message":{"role":"assistant","reasoning_content":"think hard",';
  t.equal(text(`${head}"reasoning":"think hard","content":"Hel`), 'think hardHel', 'both whole, then the cut content');
  t.equal(text(`${head}"reasoning":"think h`), 'think hard', 'the alias cut: the longer, whole one');
});
