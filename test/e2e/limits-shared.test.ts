// Two gateway instances on one Redis share every key's counters (SPEC §1.5): N requests split across
// them exhaust the key, and tokens settled on one instance show on the other.
import t from 'tap';
import { startRedis } from '../helpers/redis.ts';
import { startGateway } from '../helpers/gateway.ts';
import { startSimulator } from '../../src/simulator/simulator.ts';
import { chat, chatBody, models, until } from './limits-fixture.ts';

const redis = await startRedis(t);
if (redis) {
  const sim = await startSimulator();
  t.teardown(() => sim.close());
  const config = { rate_limits: { window_seconds: 5, test: { requests_per_minute: 4, tokens_per_minute: 10_000 } } };
  const gw1 = await startGateway(t, { redisUrl: redis.url, upstreamUrl: sim.url, config });
  const gw2 = await startGateway(t, { redisUrl: redis.url, upstreamUrl: sim.url, config });

  t.test('N requests split across two instances exhaust the key on both', async (t) => {
    const { key, id } = await gw1.createKey({ account: 'acme-1', env: 'test' });
    const order = [gw1, gw2, gw2, gw1];
    for (const [i, gw] of order.entries()) {
      const r = await models(gw, key);
      t.equal(r.status, 200, `request ${i + 1} on instance ${gw === gw1 ? 1 : 2}`);
      t.equal(r.headers.get('x-ratelimit-remaining-requests'), String(3 - i), 'one count for both instances');
    }
    const a = await models(gw1, key);
    const b = await chat(gw2, key);
    t.equal(a.status, 429, 'instance 1 refuses request 5');
    t.equal(b.status, 429, 'instance 2 refuses request 6');
    t.equal(b.body.error.code, 'rate_limit_exceeded');
    t.equal(await redis.client.get(`tg:rl:req:${id}`), '6', 'one counter in Redis');
  });

  t.test('concurrent requests on both instances: exactly N pass', async (t) => {
    const { key } = await gw1.createKey({ account: 'acme-2', env: 'test', rate_limits: { requests_per_minute: 10 } });
    const replies = await Promise.all(Array.from({ length: 30 }, (_, i) => models(i % 2 ? gw1 : gw2, key)));
    const statuses = replies.map((r) => r.status);
    t.equal(statuses.filter((s) => s === 200).length, 10, '10 of 30 pass');
    t.equal(statuses.filter((s) => s === 429).length, 20, 'the rest are refused');
  });

  t.test('tokens settled on one instance are what the other sees', async (t) => {
    const { key, id } = await gw1.createKey({ account: 'acme-3', env: 'test' });
    const r = await chat(gw1, key, chatBody({ max_tokens: 500 }), { 'x-sim-tokens': '10' });
    t.equal(r.status, 200);
    const used = r.body.usage.total_tokens as number;
    t.equal(used, 12, 'simulator usage: 2 prompt + 10 completion');
    await until('the settle correction', async () => ((await redis.client.get(`tg:rl:tok:${id}`)) === String(used) ? true : undefined));
    const m = await models(gw2, key);
    t.equal(m.headers.get('x-ratelimit-remaining-tokens'), String(10_000 - used), 'instance 2 shows the real usage');
  });

  t.test("an account's test keys share one account counter across instances (rate_limits.test_account)", async (t) => {
    // 4 × the per-key 4 requests: 16 for the account, whichever key and instance they come through.
    const keys = await Promise.all([0, 1, 2, 3, 4].map(() => gw1.createKey({ account: 'acme-4', env: 'test' })));
    const replies = [];
    for (let i = 0; i < 20; i++) replies.push(await models(i % 2 ? gw1 : gw2, keys[i % 5]!.key));
    t.equal(replies.filter((r) => r.status === 200).length, 16, '16 of 20 pass: 5 keys × 4 would have been 20');
    const refused = replies.filter((r) => r.status === 429);
    t.equal(refused.length, 4);
    t.ok(
      refused.every((r) => r.headers.get('x-ratelimit-scope') === 'account'),
      'refused by the account limit',
    );
    t.equal(await redis.client.get('tg:rl:acct:req:acme-4'), '20', 'one account counter in Redis');
  });
}
