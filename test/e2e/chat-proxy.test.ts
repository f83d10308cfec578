// POST /v1/chat/completions as a proxy (SPEC §1.2, §2a): the OpenAI SDK and raw fetch against a real
// gateway in front of the simulator. What reaches the upstream (model rewrite, forced include_usage, its
// own credential, our request id, every other field untouched) and what comes back (content, usage,
// the usage-only chunk only when asked, header hygiene).
import t from 'tap';
import { simCompletionText, simPromptTokens } from '../../src/simulator/simulator.ts';
import { startGateway } from '../helpers/gateway.ts';
import { postChat, sdk, sseData, startFixedUpstream, startSim } from './chat-fixture.ts';

const REQ_ID = /^req_[1-9A-HJ-NP-Za-km-z]{22}$/;

/** No header the upstream received may carry the client's key, in any form. */
function leaksKey(headers: Record<string, unknown>, key: string): string[] {
  return Object.entries(headers)
    .filter(([, v]) => String(v).includes(key) || String(v).includes(key.slice(9)))
    .map(([k]) => k);
}

t.test('OpenAI SDK, non-streaming: content and usage as the simulator sent them; model rewritten; upstream credential', async (t) => {
  const sim = await startSim(t);
  const gw = await startGateway(t, { upstreamUrl: sim.url });
  const { key } = await gw.createKey({ account: 'proxy-a', env: 'test' });
  const messages = [
    { role: 'system' as const, content: 'You are terse.' },
    { role: 'user' as const, content: 'Say seven words, please.' },
  ];
  const tools = [
    {
      type: 'function' as const,
      function: { name: 'lookup', description: 'find a thing', parameters: { type: 'object', properties: { q: { type: 'string' } } } },
    },
  ];
  const { data, response } = await sdk(gw, key)
    .chat.completions.create(
      { model: 'sim-small', messages, temperature: 0.25, tools, max_tokens: 100 },
      { headers: { 'x-sim-tokens': '7' } },
    )
    .withResponse();

  t.equal(data.choices[0]?.message.content, simCompletionText(7));
  t.equal(data.choices[0]?.finish_reason, 'stop');
  const prompt = simPromptTokens({ messages });
  t.same(data.usage, { prompt_tokens: prompt, completion_tokens: 7, total_tokens: prompt + 7 });
  const rid = response.headers.get('x-request-id');
  t.match(rid, REQ_ID);

  t.equal(sim.requests.length, 1, 'one upstream request');
  const rec = sim.requests[0]!;
  t.equal(rec.path, '/v1/chat/completions');
  t.equal(rec.body.model, 'sim/small-1', 'model rewritten to upstream_model');
  t.equal(rec.body.temperature, 0.25);
  t.same(rec.body.tools, tools, 'tools untouched');
  t.same(rec.body.messages, messages);
  t.equal(rec.body.max_tokens, 100);
  t.notOk('stream_options' in rec.body, 'a non-streaming request gets no stream_options');
  t.equal(rec.headers.authorization, 'Bearer upstream-secret', 'the configured upstream api_key');
  t.same(leaksKey(rec.headers, key), [], 'the client key reaches the upstream in no header');
  t.equal(rec.headers['x-request-id'], rid, 'the upstream sees the response x-request-id');
  t.equal(data.model, 'sim/small-1', 'the upstream response body is passed through');
});

t.test('OpenAI SDK, streaming without include_usage: content arrives, no usage-only chunk, upstream forced to include_usage', async (t) => {
  const sim = await startSim(t);
  const gw = await startGateway(t, { upstreamUrl: sim.url });
  const { key } = await gw.createKey({ account: 'proxy-b', env: 'test' });
  const { data: stream, response } = await sdk(gw, key)
    .chat.completions.create(
      { model: 'sim-small', messages: [{ role: 'user', content: 'stream me nine tokens' }], stream: true },
      { headers: { 'x-sim-tokens': '9' } },
    )
    .withResponse();
  let text = '';
  const chunks = [];
  for await (const ch of stream) {
    chunks.push(ch);
    text += ch.choices[0]?.delta.content ?? '';
  }
  t.equal(text, simCompletionText(9));
  t.equal(chunks.length, 11, 'role + 9 tokens + finish');
  t.ok(
    chunks.every((c) => c.choices.length === 1),
    'no chunk with choices: [] reaches a client that did not ask',
  );
  t.ok(
    chunks.every((c) => !c.usage),
    'no usage numbers reach the client',
  );
  t.equal(chunks.at(-1)?.choices[0]?.finish_reason, 'stop');
  t.match(response.headers.get('content-type'), /^text\/event-stream/);

  const rec = sim.requests[0]!;
  t.same(rec.body.stream_options, { include_usage: true }, 'include_usage forced upstream');
  t.equal(rec.body.model, 'sim/small-1');
  t.equal(rec.headers.authorization, 'Bearer upstream-secret');
  t.equal(rec.headers['x-request-id'], response.headers.get('x-request-id'));
  t.same(leaksKey(rec.headers, key), []);
});

t.test('OpenAI SDK, streaming with include_usage: the usage-only chunk is the last one, as the simulator sent it', async (t) => {
  const sim = await startSim(t);
  const gw = await startGateway(t, { upstreamUrl: sim.url });
  const { key } = await gw.createKey({ account: 'proxy-c', env: 'test' });
  const messages = [{ role: 'user' as const, content: 'a prompt of some thirty-three chars' }];
  const stream = await sdk(gw, key).chat.completions.create(
    { model: 'sim-small', messages, stream: true, stream_options: { include_usage: true } },
    { headers: { 'x-sim-tokens': '4' } },
  );
  const chunks = [];
  for await (const ch of stream) chunks.push(ch);
  const last = chunks.at(-1)!;
  t.same(last.choices, [], 'the usage chunk has no choices');
  const prompt = simPromptTokens({ messages });
  t.same(last.usage, { prompt_tokens: prompt, completion_tokens: 4, total_tokens: prompt + 4 });
  t.equal(chunks.filter((c) => c.choices.length === 0).length, 1, 'exactly one usage-only chunk');
  t.equal(chunks.map((c) => c.choices[0]?.delta.content ?? '').join(''), simCompletionText(4));
  t.same(sim.requests[0]!.body.stream_options, { include_usage: true });
});

t.test('raw SSE: bytes end with [DONE]; include_usage false stays hidden; other stream_options fields pass through', async (t) => {
  const sim = await startSim(t);
  const gw = await startGateway(t, { upstreamUrl: sim.url });
  const { key } = await gw.createKey({ account: 'proxy-d', env: 'test' });
  const res = await postChat(gw, key, {
    model: 'sim-small',
    messages: [{ role: 'user', content: 'hi' }],
    stream: true,
    stream_options: { include_usage: false, continuous_usage_stats: false },
    sim: { tokens: 3 },
  });
  t.equal(res.status, 200);
  const raw = await res.text();
  t.ok(raw.endsWith('data: [DONE]\n\n'), 'stream ends with [DONE]');
  const data = sseData(raw);
  t.equal(data.length, 6, 'role + 3 tokens + finish + [DONE]');
  t.notOk(
    data.some((d) => d.includes('"choices":[]')),
    'no usage-only chunk',
  );
  t.same(sim.requests[0]!.body.stream_options, { include_usage: true, continuous_usage_stats: false });
  t.equal(res.headers.get('x-request-id'), sim.requests[0]!.headers['x-request-id']);
});

t.test('raw fetch: every field the gateway does not act on passes through untouched', async (t) => {
  const sim = await startSim(t);
  const gw = await startGateway(t, { upstreamUrl: sim.url });
  const { key } = await gw.createKey({ account: 'proxy-e', env: 'test' });
  const body = {
    model: 'sim-small',
    messages: [
      { role: 'developer', content: 'rules' },
      {
        role: 'user',
        content: [
          { type: 'text', text: 'look' },
          { type: 'image_url', image_url: { url: 'data:image/png;base64,AAAA' } },
        ],
        name: 'ann',
      },
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'f', arguments: '{"a":1}' } }] },
      { role: 'tool', tool_call_id: 'call_1', content: '42' },
    ],
    temperature: 0,
    top_p: 0.9,
    seed: 7,
    stop: ['\n\n'],
    logit_bias: { '50256': -100 },
    user: 'u-1',
    n: 1,
    response_format: { type: 'json_object' },
    foo: { nested: [1, 'two', null, { deep: true }] },
    max_completion_tokens: 12,
    parallel_tool_calls: false,
    tools: [{ type: 'function', function: { name: 'f', parameters: {} } }],
    tool_choice: 'auto',
  };
  const res = await postChat(gw, key, body);
  t.equal(res.status, 200);
  await res.json();
  // max_tokens is added (SPEC §12: the upstream always gets the cap the hold covers; 12 is under it).
  t.same(sim.requests[0]!.body, { ...body, model: 'sim/small-1', max_tokens: 12 }, 'identical but for model and the added max_tokens');
  t.same(Object.keys(sim.requests[0]!.body), [...Object.keys(body), 'max_tokens'], 'same keys, same order, max_tokens last');
});

t.test('numbers pass through exactly: an int64 seed beyond 2^53 is not rounded on the way upstream', async (t) => {
  const completion = JSON.stringify({
    id: 'c',
    object: 'chat.completion',
    created: 1,
    model: 'm',
    choices: [],
    usage: { prompt_tokens: 1, completion_tokens: 0, total_tokens: 1 },
  });
  const up = await startFixedUpstream(t, 200, { 'content-type': 'application/json' }, completion);
  const gw = await startGateway(t, { upstreamUrl: up.url });
  const { key } = await gw.createKey({ account: 'proxy-n', env: 'test' });
  // OpenAI's seed is an int64; 2^53 + 1 is a valid value that a float64 round trip turns into 2^53.
  const res = await postChat(gw, key, '{"model":"sim-small","messages":[{"role":"user","content":"x"}],"seed":9007199254740993}');
  t.equal(res.status, 200);
  await res.arrayBuffer();
  t.match(up.bodies[0], /"seed":\s*9007199254740993\b/, 'the seed the client sent, digit for digit (SPEC §1.2: passes through untouched)');
});

t.test('a model without an api_key sends no authorization upstream at all', async (t) => {
  const sim = await startSim(t);
  const gw = await startGateway(t, { upstreamUrl: sim.url });
  const { key } = await gw.createKey({ account: 'proxy-f', env: 'test' });
  const res = await postChat(gw, key, { model: 'sim-free', messages: [{ role: 'user', content: 'x' }] });
  t.equal(res.status, 200);
  await res.arrayBuffer();
  t.equal(sim.requests[0]!.body.model, 'sim/free');
  t.notOk('authorization' in sim.requests[0]!.headers, 'no Authorization forwarded');
  t.same(leaksKey(sim.requests[0]!.headers, key), []);
});

t.test(
  'request headers by allowlist: credentials, org/project choice, spoofed addresses and routing hints never reach the upstream',
  async (t) => {
    const sim = await startSim(t);
    const gw = await startGateway(t, { upstreamUrl: sim.url, config: { upstream: { forward_headers: ['x-custom-client'] } } });
    const { key } = await gw.createKey({ account: 'proxy-g', env: 'test' });
    const res = await postChat(
      gw,
      key,
      { model: 'sim-small', messages: [{ role: 'user', content: 'x' }] },
      {
        cookie: 'session=abc',
        'x-api-key': key,
        'x-request-id': 'client-chosen-id',
        'proxy-authorization': 'Basic Zm9vOmJhcg==',
        'x-custom-client': 'kept',
        'accept-encoding': 'gzip, br',
        'openai-organization': 'org-attacker',
        'openai-project': 'proj-attacker',
        'x-forwarded-for': '10.9.9.9',
        forwarded: 'for=10.9.9.9',
        'helicone-target-url': 'http://evil.example',
        'x-unlisted': 'dropped',
        traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
      },
    );
    t.equal(res.status, 200);
    await res.arrayBuffer();
    const h = sim.requests[0]!.headers;
    for (const name of [
      'cookie',
      'x-api-key',
      'proxy-authorization',
      'openai-organization',
      'openai-project',
      'x-forwarded-for',
      'forwarded',
      'helicone-target-url',
      'x-unlisted',
    ]) {
      t.notOk(name in h, `${name} not forwarded`);
    }
    t.equal(h['accept-encoding'], 'identity', "the client's accept-encoding is replaced by identity: an answer the meter can read");
    t.equal(h['x-request-id'], res.headers.get('x-request-id'), 'our request id replaces the client one');
    t.not(h['x-request-id'], 'client-chosen-id');
    t.equal(h['x-custom-client'], 'kept', 'a header named in upstream.forward_headers passes');
    t.equal(h.traceparent, '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01', 'trace context passes');
    t.equal(h['content-type'], 'application/json');
    t.equal(
      Number(h['content-length']),
      Buffer.byteLength(JSON.stringify(sim.requests[0]!.body)),
      'content-length matches the rewritten body',
    );
    t.same(leaksKey(h, key), []);
  },
);

t.test(
  'response headers by allowlist: server, cookies, challenges, upstream rate limits and org headers never reach the client',
  async (t) => {
    const sim = await startSim(t);
    const gw = await startGateway(t, { upstreamUrl: sim.url, config: { upstream: { return_headers: ['x-sim-request-id'] } } });
    const { key } = await gw.createKey({ account: 'proxy-h', env: 'test' });
    for (const stream of [false, true]) {
      const res = await postChat(gw, key, { model: 'sim-small', messages: [{ role: 'user', content: 'x' }], stream });
      await res.arrayBuffer();
      t.equal(res.headers.get('server'), null, `simulator's server header dropped (stream ${stream})`);
      t.equal(res.headers.get('x-sim-request-id'), sim.requests.at(-1)!.id.toString(), 'a header named in upstream.return_headers passes');
      t.match(res.headers.get('x-request-id'), REQ_ID);
    }

    // The simulator cannot emit set-cookie or auth challenges: a fixed fake upstream does.
    const completion = JSON.stringify({
      id: 'c1',
      object: 'chat.completion',
      created: 1,
      model: 'm',
      choices: [{ index: 0, message: { role: 'assistant', content: 'hi' }, finish_reason: 'stop' }],
      usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
    });
    const ident = {
      'content-type': 'application/json',
      server: 'vllm/1.2.3',
      'set-cookie': ['a=1; Path=/', 'b=2'],
      'www-authenticate': 'Bearer realm="up"',
      via: '1.1 upstream-lb',
      'x-powered-by': 'Python',
      'x-upstream-extra': 'kept',
      'x-request-id': 'upstream-own-id',
      'openai-organization': 'org-operator',
      'x-ratelimit-remaining-tokens': '12',
      'x-internal-host': 'gpu-7.internal',
    };
    const ok = await startFixedUpstream(t, 200, ident, completion);
    const denied = await startFixedUpstream(t, 401, ident, '{"error":{"message":"bad upstream key"}}');
    for (const [up, status, body] of [
      [ok, 200, completion],
      [denied, 401, '{"error":{"message":"bad upstream key"}}'],
    ] as const) {
      const gw2 = await startGateway(t, { upstreamUrl: up.url, config: { upstream: { return_headers: ['x-upstream-extra'] } } });
      const k2 = await gw2.createKey({ account: 'proxy-h2', env: 'test' });
      const res = await postChat(gw2, k2.key, { model: 'sim-small', messages: [{ role: 'user', content: 'x' }] });
      t.equal(res.status, status);
      t.equal(await res.text(), body, `body of ${status} passes through unchanged`);
      for (const name of ['server', 'set-cookie', 'www-authenticate', 'via', 'x-powered-by', 'openai-organization', 'x-internal-host']) {
        t.equal(res.headers.get(name), null, `${name} dropped (${status})`);
      }
      // The test key's own limits ride as x-ratelimit-*: the upstream's (12 left) must not replace them.
      t.not(res.headers.get('x-ratelimit-remaining-tokens'), '12', `the upstream's rate-limit headers dropped (${status})`);
      t.equal(res.headers.get('x-upstream-extra'), 'kept', 'a header named in upstream.return_headers passes');
      t.match(res.headers.get('x-request-id'), REQ_ID, 'ours, not the upstream one');
    }
  },
);

t.test('x-request-id rides on every response, errors included', async (t) => {
  const sim = await startSim(t);
  const gw = await startGateway(t, { upstreamUrl: sim.url, config: { upstream: { headers_timeout_ms: 100 } } });
  const { key } = await gw.createKey({ account: 'proxy-i', env: 'live' });
  const live = await gw.createKey({ account: 'proxy-i-funded', env: 'live' });
  await gw.grant('proxy-i-funded', 10_000_000);
  const msg = [{ role: 'user', content: 'x' }];
  const cases: [string, () => Promise<Response>, number][] = [
    [
      '401 missing key',
      () => fetch(`${gw.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' }),
      401,
    ],
    ['404 unknown path', () => fetch(`${gw.url}/v1/nope`, { headers: gw.auth(key) }), 404],
    ['405 wrong method', () => fetch(`${gw.url}/v1/chat/completions`, { headers: gw.auth(key) }), 405],
    ['422 validation', () => postChat(gw, key, { messages: msg }), 422],
    ['404 model', () => postChat(gw, key, { model: 'nope', messages: msg }), 404],
    ['402 no credit', () => postChat(gw, key, { model: 'sim-small', messages: msg }), 402],
    ['400 from upstream', () => postChat(gw, live.key, { model: 'sim-small', messages: msg, sim: { status: 400 } }), 400],
    ['502 upstream 500', () => postChat(gw, live.key, { model: 'sim-small', messages: msg, sim: { status: 500 } }), 502],
    ['504 upstream slow', () => postChat(gw, live.key, { model: 'sim-small', messages: msg, sim: { headers_delay_ms: 1000 } }), 504],
  ];
  const seen = new Set<string>();
  for (const [name, call, status] of cases) {
    const res = await call();
    await res.arrayBuffer();
    t.equal(res.status, status, name);
    const id = res.headers.get('x-request-id');
    t.match(id, REQ_ID, `${name}: x-request-id`);
    t.notOk(seen.has(id!), `${name}: a fresh id`);
    seen.add(id!);
  }
});
