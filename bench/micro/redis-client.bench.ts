/**
 * Client-side CPU of the credit round trips a live request makes (store.hold + store.settle on the
 * Redis store), 64 requests in flight as under load, with ioredis 6's default RESP3 against RESP2
 * (`protocol: 2`, the v5 wire protocol and parser). Gateway CPU, not latency: it is what limits
 * req/s on a saturated core. Needs redis-server on PATH (skipped otherwise); spawns its own on a
 * free port. Run: `node bench/micro/redis-client.bench.ts`.
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

/** Client CPU µs per hold+settle pair, `n` pairs with IN_FLIGHT at a time (best of 3). */
async function pairs(store: Store, n: number): Promise<number> {
  await store.grant('bench', 1e15, `grant-${Math.random()}`, undefined, new Date().toISOString());
  let seq = 0;
  const one = async () => {
    const id = `req_${seq++}_${Math.random().toString(36).slice(2)}`;
    await store.hold('bench', id, 1000, Date.now() + 60_000);
    await store.settle({ account: 'bench', requestId: id, costMicros: 700, keyId: 'key_bench', model: 'm', promptTokens: 812, completionTokens: 64, usageSource: 'upstream', ts: new Date().toISOString() });
  };
  const run = async (count: number) => {
    let left = count;
    await Promise.all(Array.from({ length: IN_FLIGHT }, async () => {
      while (left-- > 0) await one();
    }));
  };
  await run(2_000); // warm-up: JIT, script SHA cached per connection
  let best = Infinity;
  for (let r = 0; r < 3; r++) {
    const c0 = process.cpuUsage();
    await run(n);
    const c = process.cpuUsage(c0);
    best = Math.min(best, (c.user + c.system) / n);
  }
  return best;
}

const report = createReport();
for (const [name, client] of [
  ['RESP3 (ioredis 6 default, as the gateway builds it)', createRedisClient({ url, commandTimeoutMs: 500 })],
  ['RESP2 (protocol: 2)', new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 1, commandTimeout: 500, enableAutoPipelining: true, protocol: 2 })],
] as const) {
  const store = await createRedisStore({ client, commandTimeoutMs: 500 });
  report.add(`hold + settle, client CPU, ${name}`, (await pairs(store, 10_000)) * 1000, 'ns/op');
  await store.close();
}
await server.stop();
report.print();
