// A non-streaming answer's headers come only once its whole generation is done (vLLM, TGI, llama.cpp; the
// simulator's delay_ms does the same), so a non-streaming request whose generation outlasts
// upstream.headers_timeout_ms is generated on every upstream of its model in turn (SPEC §1.2: a timeout
// before headers is retried), then answered 504 upstream_timeout (SPEC §3). Each upstream it timed out on
// had the whole request: it is billed its prompt once (counted, `estimated`; a stateful one its held input
// part), not 0, and each attempt is aborted at its timeout. Real Redis (the Lua hold/settle path).
import t from 'tap';
import { simPromptTokens } from '../../src/simulator/simulator.ts';
import { createTokenizer } from '../../src/meter/tokenizer.ts';
import { startGateway } from '../helpers/gateway.ts';
import { startRedis } from '../helpers/redis.ts';
import {
  SIM_SMALL,
  accountVsLedger,
  expectedCost,
  metricsText,
  postChat,
  sample,
  sdk,
  simSmallModel,
  startSim,
  startSteeredFront,
  waitForDebit,
} from './chat-fixture.ts';

const redis = await startRedis(t);
const tokenizer = createTokenizer();
await tokenizer.load();

/** sim-small's prices, served by `urls` in order; headers_timeout_ms 300 (undici's timer fires within ~1 s of it). */
function config(urls: string[]) {
  return {
    upstream: { headers_timeout_ms: 300, eject_after_failures: 100 },
    models: [simSmallModel('m', urls, null)],
  };
}

const MESSAGES = [
  { role: 'system', content: 'You write at length.' },
  { role: 'user', content: 'Write a long essay about the history of toll roads.' },
];
/** 100 tokens, 80 ms each: an 8 s generation, far past the headers timeout. */
const LONG = { tokens: 100, delay_ms: 80 };
const GENERATION_MS = 8000;

t.test(
  'a non-streaming generation longer than headers_timeout_ms on every upstream: 504, each aborted, billed its prompt once',
  async (t) => {
    if (!redis) return;
    const a = await startSim(t);
    const b = await startSim(t);
    const gw = await startGateway(t, { redisUrl: redis.url, upstreamUrl: a.url, config: config([a.url, b.url]) });
    const { key } = await gw.createKey({ account: 'to-a', env: 'live' });
    await gw.grant('to-a', 1_000_000);
    const prompt = tokenizer.countPromptTokens(MESSAGES);
    t.ok(prompt > 0 && prompt !== simPromptTokens({ messages: MESSAGES }), 'the tokenizer count, not an upstream usage');

    const started = Date.now();
    const res = await postChat(gw, key, { model: 'm', messages: MESSAGES, max_tokens: 256, sim: LONG });
    t.equal(res.status, 504);
    t.match(await res.json(), { error: { code: 'upstream_timeout', type: 'upstream_error', param: null } });
    t.ok(Date.now() - started < GENERATION_MS, 'answered before any generation could have ended');
    t.equal(a.requests.length, 1, 'the first upstream generated once');
    t.equal(b.requests.length, 1, 'the second upstream generated once');
    for (const [name, sim] of [['first', a] as const, ['second', b] as const]) {
      const r = await sim.waitFor((x) => x.endedAt !== undefined, 2000);
      t.ok(r.aborted && !r.finished, `${name}: the gateway aborted it`);
      t.equal(r.completionTokensSent, 0, `${name}: no answer was sent`);
      t.ok(
        r.endedAt! - r.startedAt < GENERATION_MS / 2,
        `${name}: aborted at the timeout (${Math.round(r.endedAt! - r.startedAt)} ms), not after the generation`,
      );
    }
    const m = await metricsText(gw);
    t.equal(sample(m, 'tollgate_upstream_errors_total', { reason: 'headers_timeout' }), 2);
    const e = await waitForDebit(gw, 'to-a', res.headers.get('x-request-id')!);
    t.match(
      e,
      { amount_micros: -expectedCost(SIM_SMALL, prompt, 0), prompt_tokens: prompt, completion_tokens: 0, usage_source: 'estimated' },
      'billed the prompt once, not once per upstream, and not 0',
    );

    // The same through the OpenAI SDK.
    const err = await sdk(gw, key)
      .chat.completions.create(
        { model: 'm', messages: [{ role: 'user', content: 'Go on at length.' }], max_tokens: 256 },
        { headers: { 'x-sim-tokens': '100', 'x-sim-delay-ms': '80' } },
      )
      .catch((e: unknown) => e);
    t.match(err, { status: 504, code: 'upstream_timeout' });
    const sdkPrompt = tokenizer.countPromptTokens([{ role: 'user', content: 'Go on at length.' }]);
    const id = (err as { requestID?: string; headers?: Headers }).headers?.get('x-request-id');
    t.ok(id, 'the 504 carries its x-request-id');
    t.match(await waitForDebit(gw, 'to-a', id!), { amount_micros: -expectedCost(SIM_SMALL, sdkPrompt, 0), usage_source: 'estimated' });
    t.equal(a.requests.length + b.requests.length, 4, 'each upstream once more');

    const s = await accountVsLedger(gw, 'to-a');
    t.equal(s.balance, s.sum, 'balance = ledger sum');
    t.equal(s.held, 0, 'nothing left held');
    t.equal(s.balance, 1_000_000 - expectedCost(SIM_SMALL, prompt, 0) - expectedCost(SIM_SMALL, sdkPrompt, 0));
  },
);

t.test('the first upstream times out, the next answers: billed the answer alone', async (t) => {
  if (!redis) return;
  const slowSim = await startSim(t);
  const good = await startSim(t);
  // The front makes every request to its simulator an 8 s generation (a header wins over the body's sim).
  const slow = await startSteeredFront(t, slowSim, { 'x-sim-tokens': '100', 'x-sim-delay-ms': '80' });
  const gw = await startGateway(t, { redisUrl: redis.url, upstreamUrl: good.url, config: config([slow, good.url]) });
  const { key } = await gw.createKey({ account: 'to-b', env: 'live' });
  await gw.grant('to-b', 1_000_000);
  // Least-outstanding with a rotating start: send until one request met the slow upstream first.
  for (let i = 0; i < 6 && slowSim.requests.length === 0; i++) {
    const res = await postChat(gw, key, { model: 'm', messages: MESSAGES, sim: { tokens: 7 } });
    t.equal(res.status, 200);
    await res.json();
    const e = await waitForDebit(gw, 'to-b', res.headers.get('x-request-id')!);
    t.match(
      e,
      { amount_micros: -expectedCost(SIM_SMALL, simPromptTokens({ messages: MESSAGES }), 7), usage_source: 'upstream' },
      'the answer, as its upstream reported it',
    );
  }
  t.ok(slowSim.requests.length >= 1, 'a request timed out on the slow upstream before it was answered');
  const s = await accountVsLedger(gw, 'to-b');
  t.equal(s.balance, s.sum);
});

t.test('a stateful non-streaming request that times out: billed its held input part (the context window)', async (t) => {
  if (!redis) return;
  const sim = await startSim(t);
  const gw = await startGateway(t, {
    redisUrl: redis.url,
    upstreamUrl: sim.url,
    config: {
      upstream: { headers_timeout_ms: 300 },
      models: [{ name: 'm', max_output_tokens: 256, context_window: 4096, price: { input: 1, output: 1 }, upstreams: [{ url: sim.url }] }],
    },
  });
  const { key } = await gw.createKey({ account: 'to-c', env: 'live' });
  await gw.grant('to-c', 100_000);
  const post = (body: Record<string, unknown>) =>
    fetch(`${gw.url}/v1/responses`, {
      method: 'POST',
      headers: { ...gw.auth(key), 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'm', ...body }),
    });
  const base = await post({ input: 'the history', sim: { tokens: 4 } });
  t.equal(base.status, 200);
  const prev = ((await base.json()) as { id: string }).id;
  const res = await post({ input: 'and now at length', previous_response_id: prev, sim: LONG });
  t.equal(res.status, 504);
  t.match(await res.json(), { error: { code: 'upstream_timeout' } });
  await sim.waitFor((r) => r.aborted, 2000);
  const e = await waitForDebit(gw, 'to-c', res.headers.get('x-request-id')!);
  t.match(
    e,
    { amount_micros: -4096, prompt_tokens: 4096, completion_tokens: 0, usage_source: 'estimated' },
    'the context window, never the new input alone',
  );
  const s = await accountVsLedger(gw, 'to-c');
  t.equal(s.balance, s.sum);
  t.equal(s.held, 0);
});

t.test('a streamed request whose upstream sends no headers in time is still billed 0 (nothing was generated)', async (t) => {
  if (!redis) return;
  const a = await startSim(t);
  const gw = await startGateway(t, { redisUrl: redis.url, upstreamUrl: a.url, config: config([a.url]) });
  const { key } = await gw.createKey({ account: 'to-d', env: 'live' });
  await gw.grant('to-d', 1_000_000);
  // A stream's headers come before its first token: a headers timeout means the upstream never started.
  const res = await postChat(gw, key, { model: 'm', messages: MESSAGES, stream: true, sim: { headers_delay_ms: 3000 } });
  t.equal(res.status, 504);
  await res.text();
  const e = await waitForDebit(gw, 'to-d', res.headers.get('x-request-id')!);
  t.match(e, { amount_micros: 0, prompt_tokens: 0 });
});
