// The simulator reports cached prompt tokens when steered (`x-sim-cached-tokens` / `sim.cached_tokens`),
// in each API's shape, so the gateway's cached-input pricing is tested against a real upstream.
import t from 'tap';
import { simPromptTokens, startSimulator } from '../../src/simulator/simulator.ts';

const sim = await startSimulator({ modelIds: ['m1'] });
t.teardown(() => sim.close());

const messages = [{ role: 'user' as const, content: 'A prompt long enough to have a cached prefix, one would hope.' }];
const prompt = simPromptTokens({ messages });

async function post(path: string, body: unknown, headers: Record<string, string> = {}): Promise<any> {
  const res = await fetch(`${sim.url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
  t.equal(res.status, 200);
  return res;
}

t.test('chat: prompt_tokens_details.cached_tokens, steered, clamped to the prompt; absent when not steered', async (t) => {
  t.ok(prompt > 4);
  const body = await (await post('/chat/completions', { model: 'm1', messages }, { 'x-sim-cached-tokens': '4' })).json();
  t.same(body.usage.prompt_tokens_details, { cached_tokens: 4 });
  const clamped = await (await post('/chat/completions', { model: 'm1', messages, sim: { cached_tokens: 10_000 } })).json();
  t.same(clamped.usage.prompt_tokens_details, { cached_tokens: prompt });
  const plain = await (await post('/chat/completions', { model: 'm1', messages })).json();
  t.equal(plain.usage.prompt_tokens_details, undefined);
});

t.test('chat stream: the usage chunk carries it', async (t) => {
  const res = await post(
    '/chat/completions',
    { model: 'm1', messages, stream: true, stream_options: { include_usage: true } },
    { 'x-sim-cached-tokens': '3' },
  );
  const text = await res.text();
  const last = text
    .split('\n\n')
    .filter((e: string) => e.startsWith('data: {'))
    .map((e: string) => JSON.parse(e.slice(6)))
    .at(-1);
  t.same(last.usage.prompt_tokens_details, { cached_tokens: 3 });
});

t.test('responses: input_tokens_details.cached_tokens', async (t) => {
  const body = await (
    await post('/responses', { model: 'm1', input: 'hello there, a cached prefix' }, { 'x-sim-cached-tokens': '2' })
  ).json();
  t.same(body.usage.input_tokens_details, { cached_tokens: 2 });
  const plain = await (await post('/responses', { model: 'm1', input: 'hello' })).json();
  t.same(plain.usage.input_tokens_details, { cached_tokens: 0 });
});

t.test('a bad count is a 400 naming the option', async (t) => {
  const res = await fetch(`${sim.url}/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-sim-cached-tokens': '-1' },
    body: JSON.stringify({ model: 'm1', messages }),
  });
  t.equal(res.status, 400);
  t.match(await res.text(), /cached/);
});
