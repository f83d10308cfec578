// Token limit over real HTTP and Redis (SPEC §1.5): chat requests are admitted on their estimate
// (prompt estimate + max output), refused when it does not fit the remaining tokens (and then not
// counted), and corrected to the real usage at settle. Expected numbers come from the estimator the
// gateway uses and from the usage the simulator reports.
import t from 'tap';
import { startGateway } from '../helpers/gateway.ts';
import { estimatePromptTokens } from '../../src/credit/hold-estimate.ts';
import { chat, chatBody, metric, models, requestLogs, until, startLimitsStack } from './limits-fixture.ts';

const TPM = 1000;
const stack = await startLimitsStack(t, { window_seconds: 20, test: { requests_per_minute: 100, tokens_per_minute: TPM } });
if (stack) {
  const { redis, sim, gw } = stack;
  const estimate = (body: Record<string, unknown>) =>
    estimatePromptTokens(body as { messages: unknown }, Buffer.byteLength(JSON.stringify(body))) + (body.max_tokens as number);
  const tokens = async (id: string) => Number((await redis.client.get(`tg:rl:tok:${id}`)) ?? 0);
  const settled = (id: string, want: number) =>
    until(`tg:rl:tok:${id} = ${want}`, async () => ((await tokens(id)) === want ? true : undefined));

  t.test('admitted on the estimate, refused past the remaining tokens without consuming, corrected to the real usage', async (t) => {
    const { key, id } = await gw.createKey({ account: 'acme', env: 'test' });
    const limitedBefore = await metric(gw, 'tollgate_rate_limited_total', { env: 'test', dimension: 'tokens' });

    // A: held upstream for 300 ms, so the estimate can be seen in Redis while it runs.
    const bodyA = chatBody({ max_tokens: 400 });
    const estA = estimate(bodyA);
    t.equal(estA, 481, 'estimate: 64 per request + 8 per message + "user" + "hello" bytes + max_tokens 400');
    const pendingA = chat(gw, key, bodyA, { 'x-sim-tokens': '20', 'x-sim-headers-delay-ms': '300' });
    await sim.waitFor((r) => r.headers['x-sim-tokens'] === '20' && r.headers['x-sim-headers-delay-ms'] === '300', 2000);
    t.equal(await tokens(id), estA, 'in flight: the window holds the estimate');
    const a = await pendingA;
    t.equal(a.status, 200);
    t.equal(a.headers.get('x-ratelimit-remaining-tokens'), String(TPM - estA), 'headers at admission: limit minus the estimate');
    const usedA = a.body.usage.total_tokens as number;
    t.equal(usedA, 22, 'simulator: 2 prompt + 20 completion');
    await settled(id, usedA);
    t.pass('after settle the window holds the real usage (22), not the estimate (481)');

    // B: 64 + 8 + 4 + 5 + 900 = 981 > 1000 - 22.
    const upstreamBefore = sim.requests.length;
    const bodyB = chatBody({ max_tokens: 900 });
    t.ok(estimate(bodyB) > TPM - usedA);
    const b = await chat(gw, key, bodyB);
    t.equal(b.status, 429, 'an estimate above the remaining tokens is refused');
    t.equal(b.body.error.code, 'rate_limit_exceeded');
    t.equal(b.body.error.type, 'rate_limit_error');
    t.match(b.body.error.message, new RegExp(`${TPM} tokens`), 'the message names the token limit');
    t.match(b.body.error.message, /resets in/);
    t.equal(b.headers.get('x-ratelimit-remaining-tokens'), String(TPM - usedA), 'remaining shown without the refused estimate');
    t.equal(b.headers.get('x-ratelimit-limit-tokens'), String(TPM));
    t.ok(Number(b.headers.get('retry-after-ms')) > 0, 'retry-after-ms on a token refusal');
    t.ok(b.headers.get('retry-after'));
    t.equal(sim.requests.length, upstreamBefore, 'the refused request never reached the upstream');
    t.equal(
      await metric(gw, 'tollgate_rate_limited_total', { env: 'test', dimension: 'tokens' }),
      limitedBefore + 1,
      'counted under dimension tokens',
    );
    await settled(id, usedA);
    t.equal(
      (await models(gw, key)).headers.get('x-ratelimit-remaining-tokens'),
      String(TPM - usedA),
      'the refused estimate was not consumed',
    );

    // C: exactly the remaining tokens fit.
    const bodyC = chatBody({ max_tokens: TPM - usedA - 81 });
    t.equal(estimate(bodyC), TPM - usedA);
    const c = await chat(gw, key, bodyC, { 'x-sim-tokens': '5' });
    t.equal(c.status, 200, 'an estimate equal to the remaining tokens passes');
    t.equal(c.headers.get('x-ratelimit-remaining-tokens'), '0');
    const usedC = c.body.usage.total_tokens as number;
    await settled(id, usedA + usedC);
    t.equal(
      (await models(gw, key)).headers.get('x-ratelimit-remaining-tokens'),
      String(TPM - usedA - usedC),
      'x-ratelimit-remaining-tokens on the next request shows the real usage',
    );
  });

  t.test('concurrent chats cannot overshoot the token limit: exactly as many estimates as fit pass', async (t) => {
    const { key, id } = await gw.createKey({ account: 'acme', env: 'test' });
    const body = chatBody({ max_tokens: 333 - 81 }); // estimate 333: three fit in 1000, four do not
    t.equal(estimate(body), 333);
    // Held 300 ms upstream so none settles (and gives tokens back) while the others are admitted.
    const replies = await Promise.all(
      Array.from({ length: 10 }, () => chat(gw, key, body, { 'x-sim-tokens': '1', 'x-sim-headers-delay-ms': '300' })),
    );
    const statuses = replies.map((r) => r.status).sort();
    t.same(statuses, [200, 200, 200, 429, 429, 429, 429, 429, 429, 429], '3 pass, 7 refused');
    await settled(id, 3 * 3);
    t.pass('the refused estimates were given back and the three settled to 2 prompt + 1 completion each');
  });

  t.test('streams settle with the usage of their last chunk', async (t) => {
    const { key, id } = await gw.createKey({ account: 'acme', env: 'test' });
    const body = chatBody({ max_tokens: 300, stream: true });
    const r = await chat(gw, key, body, { 'x-sim-tokens': '8' });
    t.equal(r.status, 200);
    t.equal(r.headers.get('x-ratelimit-remaining-tokens'), String(TPM - estimate(body)), 'x-ratelimit-* headers on a stream');
    t.match(r.body, /data: \[DONE\]/);
    await settled(id, 2 + 8);
    t.pass('the window holds 2 prompt + 8 completion tokens');
  });

  t.test('a request the upstream failed gives its whole estimate back', async (t) => {
    const { key, id } = await gw.createKey({ account: 'acme', env: 'test' });
    t.equal((await chat(gw, key, chatBody(), { 'x-sim-tokens': '4' })).status, 200);
    await settled(id, 6);
    const r = await chat(gw, key, chatBody({ max_tokens: 500 }), { 'x-sim-status': '500' });
    t.equal(r.status, 502);
    // Issue 4 §3: the headers ride on every response of a limited key, an upstream 500 relayed as 502 too.
    t.equal(r.headers.get('x-ratelimit-limit-tokens'), String(TPM), 'x-ratelimit-* headers on the 502');
    await settled(id, 6);
    t.pass('nothing produced, nothing counted');
  });

  t.test('without upstream usage the window holds what the gateway billed (its own token count)', async (t) => {
    const { key, id } = await gw.createKey({ account: 'acme', env: 'test' });
    const r = await chat(gw, key, chatBody({ max_tokens: 200 }), { 'x-sim-tokens': '6', 'x-sim-usage': 'absent' });
    t.equal(r.status, 200);
    const line = requestLogs(gw).find((l) => l.request_id === r.headers.get('x-request-id'));
    t.ok(line, 'the request has its log line');
    t.equal(line!.usage_source, 'estimated');
    const billed = (line!.prompt_tokens as number) + (line!.completion_tokens as number);
    t.ok(
      billed > 6 && billed < estimate(chatBody({ max_tokens: 200 })),
      `billed ${billed}: more than the 6 completion tokens, less than the estimate`,
    );
    await settled(id, billed);
    t.pass('the counter equals the billed tokens');
  });

  t.test('/v1/models reads the token window without consuming it; config defaults fill a dimension left out', async (t) => {
    const { key, id } = await gw.createKey({ account: 'acme', env: 'test' });
    const m = await models(gw, key);
    t.equal(m.headers.get('x-ratelimit-remaining-tokens'), String(TPM), 'an untouched window is full');
    t.equal(m.headers.get('x-ratelimit-limit-tokens'), String(TPM));
    t.equal(await redis.client.exists(`tg:rl:tok:${id}`), 0);

    const gwNoTok = await startGateway(t, {
      redisUrl: redis.url,
      upstreamUrl: sim.url,
      config: { rate_limits: { window_seconds: 20, test: { requests_per_minute: 100 } } },
    });
    const { key: k2 } = await gwNoTok.createKey({ account: 'acme', env: 'test' });
    const c = await chat(gwNoTok, k2);
    t.equal(c.status, 200);
    t.equal(c.headers.get('x-ratelimit-limit-requests'), '100');
    t.equal(c.headers.get('x-ratelimit-limit-tokens'), '100000', 'the default test tpm (100,000) applies when only rpm is configured');
  });
}
