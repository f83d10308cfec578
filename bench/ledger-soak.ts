/**
 * Soak figure for issue 15 (SPEC §10): Redis `used_memory` per live request with the ledger export on.
 * Everything in one process but redis-server: the gateway (in-process, Redis store), the simulator, a
 * signature-checking S3 (s3rver). Each round sends N live, non-streaming requests, then runs one export
 * pass (retention_days 0, so everything exported is trimmed) and reads INFO memory.
 *
 *   node bench/ledger-soak.ts [--rounds 5] [--requests 2000] [--concurrency 16]
 *     → bench/results/ledger-soak.md (and prints it)
 *
 * Reported per round: used_memory, its growth per request since the baseline (taken after a warm-up
 * round and its export), the ledger entries left in Redis (XLEN) and the settled markers (one key per
 * settled request, kept for the hold TTL + 1 h: issue 15 item 1 removes them, on another branch).
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { writeFile } from 'node:fs/promises';
import { parseArgs } from 'node:util';
import { Writable } from 'node:stream';
import { Redis } from 'ioredis';
import { compileConfig } from '../src/config/schema.ts';
import { createGateway } from '../src/gateway.ts';
import { openStore } from '../src/main.ts';
import { createLogger } from '../src/obs/logger.ts';
import { createMetrics } from '../src/obs/metrics.ts';
import { startSimulator } from '../src/simulator/simulator.ts';
import * as K from '../src/store/redis-keys.ts';
import { startLocalS3 } from '../scripts/local-s3.ts';
import { describeRef } from './git.ts';
import { freePort } from './procs.ts';

const { values } = parseArgs({
  options: {
    rounds: { type: 'string', default: '5' },
    requests: { type: 'string', default: '2000' },
    concurrency: { type: 'string', default: '16' },
  },
});
const ROUNDS = Number(values.rounds);
const N = Number(values.requests);
const C = Number(values.concurrency);
const TOKEN = 'soak-admin-token-0123456789-abcdefghijkl';

const port = await freePort();
const redisProc = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], {
  stdio: 'ignore',
});
process.once('exit', () => redisProc.kill('SIGKILL'));
const redis = new Redis(port, '127.0.0.1', { retryStrategy: () => 50 });
redis.on('error', () => {}); // refused until redis-server listens; the client retries every 50 ms
await new Promise((resolve) => redis.once('ready', resolve));
const s3 = await startLocalS3('soak');
const sim = await startSimulator();

const config = compileConfig(
  {
    server: { host: '127.0.0.1', port: 0, admin_host: '127.0.0.1', admin_port: 0 },
    shares: {
      s3: {
        endpoint: s3.endpoint,
        region: 'us-east-1',
        bucket: s3.bucket,
        force_path_style: true,
        access_key_id: s3.accessKeyId,
        secret_access_key: s3.secretAccessKey,
      },
    },
    // The timer never fires during a round: each export pass is run (and timed) by this script.
    ledger: { retention_days: 0, export: { interval_seconds: 86_400 } },
    models: [{ name: 'soak', max_output_tokens: 64, price: { input: 1, output: 2 }, upstreams: [{ url: sim.url }] }],
  },
  { TOLLGATE_ADMIN_TOKEN: TOKEN },
);
const logger = createLogger('warn', new Writable({ write: (_c, _e, cb) => cb() }));
const store = await openStore({ ...config, store: { ...config.store, redisUrl: `redis://127.0.0.1:${port}` } }, {}, logger);
const gateway = createGateway({ config, store, logger, metrics: createMetrics({ defaults: false }) });
const { publicUrl, adminUrl } = await gateway.listen();
const admin = (path: string, body: unknown) =>
  fetch(`${adminUrl}${path}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  }).then((r) => r.json() as Promise<Record<string, unknown>>);
const { key } = (await admin('/admin/keys', { account: 'soak', env: 'live', name: 'soak' })) as { key: string };
await admin('/admin/accounts/soak/credits', { amount_micros: 1e15 });

const body = JSON.stringify({ model: 'soak', messages: [{ role: 'user', content: 'soak test prompt' }], sim: { tokens: 16 } });
async function load(n: number): Promise<void> {
  let sent = 0;
  await Promise.all(
    Array.from({ length: C }, async () => {
      while (sent < n) {
        sent++;
        const r = await fetch(`${publicUrl}/v1/chat/completions`, {
          method: 'POST',
          headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
          body,
        });
        await r.arrayBuffer();
        if (r.status !== 200) throw new Error(`status ${r.status}`);
      }
    }),
  );
}

const usedMemory = async () => Number(/used_memory:(\d+)/.exec(await redis.info('memory'))![1]);
async function markers(): Promise<number> {
  let n = 0;
  let cursor = '0';
  do {
    const [next, keys] = await redis.scan(cursor, 'MATCH', K.settled('soak', '*'), 'COUNT', 1000);
    cursor = next;
    n += keys.length;
  } while (cursor !== '0');
  return n;
}
/** Settles are not awaited by the response: wait until no credit is held (every request held some). */
async function settled(): Promise<void> {
  for (;;) {
    const a = (await fetch(`${adminUrl}/admin/accounts/soak`, { headers: { authorization: `Bearer ${TOKEN}` } }).then((r) => r.json())) as {
      held_micros: number;
    };
    if (a.held_micros === 0) return;
    await new Promise((r) => setTimeout(r, 50));
  }
}

const rows: string[][] = [];
let total = 0;
await load(N);
total += N;
await settled();
await gateway.exporter!.runOnce();
const baseline = await usedMemory();
for (let round = 1; round <= ROUNDS; round++) {
  await load(N);
  total += N;
  await settled();
  const before = await usedMemory();
  const xlenBefore = await redis.xlen(K.ledger('soak'));
  const t0 = performance.now();
  const r = await gateway.exporter!.runOnce();
  const ms = performance.now() - t0;
  const after = await usedMemory();
  rows.push([
    String(round),
    String(total),
    String(before),
    String(after),
    ((before - after) / N).toFixed(1),
    ((after - baseline) / (round * N)).toFixed(1),
    `${xlenBefore} → ${await redis.xlen(K.ledger('soak'))}`,
    String(await markers()),
    `${r.entries} in ${r.objects} objects, ${ms.toFixed(0)} ms`,
  ]);
}
const sample = (await redis.scan('0', 'MATCH', K.settled('soak', '*'), 'COUNT', 1000))[1][0];
const markerBytes = sample ? `${await redis.memory('USAGE', sample)} bytes` : 'none left';
const { label } = describeRef(undefined);
const md = [
  '# Ledger soak: Redis memory per live request with the export on',
  '',
  `\`node bench/ledger-soak.ts --rounds ${ROUNDS} --requests ${N} --concurrency ${C}\` at ${label}, ${new Date().toISOString()}.`,
  'Live, non-streaming requests (16 completion tokens) through an in-process gateway on redis-server',
  `(no persistence); after each round one export pass with \`retention_days: 0\` (export, then trim).`,
  `Baseline: used_memory after a warm-up round of ${N} requests and its export (${baseline} bytes).`,
  '',
  '| round | requests | used_memory before export | after export + trim | freed by export + trim, per request | retained per request since baseline | ledger XLEN | settled markers | export pass |',
  '|---|---|---|---|---|---|---|---|---|',
  ...rows.map((r) => `| ${r.join(' | ')} |`),
  '',
  `"Freed" is what one request's ledger entry costs in the stream (what stays per request, forever, with the`,
  'export disabled). "Retained" is the growth of used_memory per request since the baseline once every',
  'entry is exported and trimmed: the settled markers, one key per live request kept for the hold TTL + 1 h',
  `(one marker: \`MEMORY USAGE\` ${markerBytes}, plus its keyspace entry), which issue 15 item 1 removes on`,
  'another branch; with them gone the retained figure is what to hold against the ≤ 10 bytes target.',
  '',
].join('\n');
await writeFile(new URL('./results/ledger-soak.md', import.meta.url), md);
process.stdout.write(md);
await gateway.close(1000);
await store.close();
await sim.close();
await s3.close();
redis.disconnect();
redisProc.kill('SIGTERM');
