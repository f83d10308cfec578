// Live keys (SPEC §1.5): no limits unless the config's `rate_limits.live` or a per-key override sets
// them; overrides set through PATCH /admin/keys/{id} take effect on every instance after the key cache
// invalidation, and raising a limit frees an exhausted key within the same window.
import t from 'tap';
import { startRedis } from '../helpers/redis.ts';
import { startGateway } from '../helpers/gateway.ts';
import { startSimulator } from '../../src/simulator/simulator.ts';
import { chat, metric, models, rateHeaders, until } from './limits-fixture.ts';

const redis = await startRedis(t);
if (redis) {
  const sim = await startSimulator();
  t.teardown(() => sim.close());
  const base = { window_seconds: 20, test: { requests_per_minute: 3, tokens_per_minute: 5000 } };
  // No `live` section: live keys are unlimited unless overridden.
  const gw = await startGateway(t, { redisUrl: redis.url, upstreamUrl: sim.url, config: { rate_limits: base } });
  const gw2 = await startGateway(t, { redisUrl: redis.url, upstreamUrl: sim.url, config: { rate_limits: base } });

  t.test('a live key without limits is never limited and gets no x-ratelimit headers', async (t) => {
    const { key, id } = await gw.createKey({ account: 'bigco', env: 'live' });
    const statuses = new Map<number, number>();
    let withHeaders = 0;
    for (let batch = 0; batch < 10; batch++) {
      const replies = await Promise.all(Array.from({ length: 20 }, (_, i) => (i === 0 ? chat(gw, key) : models(i % 2 ? gw : gw2, key))));
      for (const r of replies) {
        statuses.set(r.status, (statuses.get(r.status) ?? 0) + 1);
        if (Object.keys(rateHeaders(r.headers)).length > 0) withHeaders++;
      }
    }
    t.same([...statuses], [[200, 200]], '200 requests (10 chat at price 0, 190 models), all 200');
    t.equal(withHeaders, 0, 'no x-ratelimit-* header on any of them');
    t.same(await redis.client.keys(`tg:rl:*:${id}`), [], 'no counter in Redis');
  });

  t.test('a live key with an override is limited, with the same headers and 429 as a test key', async (t) => {
    const before = await metric(gw, 'tollgate_rate_limited_total', { env: 'live', dimension: 'requests' });
    const { key } = await gw.createKey({ account: 'bigco', env: 'live', rate_limits: { requests_per_minute: 2 } });
    const a = await chat(gw, key);
    t.equal(a.status, 200);
    t.same(
      Object.keys(rateHeaders(a.headers)).sort(),
      ['x-ratelimit-limit-requests', 'x-ratelimit-remaining-requests', 'x-ratelimit-reset-requests'],
      'only the limited dimension is announced',
    );
    t.equal(a.headers.get('x-ratelimit-remaining-requests'), '1');
    // A priced model with zero balance: 402, still counted and still carrying the headers.
    const b = await chat(gw, key, { model: 'sim-small', messages: [{ role: 'user', content: 'hi' }] });
    t.equal(b.status, 402, 'insufficient credit');
    t.equal(b.headers.get('x-ratelimit-remaining-requests'), '0', 'x-ratelimit-* headers on the 402');
    const c = await models(gw2, key);
    t.equal(c.status, 429, 'third request refused, on the other instance');
    t.equal(c.body.error.code, 'rate_limit_exceeded');
    t.ok(c.headers.get('retry-after-ms'));
    t.equal(await metric(gw2, 'tollgate_rate_limited_total', { env: 'live', dimension: 'requests' }), 1, 'counted under env="live"');
    t.equal(
      await metric(gw, 'tollgate_rate_limited_total', { env: 'live', dimension: 'requests' }),
      before,
      'a metric of the instance that refused, not of the other one',
    );
  });

  t.test('config rate_limits.live applies to live keys; an override replaces one dimension', async (t) => {
    const gwLive = await startGateway(t, {
      redisUrl: redis.url,
      upstreamUrl: sim.url,
      config: { rate_limits: { ...base, live: { requests_per_minute: 2, tokens_per_minute: 2000 } } },
    });
    const { key } = await gwLive.createKey({ account: 'bigco', env: 'live' });
    const a = await chat(gwLive, key);
    t.equal(a.status, 200);
    t.equal(a.headers.get('x-ratelimit-limit-requests'), '2');
    t.equal(a.headers.get('x-ratelimit-limit-tokens'), '2000');
    t.equal((await models(gwLive, key)).status, 200);
    t.equal((await models(gwLive, key)).status, 429, 'the live default of 2 requests');

    const { key: k2 } = await gwLive.createKey({ account: 'bigco', env: 'live', rate_limits: { requests_per_minute: 50 } });
    const r = await models(gwLive, k2);
    t.equal(r.headers.get('x-ratelimit-limit-requests'), '50', 'override');
    t.equal(r.headers.get('x-ratelimit-limit-tokens'), '2000', 'the other dimension from rate_limits.live');

    const { key: tk } = await gwLive.createKey({ account: 'bigco', env: 'test' });
    t.equal((await models(gwLive, tk)).headers.get('x-ratelimit-limit-requests'), '3', 'test keys keep the test defaults');
  });

  t.test('PATCH /admin/keys/{id} rate_limits takes effect on every instance, and null removes it', async (t) => {
    const { key, id } = await gw.createKey({ account: 'bigco', env: 'live' });
    t.equal((await models(gw2, key)).headers.get('x-ratelimit-limit-requests'), null, 'unlimited, and cached on instance 2');
    const p = await gw.admin(`/admin/keys/${id}`, { method: 'PATCH', body: { rate_limits: { requests_per_minute: 2 } } });
    t.equal(p.status, 200);
    t.same(p.body.rate_limits, { requests_per_minute: 2 }, 'the record shows the override');
    t.equal((await gw.admin(`/admin/keys/${id}`)).body.rate_limits.requests_per_minute, 2, 'GET shows it too');

    // Instance 2 had the key cached: it must drop it on the invalidation (SPEC: within a pub/sub hop).
    const first = await until(
      'instance 2 applying the override',
      async () => {
        const r = await models(gw2, key);
        return r.headers.get('x-ratelimit-limit-requests') === '2' ? r : undefined;
      },
      1000,
      10,
    );
    t.equal(first.status, 200);
    const statuses = [(await models(gw, key)).status, (await models(gw2, key)).status];
    t.same(
      statuses,
      first.headers.get('x-ratelimit-remaining-requests') === '1' ? [200, 429] : [429, 429],
      'limited at 2 across both instances',
    );

    const q = await gw.admin(`/admin/keys/${id}`, { method: 'PATCH', body: { rate_limits: null } });
    t.equal(q.body.rate_limits, null);
    const free = await until(
      'instance 2 dropping the override',
      async () => {
        const r = await models(gw2, key);
        return r.status === 200 && r.headers.get('x-ratelimit-limit-requests') === null ? r : undefined;
      },
      1000,
      10,
    );
    t.same(rateHeaders(free.headers), {}, 'unlimited again: no headers');
    t.equal((await models(gw, key)).status, 200);
  });

  t.test("raising a test key's limit frees it within the same window", async (t) => {
    const { key, id } = await gw.createKey({ account: 'acme', env: 'test' });
    for (let i = 0; i < 3; i++) t.equal((await models(gw, key)).status, 200);
    t.equal((await models(gw, key)).status, 429, 'the test default of 3');
    const p = await gw.admin(`/admin/keys/${id}`, { method: 'PATCH', body: { rate_limits: { requests_per_minute: 10 } } });
    t.equal(p.status, 200);
    const r = await until(
      'the raised limit',
      async () => {
        const x = await models(gw, key);
        return x.status === 200 ? x : undefined;
      },
      1000,
      20,
    );
    t.equal(r.headers.get('x-ratelimit-limit-requests'), '10');
    const used = Number(await redis.client.get(`tg:rl:req:${id}`));
    t.equal(r.headers.get('x-ratelimit-remaining-requests'), String(10 - used), 'same window: refused requests counted too');
    t.equal(r.headers.get('x-ratelimit-limit-tokens'), '5000', 'tokens still from the test defaults');
  });

  t.test('the override is validated: positive integers, known fields only', async (t) => {
    const { id } = await gw.createKey({ account: 'acme', env: 'test' });
    for (const bad of [
      { requests_per_minute: 0 },
      { requests_per_minute: -1 },
      { tokens_per_minute: 1.5 },
      { requests_per_minute: '5' },
      { rpm: 5 },
      7,
    ]) {
      const r = await gw.admin(`/admin/keys/${id}`, { method: 'PATCH', body: { rate_limits: bad } });
      t.equal(r.status, 422, `PATCH rate_limits ${JSON.stringify(bad)} → 422`);
      t.equal(r.body.detail[0].loc[0], 'body');
      t.equal(r.body.detail[0].loc[1], 'rate_limits');
    }
    const r = await gw.admin('/admin/keys', { body: { account: 'acme', env: 'test', name: 'x', rate_limits: { requests_per_minute: 0 } } });
    t.equal(r.status, 422, 'POST validates the same way');
  });
}
