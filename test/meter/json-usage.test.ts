// JsonUsageScanner: the top-level usage of a JSON body read in chunks, any size, any key order; never a
// "usage" inside a string or a nested object.
import t from 'tap';
import { JsonUsageScanner } from '../../src/meter/json-usage.ts';

/** Feeds `text` in chunks of `size` bytes; returns the found usage JSON. */
function scan(text: string, size: number): string | null {
  const s = new JsonUsageScanner();
  const buf = Buffer.from(text);
  for (let i = 0; i < buf.length; i += size) s.push(buf.subarray(i, i + size));
  return s.result;
}

const USAGE = { prompt_tokens: 12, completion_tokens: 34, total_tokens: 46, prompt_tokens_details: { cached_tokens: 0 } };

t.test('usage at the end, in the middle, or first, split at every chunk size', async (t) => {
  const bodies = [
    { id: 'x', choices: [{ message: { content: 'hello' } }], usage: USAGE },
    { id: 'x', usage: USAGE, choices: [{ message: { content: 'hello' } }], prompt_logprobs: [[1, 2]] },
    { usage: USAGE, id: 'x' },
  ];
  for (const b of bodies) {
    const text = JSON.stringify(b, null, 1);
    for (const size of [1, 2, 3, 7, 64, 100_000])
      t.same(JSON.parse(scan(text, size) ?? 'null'), USAGE, `order ${Object.keys(b).join(',')} chunk ${size}`);
  }
});

t.test('"usage" inside strings, escaped quotes and nested objects is not the usage', async (t) => {
  const decoy = {
    id: 'say "usage": {"prompt_tokens": 1}',
    choices: [{ message: { content: 'a \\"usage\\": {} \\\\', tool_calls: [{ usage: { prompt_tokens: 999, completion_tokens: 999 } }] } }],
    meta: { usage: { prompt_tokens: 5, completion_tokens: 5 } },
    usage: USAGE,
  };
  t.same(JSON.parse(scan(JSON.stringify(decoy), 5)!), USAGE);
  t.equal(scan(JSON.stringify({ ...decoy, usage: undefined }), 5), null, 'no top-level usage → null');
});

t.test('usage: null, then none; an oversized usage value is not kept', async (t) => {
  t.equal(scan('{"usage":null,"id":"x"}', 3), null);
  t.equal(scan(JSON.stringify({ usage: { pad: 'x'.repeat(10_000), prompt_tokens: 1, completion_tokens: 1 } }), 1000), null);
});

t.test('a 20 MB body is scanned with memory bounded by the usage object', async (t) => {
  const big = JSON.stringify({
    choices: [
      { logprobs: { content: Array.from({ length: 200_000 }, (_, i) => ({ token: `t${i}"usage":`, logprob: -1.5, top_logprobs: [] })) } },
    ],
    usage: USAGE,
  });
  t.ok(big.length > 10_000_000);
  t.same(JSON.parse(scan(big, 65_536)!), USAGE);
});
