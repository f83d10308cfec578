/**
 * Memory of hold buckets by size and encoding: the price of a lower `hash-max-listpack-entries`
 * (docs/operations.md "Redis"), whose CPU side `bench/redis-instructions.ts --rate R --redis-config …`
 * counts. Per setting, a fresh redis-server; per bucket size n, one account's n holds settled through the
 * real store (its fields as production writes them: `=<entry id>` under a `req_` + 22 base58 request id),
 * then the bucket's `OBJECT ENCODING` and `MEMORY USAGE … SAMPLES 0`, per field.
 *   node bench/bucket-memory.ts [--lp 512,128,64] [--n 20,60,120,200,400,500]
 */
import { Redis } from 'ioredis';
import { parseArgs } from 'node:util';
import { newRequestId } from '../src/http/server.ts';
import * as K from '../src/store/redis-keys.ts';
import { createRedisStore } from '../src/store/redis-store.ts';
import { liveRequest } from './live-request.ts';
import { freePort, start } from './procs.ts';

const { values } = parseArgs({
  options: { lp: { type: 'string', default: '512,128,64' }, n: { type: 'string', default: '20,60,120,200,400,500' } },
});
const settings = values.lp.split(',').map(Number);
const sizes = values.n.split(',').map(Number);
const HOLD_TTL_MS = 660_000;
const BUCKET_MS = 10_000;

const rows: string[] = [];
for (const lp of settings) {
  const port = await freePort();
  const server = await start(
    'redis',
    'redis-server',
    ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--hash-max-listpack-entries', String(lp)],
    { ready: (l) => l.some((x) => x.includes('Ready to accept connections')), timeoutMs: 10_000 },
  );
  const url = `redis://127.0.0.1:${port}`;
  const admin = new Redis(url);
  const store = await createRedisStore({
    url,
    commandTimeoutMs: 5000,
    settledTtlSeconds: 4260,
    holdTtlMs: HOLD_TTL_MS,
    bucketMs: BUCKET_MS,
  });
  try {
    for (const n of sizes) {
      const acct = `lp${lp}-n${n}`;
      await store.grant(acct, 1e12, `grant-${acct}`, undefined, new Date().toISOString());
      // Every hold expires inside one bucket: the bucket ends with n settled fields.
      const now = Math.ceil(Date.now() / BUCKET_MS) * BUCKET_MS + 1;
      const expiresAt = now + HOLD_TTL_MS;
      for (let i = 0; i < n; i++) await liveRequest(store, acct, newRequestId(), now, HOLD_TTL_MS);
      const key = K.holdBucket(acct, Math.ceil(expiresAt / BUCKET_MS) * BUCKET_MS);
      const fields = await admin.hlen(key);
      if (fields !== n) throw new Error(`${key}: ${fields} fields, expected ${n}`);
      const encoding = await admin.object('ENCODING', key);
      const bytes = Number(await admin.call('MEMORY', 'USAGE', key, 'SAMPLES', '0'));
      rows.push(`| ${lp} | ${n} | ${encoding} | ${bytes} | ${(bytes / n).toFixed(0)} |`);
      console.error(rows.at(-1));
    }
  } finally {
    await store.close();
    admin.disconnect();
    await server.stop();
  }
}
console.log(
  [
    `\`node bench/bucket-memory.ts ${process.argv.slice(2).join(' ')}\` · ${new Date().toISOString()}`,
    '',
    '| hash-max-listpack-entries | settled fields in the bucket | encoding | MEMORY USAGE (B) | B per field |',
    '|--:|--:|---|--:|--:|',
    ...rows,
  ].join('\n'),
);
