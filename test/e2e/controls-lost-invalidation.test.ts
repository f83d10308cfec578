// SPEC §1.1: a change to a key reaches every instance within 1 s over pub/sub and, if that message is
// lost, within the key cache's TTL (auth.cache_ttl_ms, ≤ 10 s). Real Redis, two gateways: an
// invalidation lost by construction (the record changed in Redis with no message) is bounded by the TTL
// and no longer; a gateway whose subscriber connection was killed subscribes again and hears later changes.
import t from 'tap';
import { startGateway, type TestGateway } from '../helpers/gateway.ts';
import { startRedis } from '../helpers/redis.ts';
import { hashKey } from '../../src/auth/keys.ts';
import { keyRecord, INVALIDATION_CHANNEL } from '../../src/store/redis-keys.ts';
import { waitFor } from '../helpers/wait.ts';

const TTL_MS = 1500;
const CONFIG = { auth: { failed_per_minute: 10_000_000, cache_ttl_ms: TTL_MS } };
const status = async (gw: TestGateway, key: string) => (await fetch(`${gw.url}/v1/models`, { headers: gw.auth(key) })).status;

// A server of its own (restartable: never a shared REDIS_URL): the test kills every subscriber connection on it.
const redis = await startRedis(t, { restartable: true });
if (redis) {
  t.test('a disable whose invalidation is lost is refused within the cache TTL, not before the entry ages out', async (t) => {
    const a = await startGateway(t, { redisUrl: redis.url, config: CONFIG });
    const b = await startGateway(t, { redisUrl: redis.url, config: CONFIG });
    const { key } = await a.createKey({ account: 'lost', env: 'test' });
    t.equal(await status(b, key), 200, 'B caches the key');
    const cachedAt = performance.now();
    // What PATCH active=false writes (redis-store updateKey), without its PUBLISH: a lost invalidation.
    await redis.client
      .multi()
      .hset(keyRecord(hashKey(key)), 'active', '0')
      .hincrby(keyRecord(hashKey(key)), 'v', 1)
      .exec();
    t.equal(await status(a, key), 401, 'a cold lookup sees the disable at once');
    const refusedAfter = await waitFor(
      async () => (await status(b, key)) === 401 && performance.now() - cachedAt,
      TTL_MS + 3000,
      'B to refuse once its entry is past the TTL',
      20,
    );
    t.ok(refusedAfter <= TTL_MS + 1000, `B refused ${Math.round(refusedAfter)} ms after caching (TTL ${TTL_MS} ms)`);
  });

  t.test('a subscriber connection killed and remade hears the next change within 1 s', async (t) => {
    const a = await startGateway(t, { redisUrl: redis.url, config: { auth: { failed_per_minute: 10_000_000 } } });
    const b = await startGateway(t, { redisUrl: redis.url, config: { auth: { failed_per_minute: 10_000_000 } } });
    const { key, id } = await a.createKey({ account: 'resub', env: 'test' });
    t.equal(await status(b, key), 200, 'B caches the key');
    const subscribers = async () => Number(((await redis.client.pubsub('NUMSUB', INVALIDATION_CHANNEL)) as [string, number])[1]);
    const before = await subscribers();
    await redis.client.call('CLIENT', 'KILL', 'TYPE', 'pubsub');
    await waitFor(async () => (await subscribers()) >= before, 10_000, 'every gateway to subscribe again', 50);
    await a.admin(`/admin/keys/${id}`, { method: 'PATCH', body: { active: false } });
    const start = performance.now();
    await waitFor(async () => (await status(b, key)) === 401, 3000, 'B to refuse the disabled key', 20);
    t.ok(performance.now() - start < 1000 + 500, `refused ${Math.round(performance.now() - start)} ms after the PATCH`);
  });
}
