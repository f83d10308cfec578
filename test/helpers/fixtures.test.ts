// The shared test fixtures must themselves work: every Redis-backed test trusts them.
import t from 'tap';
import { createServer, connect } from 'node:net';
import { once } from 'node:events';
import { chmodSync } from 'node:fs';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import type { ChildProcess } from 'node:child_process';
import { freePort } from './ports.ts';
import { waitFor } from './wait.ts';
import { MISSING_REDIS, monitorArgs, monitorRedis, redisSource, requireRedis, startRedis } from './redis.ts';
import type { FixtureHost } from './redis.ts';

/** Whether a TCP connect to 127.0.0.1:port is refused. */
async function refused(port: number): Promise<boolean> {
  const socket = connect(port, '127.0.0.1');
  try {
    await once(socket, 'connect');
    return false;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'ECONNREFUSED';
  } finally {
    socket.destroy();
  }
}

t.test('freePort returns a loopback port that can be bound', async (t) => {
  const port = await freePort();
  t.ok(port > 0 && port < 65536, `port ${port} is in range`);
  const server = createServer();
  server.listen(port, '127.0.0.1');
  await once(server, 'listening');
  t.equal((server.address() as { port: number }).port, port);
  server.close();
});

t.test('startRedis serves a real Redis with a working url', async (t) => {
  const redis = await startRedis(t);
  if (!redis) return;
  t.equal(await redis.client.ping(), 'PONG');
  t.equal(Number(new URL(redis.url).port), redis.port, 'url carries the port');
  t.ok(redis.child?.pid, 'a redis-server process is running');
  // Code under test builds its own clients from `url`: they must see the same data.
  await redis.client.set('fixture:k', 'v');
  const other = new Redis(redis.url, { lazyConnect: true });
  await other.connect();
  t.equal(await other.get('fixture:k'), 'v');
  other.disconnect();
});

t.test('monitorRedis sees every command after it resolves, even with traffic during its handshake', async (t) => {
  const redis = await startRedis(t);
  if (!redis) return;
  // Traffic on another connection while MONITOR starts: the case where ioredis' monitor() loses its
  // command queue (MONITOR's OK and the first monitored line in one read).
  let busy = true;
  const traffic = (async () => {
    while (busy) await redis.client.ping();
  })();
  for (let i = 0; i < 20; i++) {
    const m = await monitorRedis(redis.url);
    await redis.client.set(`mon:${i}`, 'a "quoted"\nvalue');
    const seen = await waitFor(() => m.seen.includes(`set mon:${i} a "quoted"\nvalue`));
    m.close();
    t.ok(seen, `round ${i}: the SET after the handshake was seen, arguments unescaped`);
  }
  busy = false;
  await traffic;
  t.same(monitorArgs(String.raw`1.5 [0 127.0.0.1:1] "get" "\x01\"" "\xe2"`), ['get', '\x01"', '\xe2'], 'sdscatrepr escapes decoded');
});

t.test('stop() is a real outage; start() brings an empty server back on the same port', async (t) => {
  const redis = await startRedis(t, { restartable: true });
  if (!redis) return;
  const port = redis.port;
  await redis.client.set('fixture:before', '1');

  await redis.stop();
  t.equal(redis.child, null, 'no child while stopped');
  t.ok(await refused(port), 'connections are refused while stopped');
  await t.rejects(redis.client.ping(), 'commands fail during the outage (maxRetriesPerRequest: 1)');

  await redis.start();
  t.equal(redis.port, port, 'same port after restart');
  t.equal(await redis.client.ping(), 'PONG', 'the same client reconnected');
  t.equal(await redis.client.get('fixture:before'), null, 'no persistence: --save "" --appendonly no');
});

t.test('two fixtures in parallel get different ports and separate data', async (t) => {
  const [a, b] = await Promise.all([startRedis(t), startRedis(t)]);
  if (!a || !b) return;
  t.not(a.port, b.port);
  await a.client.set('fixture:shared', 'a');
  t.equal(await b.client.get('fixture:shared'), null, "b does not see a's key");
});

t.test('teardown kills the server', async (t) => {
  const seen: { child: ChildProcess | null; port: number } = { child: null, port: 0 };
  await t.test('owner', async (t) => {
    const redis = await startRedis(t);
    if (!redis) return;
    seen.child = redis.child;
    seen.port = redis.port;
  });
  const { child, port } = seen;
  if (child === null) return;
  t.ok(child.exitCode !== null || child.signalCode !== null, 'redis-server has exited');
  t.ok(await refused(port), 'its port refuses connections');
});

t.test('REDIS_URL mode claims separate DBs, flushes them and releases the locks', async (t) => {
  const server = await startRedis(t);
  if (!server) return;
  const base = server.url;
  // PATH without redis-server forces the REDIS_URL branch against the server started above.
  const env = { PATH: '', REDIS_URL: base };
  await t.test('claims', async (t) => {
    const [a, b] = await Promise.all([startRedis(t, { env }), startRedis(t, { env })]);
    if (!a || !b) return t.fail('REDIS_URL fixture unavailable');
    t.equal(a.child, null);
    t.equal(a.port, server.port);
    const dbA = Number(new URL(a.url).pathname.slice(1));
    const dbB = Number(new URL(b.url).pathname.slice(1));
    t.not(dbA, dbB, 'parallel fixtures get different DBs');
    t.ok(dbA >= 1 && dbA <= 15 && dbB >= 1 && dbB <= 15, 'DB 0 is never handed out');
    await a.client.set('fixture:x', '1');
    t.equal(await b.client.get('fixture:x'), null);
    await t.rejects(a.stop(), /cannot be stopped/);
    t.equal((await server.client.keys('tollgate:test-db-lock:*')).length, 2, 'two locks held in DB 0');
  });
  t.same(await server.client.keys('tollgate:test-db-lock:*'), [], 'locks released at teardown');
  const probe = new Redis(base, { lazyConnect: true });
  await probe.connect();
  let keys = 0;
  for (let db = 1; db <= 15; db++) {
    await probe.select(db);
    keys += await probe.dbsize();
  }
  probe.disconnect();
  t.equal(keys, 0, 'claimed DBs were flushed at teardown');
});

t.test('redisSource prefers a local redis-server, then REDIS_URL', async (t) => {
  const dir = t.testdir({ 'redis-server': '#!/bin/sh\n' });
  chmodSync(join(dir, 'redis-server'), 0o755);
  t.same(redisSource({ PATH: dir, REDIS_URL: 'redis://x:1' }), { kind: 'local' });
  t.same(redisSource({ PATH: '', REDIS_URL: 'redis://x:1' }), { kind: 'external', url: 'redis://x:1' });
  t.equal(redisSource({ PATH: '', REDIS_URL: 'redis://x:1' }, true).kind, 'missing', 'a shared server cannot be restarted');
  t.same(redisSource({ PATH: '' }), { kind: 'missing', reason: MISSING_REDIS });
});

/** A fake tap Test that records what the policy did to it. */
function fakeHost() {
  const calls = { fail: [] as string[], plan: [] as [number, string | undefined][] };
  const host: FixtureHost = {
    teardown: () => {},
    fail: (message) => calls.fail.push(message),
    plan: (n, comment) => void calls.plan.push([n, comment]),
  };
  return { host, calls };
}

t.test('missing Redis: loud skip locally, failure in CI', async (t) => {
  const stderr = t.capture(process.stderr, 'write');
  const local = fakeHost();
  const localResult = requireRedis(local.host, { PATH: '' });
  const ci = fakeHost();
  const ciResult = requireRedis(ci.host, { PATH: '', CI: 'true' });
  const viaStart = await startRedis(fakeHost().host, { env: { PATH: '' } });
  const written = stderr
    .args()
    .map((a) => String(a[0]))
    .join('');
  stderr.restore();

  t.equal(localResult, false);
  t.same(local.calls.plan, [[0, `SKIPPED: ${MISSING_REDIS}`]], 'local run plans 0 with the skip reason');
  t.same(local.calls.fail, [], 'local run does not fail');

  t.equal(ciResult, false);
  t.same(ci.calls.plan, [], 'CI never skips');
  t.equal(ci.calls.fail.length, 1, 'CI fails the test');
  t.match(ci.calls.fail[0], MISSING_REDIS);

  t.match(written, `SKIPPED: ${MISSING_REDIS}`, 'skip warning goes to stderr');
  t.match(written, /FAILED \(CI=true/, 'CI failure goes to stderr');
  t.equal(viaStart, null, 'startRedis returns null');
});
