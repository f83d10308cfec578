// Shared pieces of the noisy-neighbour suite (test/isolation/noisy-*.test.ts, SPEC §13): a real gateway in its
// own process on a real Redis (the attack's client work must not share the gateway's event loop), a
// victim account whose requests are measured while an attack runs, a /healthz prober, and a raw-socket
// client that sends a request's bytes exactly as an attacker would (declared length, trickle, stall).
import { request } from 'node:http';
import { connect, type Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Test } from 'tap';
import { ADMIN_TOKEN } from '../helpers/gateway.ts';
import { startRedis, type RedisFixture } from '../helpers/redis.ts';
import { startSimulator } from '../../src/simulator/simulator.ts';
import { spawnGateway, type ChildGateway } from '../e2e/credit-support.ts';

export interface NoisyStack {
  gw: ChildGateway;
  /** The gateway's Redis, for a test that lays out stored data directly. */
  redis: RedisFixture;
  /** Creates a key (full key string) on `account`. */
  key(account: string, env: 'test' | 'live', rateLimits?: Record<string, number>): Promise<string>;
  /** A live key of a funded account: the victim whose requests are measured. */
  victim(account?: string): Promise<string>;
}

/** A real Redis, the simulator and one gateway process with this config; null when Redis is missing. */
export async function startNoisyStack(t: Test, config: Record<string, Record<string, unknown>> = {}): Promise<NoisyStack | null> {
  const redis = await startRedis(t);
  if (!redis) return null;
  const sim = await startSimulator();
  t.teardown(() => sim.close());
  // 30 s to boot: these files run beside the rest of the suite, and a starved box has taken over 10 s.
  const gw = await spawnGateway(t, { redisUrl: redis.url, upstreamUrl: sim.url, config, bootTimeoutMs: 30_000 });
  const admin = async (path: string, body: unknown) => {
    const r = await fetch(`${gw.adminUrl}${path}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    if (r.status >= 300) throw new Error(`${path}: ${r.status} ${await r.text()}`);
    return r.json() as Promise<Record<string, unknown>>;
  };
  const key: NoisyStack['key'] = async (account, env, rateLimits) =>
    (await admin('/admin/keys', { account, env, name: 'noisy', ...(rateLimits && { rate_limits: rateLimits }) })).key as string;
  return {
    gw,
    redis,
    key,
    async victim(account = 'victim') {
      const k = await key(account, 'live');
      await admin(`/admin/accounts/${account}/credits`, { amount_micros: 1_000_000_000 });
      return k;
    },
  };
}

/** The victim's small chat request: one short message, a few tokens back. */
export function victimBody(): string {
  return JSON.stringify({ model: 'sim-small', messages: [{ role: 'user', content: 'hello' }], max_tokens: 8, sim: { tokens: 4 } });
}

export interface Sample {
  ok: number;
  total: number;
  statuses: Record<number, number>;
  /** Latencies in ms, sorted. */
  ms: number[];
}

function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!;
}

export const p99 = (s: Sample) => percentile(s.ms, 99);
export const p95 = (s: Sample) => percentile(s.ms, 95);

/**
 * SPEC §13's latency outcome, measured against a baseline of the same victim without the attack: added
 * p95 under 250 ms for the victim, and for /healthz added p95 under 100 ms with no answer more than 1 s
 * slower than the baseline's slowest. Percentiles, not the single worst sample: tap runs two files at
 * once and other suites share the 2 cores, and one stall of the box (seen up to 1.1 s, in the baseline
 * too) must not decide the outcome; the freezes this suite exists for were 5–11 s and refusals.
 */
export function assertLatency(
  t: { ok(v: boolean, m: string): void },
  base: { victim: Sample; healthz: Sample },
  victim: Sample,
  healthz: Sample,
): void {
  const ms = (n: number) => `${n.toFixed(1)} ms`;
  t.ok(
    p95(victim) - p95(base.victim) < 250,
    `victim p95 ${ms(p95(victim))} (p99 ${ms(p99(victim))}) against ${ms(p95(base.victim))} (p99 ${ms(p99(base.victim))}) without the attack`,
  );
  t.ok(p95(healthz) - p95(base.healthz) < 100, `/healthz p95 ${ms(p95(healthz))} against ${ms(p95(base.healthz))} without the attack`);
  t.ok(max(healthz) - max(base.healthz) < 1000, `/healthz slowest ${ms(max(healthz))} against ${ms(max(base.healthz))} without the attack`);
}
export const max = (s: Sample) => (s.ms.length ? s.ms[s.ms.length - 1]! : NaN);

/** Runs `probe` back to back (with `gapMs` between) until `stop` resolves or `maxMs` passes; a probe's failure counts. */
async function sample(probe: () => Promise<number>, stop: Promise<unknown>, maxMs: number, gapMs: number): Promise<Sample> {
  const out: Sample = { ok: 0, total: 0, statuses: {}, ms: [] };
  let done = false;
  void stop.then(() => (done = true));
  const deadline = Date.now() + maxMs;
  while (!done && Date.now() < deadline) {
    const t0 = performance.now();
    let status = 0;
    try {
      status = await probe();
    } catch {
      status = 0;
    }
    out.ms.push(performance.now() - t0);
    out.total++;
    out.statuses[status] = (out.statuses[status] ?? 0) + 1;
    if (status === 200) out.ok++;
    if (gapMs > 0) await sleep(gapMs);
  }
  out.ms.sort((a, b) => a - b);
  return out;
}

/** The victim's chat requests, one after another, until `stop` (or maxMs). */
export function victimLoad(gw: ChildGateway, key: string, stop: Promise<unknown>, maxMs = 30_000, gapMs = 20): Promise<Sample> {
  return sample(
    async () => {
      const r = await fetch(`${gw.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: victimBody(),
        signal: AbortSignal.timeout(5000),
      });
      await r.arrayBuffer();
      return r.status;
    },
    stop,
    maxMs,
    gapMs,
  );
}

/** `/healthz` on the admin listener every `gapMs`, until `stop`. */
export function healthzLoad(gw: ChildGateway, stop: Promise<unknown>, maxMs = 30_000, gapMs = 10): Promise<Sample> {
  return sample(
    async () => {
      const r = await fetch(`${gw.adminUrl}/healthz`, { signal: AbortSignal.timeout(5000) });
      await r.arrayBuffer();
      return r.status;
    },
    stop,
    maxMs,
    gapMs,
  );
}

/** A baseline of the victim and /healthz without any attack, `ms` long. */
export async function baseline(gw: ChildGateway, victimKey: string, ms: number): Promise<{ victim: Sample; healthz: Sample }> {
  // Warm first (key cache, connections, first-call compilation): the baseline is the steady state.
  await victimLoad(gw, victimKey, sleep(300), 2000, 0);
  const stop = sleep(ms);
  const [victim, healthz] = await Promise.all([victimLoad(gw, victimKey, stop), healthzLoad(gw, stop)]);
  return { victim, healthz };
}

export function describe(s: Sample): string {
  return `${s.ok}/${s.total} ok ${JSON.stringify(s.statuses)}, p99 ${p99(s).toFixed(1)} ms, max ${max(s).toFixed(1)} ms`;
}

/** POSTs `body` to /v1/chat/completions at full speed on a fresh connection: its status and body (status 0 on a reset). */
export function postChatBody(url: string, key: string, body: Buffer): Promise<{ status: number; text: string }> {
  return new Promise((resolve) => {
    const req = request(
      `${url}/v1/chat/completions`,
      {
        method: 'POST',
        agent: false,
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'content-length': body.length },
      },
      (res) => {
        let text = '';
        res.on('data', (c: Buffer) => (text += c.toString('utf8')));
        res.on('end', () => resolve({ status: res.statusCode!, text }));
        res.on('error', () => resolve({ status: 0, text }));
      },
    );
    req.on('error', () => resolve({ status: 0, text: '' }));
    req.end(body);
  });
}

/** A POST written on a raw socket: the head now, body bytes when the test says; the response when it comes. */
export interface RawPost {
  socket: Socket;
  /** Resolves with the status (0 when the socket closed without one) and the body text. */
  response: Promise<{ status: number; body: string; at: number }>;
  write(bytes: Buffer | string): void;
}

/** Opens a socket and sends the request head of a POST declaring `contentLength` body bytes. */
export function rawPost(url: string, path: string, key: string, contentLength: number): RawPost {
  const u = new URL(url);
  const socket = connect(Number(u.port), u.hostname);
  socket.on('error', () => {});
  socket.write(
    `POST ${path} HTTP/1.1\r\nhost: ${u.host}\r\nauthorization: Bearer ${key}\r\ncontent-type: application/json\r\ncontent-length: ${contentLength}\r\n\r\n`,
  );
  const response = new Promise<{ status: number; body: string; at: number }>((resolve) => {
    let text = '';
    let settled = false;
    const finish = () => {
      if (settled) return;
      const m = /^HTTP\/1\.1 (\d{3})/.exec(text);
      const head = text.indexOf('\r\n\r\n');
      const len = /\r\ncontent-length: (\d+)/i.exec(text);
      // Complete once the declared body is in, or the socket closed.
      if (m && head >= 0 && len && text.length - head - 4 >= Number(len[1])) {
        settled = true;
        resolve({ status: Number(m[1]), body: text.slice(head + 4), at: performance.now() });
      }
    };
    socket.on('data', (b: Buffer) => {
      text += b.toString('utf8');
      finish();
    });
    socket.on('close', () => {
      finish();
      if (settled) return;
      settled = true;
      const m = /^HTTP\/1\.1 (\d{3})/.exec(text);
      resolve({ status: m ? Number(m[1]) : 0, body: text.slice(text.indexOf('\r\n\r\n') + 4), at: performance.now() });
    });
  });
  return {
    socket,
    response,
    write(bytes) {
      if (!socket.destroyed) socket.write(bytes);
    },
  };
}

/** A gauge or counter from the gateway's /metrics (unlabelled series). */
export async function gauge(gw: ChildGateway, name: string): Promise<number> {
  const text = await (await fetch(`${gw.adminUrl}/metrics`)).text();
  return Number(new RegExp(`^${name} (\\S+)`, 'm').exec(text)?.[1] ?? NaN);
}
