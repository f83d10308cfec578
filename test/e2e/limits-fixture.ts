// Shared pieces of the rate-limit e2e tests (test/e2e/limits-*.test.ts): chat and models calls that
// return status, headers and body; OpenAI's duration format parsed back to ms; a metric read from the
// admin /metrics text; the request log lines of a gateway; polling with a deadline; the usual stack.
import { setTimeout as sleep } from 'node:timers/promises';
import type { Test } from 'tap';
import { startGateway, testConfigDoc, type TestGateway } from '../helpers/gateway.ts';
import { startRedis, type RedisFixture } from '../helpers/redis.ts';
import { startSimulator, type Simulator } from '../../src/simulator/simulator.ts';

/** A real Redis, the simulator and one gateway with these `rate_limits`; null when Redis is missing. */
export async function startLimitsStack(
  t: Test,
  rateLimits: Record<string, unknown>,
): Promise<{ redis: RedisFixture; sim: Simulator; gw: TestGateway } | null> {
  const redis = await startRedis(t);
  if (!redis) return null;
  const sim = await startSimulator();
  t.teardown(() => sim.close());
  // Token-limit tests ask for up to 900 output tokens: a model cap above that keeps max_tokens unclamped.
  const models = (testConfigDoc(sim.url).models as Record<string, unknown>[]).map((m) => ({ ...m, max_output_tokens: 4096 }));
  // These files test the per-key limits with many keys of one account: the account's limit (rate_limits.test_account,
  // 4 × the per-key one by default) is kept out of their way unless they set it (test/isolation/noisy-account-limits.test.ts).
  const account = { requests_per_minute: 1_000_000, tokens_per_minute: 1_000_000_000 };
  const gw = await startGateway(t, {
    redisUrl: redis.url,
    upstreamUrl: sim.url,
    config: { rate_limits: { test_account: account, ...rateLimits }, models },
  });
  return { redis, sim, gw };
}

export interface Reply {
  status: number;
  headers: Headers;
  body: any;
  /** Wall time of the round trip in ms. */
  ms: number;
}

/** The x-ratelimit-* headers of a response, as a plain object. */
export function rateHeaders(h: Headers): Record<string, string> {
  const out: Record<string, string> = {};
  h.forEach((v, k) => {
    if (k.startsWith('x-ratelimit-')) out[k] = v;
  });
  return out;
}

export const RATE_HEADERS = [
  'x-ratelimit-limit-requests',
  'x-ratelimit-limit-tokens',
  'x-ratelimit-remaining-requests',
  'x-ratelimit-remaining-tokens',
  'x-ratelimit-reset-requests',
  'x-ratelimit-reset-tokens',
];

async function call(url: string, init: RequestInit): Promise<Reply> {
  const t0 = performance.now();
  // 5 s bounds every call: a hung request fails the test instead of the file timeout.
  const res = await fetch(url, { ...init, signal: AbortSignal.timeout(5000) });
  const text = await res.text();
  let body: unknown = text;
  try {
    body = JSON.parse(text);
  } catch {
    /* not JSON */
  }
  return { status: res.status, headers: res.headers, body, ms: performance.now() - t0 };
}

/** GET /v1/models with `key`. */
export function models(gw: Pick<TestGateway, 'url'>, key: string): Promise<Reply> {
  return call(`${gw.url}/v1/models`, { headers: { authorization: `Bearer ${key}` } });
}

/** The default chat body of these tests: one short user message on the free model. */
export function chatBody(extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { model: 'sim-free', messages: [{ role: 'user', content: 'hello' }], max_tokens: 16, ...extra };
}

/** POST /v1/chat/completions with `key`; `body` is sent as JSON exactly as given. */
export function chat(
  gw: Pick<TestGateway, 'url'>,
  key: string,
  body: Record<string, unknown> = chatBody(),
  headers: Record<string, string> = {},
): Promise<Reply> {
  return call(`${gw.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
}

/** OpenAI's duration format (`250ms`, `1.5s`, `6m0s`) back to ms; NaN when it is not that format. */
export function parseDuration(s: string | null | undefined): number {
  if (!s) return NaN;
  const ms = /^(\d+)ms$/.exec(s);
  if (ms) return Number(ms[1]);
  const m = /^(?:(\d+)m)?(\d+(?:\.\d{1,3})?)s$/.exec(s);
  if (!m) return NaN;
  return Number(m[1] ?? 0) * 60_000 + Math.round(Number(m[2]) * 1000);
}

/** The value of one series in the admin /metrics text (0 when absent). Labels must match exactly. */
export async function metric(gw: Pick<TestGateway, 'adminUrl'>, name: string, labels: Record<string, string> = {}): Promise<number> {
  const text = await (await fetch(`${gw.adminUrl}/metrics`)).text();
  const want = Object.entries(labels)
    .map(([k, v]) => `${k}="${v}"`)
    .sort()
    .join(',');
  for (const line of text.split('\n')) {
    const m = /^([a-z_:]+)(?:\{([^}]*)\})? (\S+)$/.exec(line);
    if (!m || m[1] !== name) continue;
    const got = (m[2] ?? '').split(',').filter(Boolean).sort().join(',');
    if (got === want) return Number(m[3]);
  }
  return 0;
}

/** The gateway's per-request log lines (listener public), parsed. */
export function requestLogs(gw: Pick<TestGateway, 'logs'>): Array<Record<string, any>> {
  return gw.logs.map((l) => JSON.parse(l) as Record<string, any>).filter((l) => l.msg === 'request' && l.listener === 'public');
}

/** Polls `probe` until it returns a value other than undefined; fails after `timeoutMs`. */
export async function until<T>(
  what: string,
  probe: () => Promise<T | undefined> | T | undefined,
  timeoutMs = 3000,
  everyMs = 20,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(everyMs);
  }
}
