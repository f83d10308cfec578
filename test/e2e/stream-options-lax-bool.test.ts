// `stream_options.include_usage` as vLLM reads it: its StreamOptions is a pydantic model in lax mode, so
// "true", 1, "yes" … ask for the usage chunk as `true` does, and "false", 0 … do not. The gateway forces
// `include_usage: true` upstream on every stream (SPEC §1.2) and removes the usage-only chunk for a client
// that did not ask for it; it read only the JSON literal `true` as asking, so a client sending
// `"include_usage": "true"` had the usage chunk it asked for (and vLLM would have sent it) removed.
// The simulator is the upstream (it reads the flag as vLLM does: src/simulator/output.ts laxBool).
import t from 'tap';
import { simCompletionText, simPromptTokens } from '../../src/simulator/simulator.ts';
import { simInputTokens } from '../../src/simulator/completions.ts';
import { startGateway } from '../helpers/gateway.ts';
import { sseData, startSim } from './chat-fixture.ts';

const ASKED: unknown[] = [true, 'true', 'True', 1, 'yes', 'on', '1', 't', 'y'];
const NOT_ASKED: unknown[] = [false, 'false', 0, 'no', 'off', null, undefined];

t.test('include_usage spelled as vLLM accepts it: the client gets the usage chunk exactly when it asked', async (t) => {
  const sim = await startSim(t);
  const gw = await startGateway(t, { upstreamUrl: sim.url });
  const { key } = await gw.createKey({ account: 'lax-usage', env: 'test' });
  const messages = [{ role: 'user', content: 'a prompt of some thirty-three chars' }];
  const prompt = 'Once upon a time';
  for (const [path, body, promptTokens] of [
    ['/v1/chat/completions', { messages }, simPromptTokens({ messages })],
    ['/v1/completions', { prompt }, simInputTokens(prompt)],
  ] as const) {
    for (const v of [...ASKED, ...NOT_ASKED]) {
      const asked = ASKED.includes(v);
      const name = `${path} include_usage: ${JSON.stringify(v)}`;
      const sent = sim.requests.length;
      const res = await fetch(`${gw.url}${path}`, {
        method: 'POST',
        headers: { ...gw.auth(key), 'content-type': 'application/json', 'x-sim-tokens': '3' },
        body: JSON.stringify({ model: 'sim-small', ...body, stream: true, stream_options: { include_usage: v } }),
      });
      t.equal(res.status, 200, name);
      const data = sseData(await res.text());
      t.equal(data.at(-1), '[DONE]', `${name}: ends with [DONE]`);
      const usageOnly = data.filter((d) => d.startsWith('{') && JSON.parse(d).choices.length === 0);
      if (asked) {
        t.equal(usageOnly.length, 1, `${name}: the usage chunk the client asked for reaches it`);
        t.same(
          JSON.parse(usageOnly[0] ?? '{}').usage,
          { prompt_tokens: promptTokens, completion_tokens: 3, total_tokens: promptTokens + 3 },
          name,
        );
      } else {
        t.equal(usageOnly.length, 0, `${name}: no usage chunk the client did not ask for`);
      }
      const text = data
        .filter((d) => d.startsWith('{'))
        .map((d) => JSON.parse(d).choices[0])
        .map((c) => c?.delta?.content ?? c?.text ?? '')
        .join('');
      t.equal(text, simCompletionText(3), `${name}: the text passes untouched`);
      // The upstream always gets the JSON literal: the gateway needs the usage whatever the client spelled.
      t.equal(sim.requests.length, sent + 1, name);
      t.same(sim.requests.at(-1)!.body.stream_options, { include_usage: true }, `${name}: upstream asked with the literal true`);
    }
  }
});
