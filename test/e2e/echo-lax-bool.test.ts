// vLLM parses `echo` and `add_generation_prompt` as pydantic booleans in lax mode ("true", 1, "false", 0
// are accepted), so the gateway reads them the same way (src/routes/lax-bool.ts): an answer that echoes
// the prompt or an assistant prefill, without usage, is billed `uncounted`, never the echo as completion
// (above the hold: 8,003 completion tokens for max_tokens 16 when only the JSON literals were recognised,
// a review finding). The upstream below answers as vLLM does, without usage.
import t from 'tap';
import { startGateway } from '../helpers/gateway.ts';
import { serveJsonUpstream, waitForDebit } from './chat-fixture.ts';

const PREFILL = 'Zyx qwv 9183 ÿþ ǅ ꙮ 𝔘 '.repeat(400);
const GENERATED = 'ok done';
// pydantic v2 lax bool
const truthy = (v: unknown) =>
  v === true || v === 1 || (typeof v === 'string' && ['true', '1', 'yes', 'on', 't', 'y'].includes(v.toLowerCase()));
const falsy = (v: unknown) =>
  v === false || v === 0 || (typeof v === 'string' && ['false', '0', 'no', 'off', 'f', 'n'].includes(v.toLowerCase()));

t.test('echo spelled as vLLM also accepts it: the echoed message is not billed as completion', async (t) => {
  const up = await serveJsonUpstream(t, (b, req, res) => {
    if (req.url!.endsWith('/completions') && !req.url!.includes('chat')) {
      res.writeHead(200, { 'content-type': 'application/json' });
      const text = (truthy(b.echo) ? b.prompt : '') + GENERATED;
      res.end(JSON.stringify({ id: 'c', object: 'text_completion', choices: [{ index: 0, text, finish_reason: 'stop' }] }));
      return;
    }
    const last = b.messages.at(-1);
    // serving_chat: role = response_role ('assistant') if add_generation_prompt else last message's role
    const role = falsy(b.add_generation_prompt) ? last.role : 'assistant';
    const echo = truthy(b.echo) && last.role === role ? last.content : '';
    res.writeHead(200, { 'content-type': 'application/json' });
    // No usage: the fallback path (an upstream without usage, as in chat-echo-billing.test.ts).
    res.end(
      JSON.stringify({
        id: 'c',
        object: 'chat.completion',
        choices: [{ index: 0, message: { role: 'assistant', content: echo + GENERATED }, finish_reason: 'stop' }],
      }),
    );
  });
  const gw = await startGateway(t, {
    upstreamUrl: up,
    config: {
      models: [
        {
          name: 'm',
          upstream_model: 'x',
          max_output_tokens: 64,
          endpoints: ['chat', 'completions'],
          price: { input: 1, output: 1 },
          upstreams: [{ url: up }],
        },
      ],
    },
  });
  const { key } = await gw.createKey({ account: 'echo-coerced', env: 'live' });
  await gw.grant('echo-coerced', 100_000_000);
  const cases: [string, Record<string, unknown>][] = [
    [
      'echo: true (control)',
      {
        echo: true,
        messages: [
          { role: 'user', content: 'continue' },
          { role: 'assistant', content: PREFILL },
        ],
      },
    ],
    [
      'echo: "true"',
      {
        echo: 'true',
        messages: [
          { role: 'user', content: 'continue' },
          { role: 'assistant', content: PREFILL },
        ],
      },
    ],
    [
      'echo: 1',
      {
        echo: 1,
        messages: [
          { role: 'user', content: 'continue' },
          { role: 'assistant', content: PREFILL },
        ],
      },
    ],
    [
      'echo: true, add_generation_prompt: "false"',
      { echo: true, add_generation_prompt: 'false', messages: [{ role: 'user', content: PREFILL }] },
    ],
  ];
  cases.push(['completions echo: "true"', { path: '/v1/completions', echo: 'true', prompt: PREFILL }]);
  for (const [name, { path = '/v1/chat/completions', ...extra }] of cases) {
    const res = await fetch(`${gw.url}${path}`, {
      method: 'POST',
      headers: { ...gw.auth(key), 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'm', max_tokens: 16, ...extra }),
    });
    t.equal(res.status, 200, name);
    await res.text();
    const e = await waitForDebit(gw, 'echo-coerced', res.headers.get('x-request-id')!);
    t.ok(e.completion_tokens! <= 16, `${name}: completion billed (${e.completion_tokens}) within max_tokens 16`);
  }
});
