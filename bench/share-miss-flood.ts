/**
 * SPEC §13 against uncached share reads (docs/shares.md, "What a miss costs, and who waits"): one
 * account reads its own big shares round-robin (no key needed), more shares than the 64 MiB cache
 * holds, so every read is a miss; meanwhile another account's cached share and /healthz are read every
 * 20 ms and timed. The gateway, S3 (scripts/local-s3.ts) and the flood each run in a process of their
 * own, on a real redis-server. Prints the victim's and /healthz's p50/p99 without and with the flood,
 * the flood's reads/s and the gateway's CPU per flood read (/proc).
 *
 *   node bench/share-miss-flood.ts [--shares 80] [--bytes 1000000] [--connections 32] [--ms 10000]
 *
 * Results: bench/results/share-miss-flood.md.
 */
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { Pool } from 'undici';
import { startLocalS3 } from '../scripts/local-s3.ts';
import { startRedis } from '../test/helpers/redis.ts';
import { ADMIN_TOKEN } from '../test/helpers/gateway.ts';
import { spawnGateway } from '../test/e2e/credit-support.ts';

const SELF = new URL(import.meta.url).pathname;
const role = process.argv[2];

if (role === '--s3') {
  // The S3 server's own process: prints its endpoint, stops on SIGTERM.
  const s3 = await startLocalS3('shares');
  console.log(s3.endpoint);
  process.on('SIGTERM', () => void s3.close().then(() => process.exit(0)));
} else if (role === '--flood') {
  // The flooding account's process: reads the slugs round-robin at `connections` for `ms`.
  const [url, slugsJson, connections, ms] = process.argv.slice(3);
  const slugs = JSON.parse(slugsJson!) as string[];
  const pool = new Pool(url!, { connections: Number(connections) });
  let stop = false;
  let reads = 0;
  let i = 0;
  const statuses: Record<number, number> = {};
  setTimeout(() => (stop = true), Number(ms));
  await Promise.all(
    Array.from({ length: Number(connections) }, async () => {
      while (!stop) {
        const r = await pool.request({ path: `/v1/shares/${slugs[i++ % slugs.length]}`, method: 'GET' });
        await r.body.dump({ limit: 1e9 });
        reads++;
        statuses[r.statusCode] = (statuses[r.statusCode] ?? 0) + 1;
      }
    }),
  );
  console.log(JSON.stringify({ statuses, perSec: reads / (Number(ms) / 1000) }));
  await pool.close();
} else {
  const { values: a } = parseArgs({
    options: {
      shares: { type: 'string', default: '80' },
      bytes: { type: 'string', default: '1000000' },
      connections: { type: 'string', default: '32' },
      ms: { type: 'string', default: '10000' },
    },
  });
  const [SHARES, BYTES, CONNECTIONS, MS] = [a.shares, a.bytes, a.connections, a.ms].map(Number) as [number, number, number, number];
  const teardown: (() => unknown)[] = [];
  // The test helpers' fixture host: only teardown is used outside tap.
  const t = { teardown: (f: () => unknown) => void teardown.push(f) } as unknown as Parameters<typeof startRedis>[0];
  try {
    const redis = await startRedis(t);
    if (!redis) throw new Error('redis-server not found');
    const s3 = spawn(process.execPath, [SELF, '--s3'], { stdio: ['ignore', 'pipe', 'inherit'] });
    teardown.push(() => s3.kill('SIGTERM'));
    const endpoint = await new Promise<string>((r) => s3.stdout!.once('data', (d) => r(String(d).trim())));
    const s3Config = {
      endpoint,
      region: 'us-east-1',
      bucket: 'shares',
      force_path_style: true,
      access_key_id: 'S3RVER',
      secret_access_key: 'S3RVER',
    };
    const gw = await spawnGateway(t, {
      redisUrl: redis.url,
      upstreamUrl: 'http://127.0.0.1:9/v1',
      bootTimeoutMs: 30_000,
      config: { shares: { s3: s3Config, create_per_minute: 100_000, max_snapshot_bytes: BYTES + 1024 } },
    });
    const cpuMs = () => {
      const f = readFileSync(`/proc/${gw.child.pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
      return (Number(f[11]) + Number(f[12])) * 10; // utime + stime, clock ticks of 10 ms
    };
    const admin = async (path: string, body: unknown) =>
      (await (
        await fetch(`${gw.adminUrl}${path}`, {
          method: 'POST',
          headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' },
          body: JSON.stringify(body),
        })
      ).json()) as { key: string };
    const publish = async (key: string, bytes: number) => {
      const r = await fetch(`${gw.url}/v1/shares`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ snapshot: { messages: [{ role: 'user', content: 'x'.repeat(bytes) }] } }),
      });
      const j = (await r.json()) as { slug?: string };
      if (!j.slug) throw new Error(`publish: ${r.status} ${JSON.stringify(j)}`);
      return j.slug;
    };
    const { key } = await admin('/admin/keys', { account: 'flood', env: 'live', name: 'flood' });
    await admin('/admin/accounts/flood/credits', { amount_micros: 1_000_000_000 });
    const { key: victimKey } = await admin('/admin/keys', { account: 'victim', env: 'live', name: 'victim' });
    const slugs: string[] = [];
    let made = 0;
    await Promise.all(
      Array.from({ length: 4 }, async () => {
        while (made++ < SHARES) slugs.push(await publish(key, BYTES));
      }),
    );
    const victim = await publish(victimKey, 2000);
    const pct = (xs: number[], q: number) => xs.sort((x, y) => x - y)[Math.min(xs.length - 1, Math.floor(xs.length * q))]!.toFixed(1);

    for (const flood of [false, true]) {
      let out = '';
      const done = flood
        ? new Promise<void>((r) => {
            const c = spawn(process.execPath, [SELF, '--flood', gw.url, JSON.stringify(slugs), String(CONNECTIONS), String(MS + 600)], {
              stdio: ['ignore', 'pipe', 'inherit'],
            });
            c.stdout!.on('data', (d) => (out += d));
            c.on('exit', () => r());
          })
        : Promise.resolve();
      if (flood) await new Promise((r) => setTimeout(r, 300));
      const c0 = cpuMs();
      const reads: number[] = [];
      const health: number[] = [];
      const end = performance.now() + MS;
      while (performance.now() < end) {
        let s = performance.now();
        const r = await fetch(`${gw.url}/v1/shares/${victim}`);
        await r.arrayBuffer();
        if (r.status !== 200) throw new Error(`victim read: ${r.status}`);
        reads.push(performance.now() - s);
        s = performance.now();
        await (await fetch(`${gw.adminUrl}/healthz`)).arrayBuffer();
        health.push(performance.now() - s);
        await new Promise((r) => setTimeout(r, 20));
      }
      const used = cpuMs() - c0;
      await done;
      const f = out ? (JSON.parse(out) as { statuses: Record<string, number>; perSec: number }) : undefined;
      console.log(
        `${flood ? 'flood   ' : 'baseline'}: victim read p50/p99 ${pct(reads, 0.5)}/${pct(reads, 0.99)} ms (n=${reads.length}), ` +
          `/healthz p50/p99 ${pct(health, 0.5)}/${pct(health, 0.99)} ms` +
          (f
            ? `; flood ${JSON.stringify(f.statuses)} ${f.perSec.toFixed(0)} reads/s, gateway ${(used / (f.perSec * (MS / 1000))).toFixed(1)} ms CPU per flood read`
            : ''),
      );
    }
    gw.child.kill('SIGTERM');
    await gw.exited;
  } finally {
    for (const f of teardown.reverse()) await f();
  }
  process.exit(0);
}
