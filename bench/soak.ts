/**
 * Soak figure for issue 15 (SPEC §4, §10): Redis `used_memory` per live request with the ledger export
 * on. Used by `bench/ledger-soak.ts` (standalone, bench/results/ledger-soak.md) and by the last phase of
 * `npm run bench` (bench/run.ts). Its own redis-server (no persistence), so nothing of the load phases
 * counts; in this process: the gateway (Redis store, export to a signature-checking s3rver bucket,
 * `retention_days: 0` so everything exported is trimmed), the simulator and the load.
 *
 * Each round sends N live, non-streaming requests, waits until every hold is settled and its hold bucket
 * is due, then runs one export pass (`POST /admin/ledger/export`) and one reaper pass, and reads INFO
 * memory. The hold TTL is 2 s (`upstream.total_timeout_ms` 2000, `hold_margin_seconds` 0): the reaper
 * reaches a request's bucket 2–3 s after it instead of 660 s with the defaults, so a few rounds show what
 * stays once the reaper has passed (docs/ledger.md "Memory"), not the working set of open buckets.
 */
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
import { freePort, start } from './procs.ts';
import type { SoakResult, SoakRound } from './soak-report.ts';

export interface SoakOptions {
  /** Measured rounds after the warm-up round. */
  rounds: number;
  /** Live requests per round. */
  requests: number;
  /** Requests in flight. */
  concurrency: number;
  log?: (s: string) => void;
}

const TOKEN = 'soak-Wq7eT2bZrN9vK4xLp8Fs3Hd6Yj1Mc';
const ACCOUNT = 'soak';
/** Hold TTL of the soak gateway: see the header. */
const TOTAL_TIMEOUT_MS = 2000;
const BUCKET_MS = 1000; // hold-bucket.ts bucketMsFor(2000)

/** Runs the soak on a fresh redis-server and returns its figures; stops everything it started. */
export async function runSoak(o: SoakOptions): Promise<SoakResult> {
  const log = o.log ?? (() => {});
  const port = await freePort();
  const redisProc = await start(
    'soak-redis',
    'redis-server',
    ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'],
    {
      ready: (l) => l.some((x) => x.includes('Ready to accept connections')),
    },
  );
  const cleanup: (() => Promise<unknown>)[] = [() => redisProc.stop()];
  try {
    const redis = new Redis(port, '127.0.0.1');
    cleanup.push(async () => redis.disconnect());
    const s3 = await startLocalS3('soak');
    cleanup.push(() => s3.close());
    const sim = await startSimulator();
    cleanup.push(() => sim.close());

    const config = compileConfig(
      {
        server: { host: '127.0.0.1', port: 0, admin_host: '127.0.0.1', admin_port: 0 },
        upstream: { total_timeout_ms: TOTAL_TIMEOUT_MS },
        // The reaper's and the exporter's timers never fire during a round: each pass is run here.
        credit: { hold_margin_seconds: 0, reaper_interval_ms: 86_400_000 },
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
        ledger: { retention_days: 0, export: { interval_seconds: 86_400 } },
        models: [{ name: 'soak', max_output_tokens: 64, price: { input: 1, output: 2 }, upstreams: [{ url: sim.url }] }],
      },
      { TOLLGATE_ADMIN_TOKEN: TOKEN },
    );
    const logger = createLogger('warn', new Writable({ write: (_c, _e, cb) => cb() }));
    const store = await openStore({ ...config, store: { ...config.store, redisUrl: `redis://127.0.0.1:${port}` } }, {}, logger);
    cleanup.push(() => store.close());
    const gateway = createGateway({ config, store, logger, metrics: createMetrics({ defaults: false }) });
    const { publicUrl, adminUrl } = await gateway.listen();
    cleanup.push(() => gateway.close(1000));

    const admin = async (method: string, path: string, body?: unknown) => {
      const r = await fetch(`${adminUrl}${path}`, {
        method,
        headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
        ...(body !== undefined && { body: JSON.stringify(body) }),
      });
      const json = (await r.json()) as Record<string, unknown>;
      if (!r.ok) throw new Error(`${method} ${path}: ${r.status} ${JSON.stringify(json)}`);
      return json;
    };
    const { key } = (await admin('POST', '/admin/keys', { account: ACCOUNT, env: 'live', name: 'soak' })) as { key: string };
    await admin('POST', `/admin/accounts/${ACCOUNT}/credits`, { amount_micros: 1e15 });

    const body = JSON.stringify({ model: 'soak', messages: [{ role: 'user', content: 'soak test prompt' }], sim: { tokens: 16 } });
    const load = async (n: number) => {
      let sent = 0;
      await Promise.all(
        Array.from({ length: o.concurrency }, async () => {
          while (sent < n) {
            sent++;
            const r = await fetch(`${publicUrl}/v1/chat/completions`, {
              method: 'POST',
              headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
              body,
            });
            await r.arrayBuffer();
            if (r.status !== 200) throw new Error(`soak request: status ${r.status}`);
          }
        }),
      );
    };
    const usedMemory = async () => Number(/used_memory:(\d+)/.exec(await redis.info('memory'))![1]);
    /** used_memory once UNLINKed values are freed (Redis frees them on a background thread). */
    const freedMemory = async () => {
      while (!/lazyfree_pending_objects:0\r?\n/.test(await redis.info('memory'))) await new Promise((r) => setTimeout(r, 20));
      return usedMemory();
    };
    /** Settles are not awaited by the response: wait until no credit is held (every request held some). */
    const settled = async () => {
      while (((await admin('GET', `/admin/accounts/${ACCOUNT}`)) as { held_micros: number }).held_micros !== 0)
        await new Promise((r) => setTimeout(r, 50));
    };
    /** Waits until every hold of the round is past its bucket's due time, then one export and one reaper pass. */
    const passes = async (lastRequestAt: number) => {
      await settled();
      const due = lastRequestAt + TOTAL_TIMEOUT_MS + 2 * BUCKET_MS;
      await new Promise((r) => setTimeout(r, Math.max(0, due - Date.now())));
      const t0 = performance.now();
      const report = (await admin('POST', '/admin/ledger/export')) as { entries: number; objects: number; failed: number };
      const exportMs = performance.now() - t0;
      // A failed pass would leave entries in Redis and read as retained memory.
      if (report.failed > 0) throw new Error(`soak: export pass failed for ${report.failed} account(s)`);
      const usedAfterExport = await freedMemory();
      await store.reapExpiredHolds(Date.now(), new Date().toISOString());
      return { report, exportMs, usedAfterExport, usedAfter: await freedMemory() };
    };

    await load(o.requests);
    const baseline = (await passes(Date.now())).usedAfter;
    const baselineKeys = await redis.dbsize();
    log(`soak: baseline ${baseline} bytes, ${baselineKeys} keys after a warm-up round of ${o.requests} requests`);
    const rounds: SoakRound[] = [];
    for (let round = 1; round <= o.rounds; round++) {
      await load(o.requests);
      const lastRequestAt = Date.now();
      await settled();
      const usedBefore = await usedMemory();
      const xlenBefore = await redis.xlen(K.ledger(ACCOUNT));
      const { report, exportMs, usedAfterExport, usedAfter } = await passes(lastRequestAt);
      const r: SoakRound = {
        round,
        total: (round + 1) * o.requests,
        usedBefore,
        usedAfterExport,
        usedAfter,
        exportFreedPerReq: (usedBefore - usedAfterExport) / o.requests,
        reaperFreedPerReq: (usedAfterExport - usedAfter) / o.requests,
        sinceBaselinePerReq: (usedAfter - baseline) / (round * o.requests),
        growthPerReq: (usedAfter - (rounds.at(-1)?.usedAfter ?? baseline)) / o.requests,
        xlenBefore,
        xlenAfter: await redis.xlen(K.ledger(ACCOUNT)),
        keys: await redis.dbsize(),
        exported: report.entries,
        objects: report.objects,
        exportMs,
      };
      rounds.push(r);
      log(
        `soak round ${round}/${o.rounds}: used_memory ${usedBefore} → ${usedAfter} after export + trim + reaper, ${r.growthPerReq.toFixed(1)} B/request since the previous round, ${r.exported} entries in ${r.objects} objects`,
      );
    }
    const retainedPerReq = (rounds.at(-1)!.usedAfter - rounds[0]!.usedAfter) / ((rounds.length - 1) * o.requests);
    return {
      rounds,
      baseline,
      baselineKeys,
      requests: o.requests,
      concurrency: o.concurrency,
      holdTtlMs: TOTAL_TIMEOUT_MS,
      retainedPerReq,
    };
  } finally {
    for (const c of cleanup.reverse()) await c().catch(() => {});
  }
}
