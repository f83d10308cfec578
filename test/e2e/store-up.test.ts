// tollgate_store_up (issue 27): the store alert used to watch the rate limiter's fallback gauge, which
// stays 0 on a gateway that started while Redis was down. The gauge is set by every hold-reaper pass
// (from boot) and /readyz; an outage is logged once, without a stack, and once more when it ends.
import t from 'tap';
import { startRedis } from '../helpers/redis.ts';
import { startGateway } from '../helpers/gateway.ts';
import { waitFor } from '../helpers/wait.ts';
import { startReaper } from '../../src/credit/reaper.ts';
import { compileConfig } from '../../src/config/schema.ts';
import { storeAddress, storeUnreachableMessage } from '../../src/obs/boot-report.ts';
import type { Store } from '../../src/store/types.ts';
import { captureLogs } from '../helpers/logs.ts';

const storeUp = async (adminUrl: string) => {
  const text = await (await fetch(`${adminUrl}/metrics`)).text();
  return /^tollgate_store_up (\d+)/m.exec(text)?.[1];
};

const redis = await startRedis(t, { restartable: true });
if (redis) {
  t.test('tollgate_store_up follows Redis through an outage, from the reaper alone', async (t) => {
    const gw = await startGateway(t, {
      redisUrl: redis.url,
      config: { store: { command_timeout_ms: 300 }, credit: { reaper_interval_ms: 100 } },
    });
    await waitFor(async () => (await storeUp(gw.adminUrl)) === '1', 10_000, 'store_up 1', 50);
    t.pass('1 while Redis answers');
    await redis.stop();
    // No /readyz call here: the reaper alone must notice.
    await waitFor(async () => (await storeUp(gw.adminUrl)) === '0', 10_000, 'store_up 0', 50);
    t.pass('0 once Redis is down');
    await redis.start();
    await waitFor(async () => (await storeUp(gw.adminUrl)) === '1', 15_000, 'store_up 1 again', 50);
    t.pass('1 again once Redis is back');
  });
}

t.test('the reaper logs an outage once, without a stack, and its end once', async (t) => {
  const { logger, lines } = captureLogs();
  let fail = true;
  const ups: boolean[] = [];
  const store = {
    reapExpiredHolds: async () => {
      if (fail) throw Object.assign(new Error('Command timed out'), { stack: 'Error: Command timed out\n    at ioredis internals' });
      return 0;
    },
  } as unknown as Store;
  const reaper = startReaper({ store, now: Date.now, intervalMs: 60_000, logger, onStoreUp: (u) => ups.push(u) });
  t.teardown(() => reaper.stop());
  for (let i = 0; i < 5; i++) await reaper.runOnce();
  fail = false;
  for (let i = 0; i < 3; i++) await reaper.runOnce();
  logger.flush();
  await new Promise((r) => setTimeout(r, 50));
  const reaperLines = lines.filter((l) => String(l.msg).startsWith('hold reaper'));
  t.equal(reaperLines.length, 2, 'one line when it starts failing, one when it recovers');
  t.match(reaperLines[0], { level: 40, err: 'Command timed out', msg: /hold reaper failed; retrying every 60000 ms/ });
  t.notMatch(JSON.stringify(reaperLines), /ioredis internals|stack/, 'no stack trace');
  t.match(reaperLines[1], { level: 30, msg: 'hold reaper: the store answers again' });
  t.same(ups.slice(-4), [false, true, true, true], 'every pass reports the store up or down');
});

t.test("the Redis outage line names the address (never the password), the error, clients' answer, the retry", async (t) => {
  const doc = { models: [{ name: 'm', price: { input: 1, output: 1 }, upstreams: [{ url: 'http://x/v1' }] }] };
  const config = compileConfig(doc, { REDIS_URL: 'redis://:hunter2@10.0.0.7:6390/0' });
  t.equal(storeAddress(config), '10.0.0.7:6390');
  const line = storeUnreachableMessage(storeAddress(config), new Error('connect ECONNREFUSED 10.0.0.7:6390'));
  t.match(
    line,
    /^Redis at 10\.0\.0\.7:6390 is unreachable \(connect ECONNREFUSED 10\.0\.0\.7:6390\): live keys answer 503 store_unavailable/,
  );
  t.match(line, /retrying/);
  t.notMatch(line, /hunter2/);
  t.equal(storeAddress(compileConfig(doc, { REDIS_CLUSTER_NODES: 'a:1,b:2' })), 'a:1,b:2');
});

t.test('REDIS_URL must be redis://, rediss:// or a socket path (http:// was taken for a socket path)', async (t) => {
  const doc = { models: [{ name: 'm', price: { input: 1, output: 1 }, upstreams: [{ url: 'http://x/v1' }] }] };
  for (const ok of ['redis://127.0.0.1:6379', 'rediss://u:p@h:6380/1', '/var/run/redis.sock', 'REDIS://h'])
    t.equal(compileConfig(doc, { REDIS_URL: ok }).store.redisUrl, ok, ok);
  for (const bad of ['http://127.0.0.1:6379', '127.0.0.1:6379', 'localhost']) {
    t.throws(() => compileConfig(doc, { REDIS_URL: bad }), /REDIS_URL \(environment\): must start with redis:\/\/ or rediss:\/\//, bad);
  }
  t.throws(() => compileConfig({ ...doc, store: { redis_url: 'http://x:1' } }, {}), /store\.redis_url: must start with redis:\/\//);
});
