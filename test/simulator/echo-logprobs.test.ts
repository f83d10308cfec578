// The simulator's /v1/completions honours `echo` and `logprobs: N` as vLLM does (serving_completion.py):
// the prompt leads the first chunk's text (and the JSON answer's), and with both, the `logprobs` start
// with an entry per prompt token (the first without a logprob), each with N + 1 alternatives.
import t from 'tap';
import { startSimulator } from '../../src/simulator/simulator.ts';

const sim = await startSimulator();
t.teardown(() => sim.close());
const post = (body: unknown) =>
  fetch(`${sim.url}/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
const prompt = 'abcdefghij'; // 3 simulated tokens: abcd, efgh, ij

t.test('JSON: echo and logprobs over the prompt then the completion', async (t) => {
  const body: any = await (await post({ model: 'm', prompt, echo: true, logprobs: 2, max_tokens: 2 })).json();
  const c = body.choices[0];
  t.equal(c.text, `${prompt}tok0 tok1 `);
  t.same(c.logprobs.tokens, ['abcd', 'efgh', 'ij', 'tok0 ', 'tok1 ']);
  t.same(c.logprobs.text_offset, [0, 4, 8, 10, 15]);
  t.equal(c.logprobs.token_logprobs[0], null, "the prompt's first token has no logprob");
  t.equal(c.logprobs.top_logprobs[0], null);
  t.same(
    c.logprobs.top_logprobs.slice(1).map((o: object) => Object.keys(o).length),
    [3, 3, 3, 3],
    'N + 1 alternatives',
  );
  t.ok(c.logprobs.token_logprobs.slice(1).every((x: number) => x < 0));
  const plain: any = await (await post({ model: 'm', prompt, max_tokens: 2 })).json();
  t.same(plain.choices[0], { index: 0, text: 'tok0 tok1 ', logprobs: null, finish_reason: 'length' }, 'neither asked: as before');
});

t.test('stream: the echo and the prompt logprobs in the first chunk, one entry per later chunk', async (t) => {
  const text = await (await post({ model: 'm', prompt, echo: true, logprobs: 1, max_tokens: 2, stream: true })).text();
  const chunks = text
    .split('\n\n')
    .filter((e) => e.startsWith('data: {'))
    .map((e) => JSON.parse(e.slice(6)).choices[0]);
  t.equal(chunks[0].text, `${prompt}tok0 `);
  t.same(chunks[0].logprobs.tokens, ['abcd', 'efgh', 'ij', 'tok0 ']);
  t.equal(chunks[1].text, 'tok1 ');
  t.same(chunks[1].logprobs.tokens, ['tok1 ']);
  t.same(chunks[1].logprobs.text_offset, [15]);
  t.same(chunks[2].logprobs.tokens, [], 'the finish chunk: no tokens');
});
