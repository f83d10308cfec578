// The simulator reads `stream`, `stream_options.include_usage` and the completions `echo` as vLLM does:
// its request models are pydantic models in lax mode, so "true", 1, "yes" … are true and "false", 0 …
// false (vllm/entrypoints/openai/protocol.py StreamOptions, CompletionRequest; serving_chat.py and
// serving_completion.py read the parsed booleans). Only the JSON literal `true` was recognised, so a body
// vLLM streams with a usage chunk got a JSON answer, or a stream without one, and tests through the
// gateway could not see what vLLM would send.
import t from 'tap';
import { simCompletionText, startSimulator } from '../../src/simulator/simulator.ts';

const sim = await startSimulator();
t.teardown(() => sim.close());
const post = (path: string, body: unknown) =>
  fetch(`${sim.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });

const TRUE: unknown[] = [true, 'true', 'TRUE', 1, '1', 'yes', 'on', 't', 'Y'];
const FALSE: unknown[] = [false, 'false', 0, '0', 'no', 'off', 'f', 'n', null, 'maybe'];
const base = { '/chat/completions': { messages: [{ role: 'user', content: 'hi' }] }, '/completions': { prompt: 'abcdefgh' } };

t.test('stream: a lax true streams, anything else answers JSON', async (t) => {
  for (const [path, body] of Object.entries(base)) {
    for (const v of [...TRUE, ...FALSE]) {
      const res = await post(path, { model: 'm', ...body, max_tokens: 2, stream: v });
      const type = res.headers.get('content-type') ?? '';
      await res.text();
      t.equal(type.startsWith('text/event-stream'), TRUE.includes(v), `${path} stream: ${JSON.stringify(v)} → ${type}`);
    }
  }
});

t.test('stream_options.include_usage: a lax true sends the usage chunk, anything else does not', async (t) => {
  for (const [path, body] of Object.entries(base)) {
    for (const v of [...TRUE, ...FALSE]) {
      const text = await (
        await post(path, { model: 'm', ...body, max_tokens: 2, stream: true, stream_options: { include_usage: v } })
      ).text();
      const usageOnly = text.split('\n\n').filter((e) => e.startsWith('data: {') && e.includes('"choices":[]'));
      t.equal(usageOnly.length, TRUE.includes(v) ? 1 : 0, `${path} include_usage: ${JSON.stringify(v)}`);
    }
  }
});

t.test('completions echo: a lax true puts the prompt before the text', async (t) => {
  for (const v of [...TRUE, ...FALSE]) {
    const body: any = await (await post('/completions', { model: 'm', prompt: 'abcdefgh', max_tokens: 2, echo: v })).json();
    t.equal(body.choices[0].text, (TRUE.includes(v) ? 'abcdefgh' : '') + simCompletionText(2), `echo: ${JSON.stringify(v)}`);
  }
});
