/**
 * Client-side CPU of the credit round trips a live request makes (store.hold + store.settle on the
 * Redis store), 64 requests in flight as under load: through ioredis (the store with
 * `scriptPipe: false`: defineCommand scripts, autopipelining, a timer per command), RESP2 and RESP3,
 * and through the script pipe the gateway uses on a single node (src/store/script-pipe.ts). Gateway
 * CPU, not latency: it is what limits req/s on a saturated core.
 * Needs redis-server on PATH (skipped otherwise); spawns its own on a free port.
 * Run: `node bench/micro/redis-client.bench.ts`.
 */
import { execFileSync } from 'node:child_process';
import { Redis } from 'ioredis';
import { createRedisClient, createRedisStore } from '../../src/store/redis-store.ts';
import type { Store } from '../../src/store/types.ts';
import { freePort, start } from '../procs.ts';
import { createReport } from './timing.ts';

try {
  execFileSync('redis-server', ['--version'], { stdio: 'ignore' });
} catch {
  console.log('redis-server not on PATH: skipped');
  console.log('{}');
  process.exit(0);
}

const port = await freePort();
const server = await start('redis', 'redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], {
  ready: (l) => l.some((x) => x.includes('Ready to accept connections')),
});
const url = `redis://127.0.0.1:${port}`;
const IN_FLIGHT = 64;

/** Runs `count` hold+settle pairs with IN_FLIGHT at a time; resolves with the client CPU µs per pair. */
async function pairs(store: Store, count: number): Promise<number> {
  let seq = 0;
  const one = async () => {
    const id = `req_${seq++}_${Math.random().toString(36).slice(2)}`;
    const expiresAt = Date.now() + 60_000;
    await store.hold('bench', id, 1000, expiresAt);
    await store.settle({
      account: 'bench',
      requestId: id,
      costMicros: 700,
      keyId: 'key_bench',
      model: 'm',
      promptTokens: 812,
      completionTokens: 64,
      usageSource: 'upstream',
      ts: new Date().toISOString(),
      holdExpiresAtMs: expiresAt,
    });
  };
  let left = count;
  const c0 = process.cpuUsage();
  await Promise.all(
    Array.from({ length: IN_FLIGHT }, async () => {
      while (left-- > 0) await one();
    }),
  );
  const c = process.cpuUsage(c0);
  return (c.user + c.system) / count;
}

const opts = { lazyConnect: true, maxRetriesPerRequest: 1, commandTimeout: 500, enableAutoPipelining: true } as const;
const cases: [string, Store][] = [];
for (const [name, client, scriptPipe] of [
  ['ioredis, RESP2 (protocol: 2)', new Redis(url, { ...opts, protocol: 2 }), false],
  ['ioredis, RESP3 (protocol: 3, ioredis 6 default)', new Redis(url, { ...opts, protocol: 3 }), false],
  ['script pipe (as the gateway builds it)', createRedisClient({ url, commandTimeoutMs: 500 }), true],
] as const) {
  const store = await createRedisStore({ client, commandTimeoutMs: 500, settledTtlSeconds: 3600, scriptPipe });
  await store.grant('bench', 1e15, `grant-${name}`, undefined, new Date().toISOString());
  cases.push([name, store]);
}
// Interleaved rounds, best of 5 per case: the first case measured in a process pays for warming code
// the others share (a 30 % "difference" between two orders of the same clients was exactly that).
for (const [, store] of cases) await pairs(store, 3_000);
const best = cases.map(() => Infinity);
for (let round = 0; round < 5; round++) {
  for (let i = 0; i < cases.length; i++) best[i] = Math.min(best[i]!, await pairs(cases[i]![1], 5_000));
}
const report = createReport();
cases.forEach(([name], i) => report.add(`hold + settle, client CPU, ${name}`, best[i]! * 1000, 'ns/op'));
for (const [, store] of cases) await store.close();
await server.stop();
report.print();
