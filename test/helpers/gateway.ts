// A whole gateway in a few lines, for e2e tests over real HTTP on loopback.
//
//   const gw = await startGateway(t, { upstreamUrl: sim.url });             // embedded store
//   const gw = await startGateway(t, { redisUrl: redis.url, upstreamUrl });  // real Redis
//   const { key } = await gw.createKey({ account: 'acme', env: 'live' });
//   await gw.grant('acme', 1_000_000);
//   const res = await fetch(`${gw.url}/v1/models`, { headers: gw.auth(key) });
//
// `config` is a partial YAML-shaped document merged over the defaults below (ports 0, short timeouts),
// compiled by the real config compiler. Logs are captured in `gw.logs` (raw JSON lines) so tests can
// assert what was — and was not — logged.
import { randomBytes } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import type { Test } from 'tap';
import { compileConfig } from '../../src/config/schema.ts';
import { createGateway, type Gateway } from '../../src/gateway.ts';
import { ERROR_CODES, type ErrorCode } from '../../src/http/errors.ts';
import { openStore } from '../../src/main.ts';
import { createLogger } from '../../src/obs/logger.ts';
import { createMetrics } from '../../src/obs/metrics.ts';
import { createMemoryStore } from '../../src/store/memory-store.ts';
import type { Store } from '../../src/store/types.ts';

// Random-looking: config refuses predictable admin tokens (src/admin/token.ts adminTokenWeakness).
export const ADMIN_TOKEN = 'X3I8tSxa72IlJ3Qdrh/SttlULQmRGyBK';

interface Teardown {
  teardown(fn: () => unknown): void;
}

export interface StartGatewayOptions {
  /** Share an existing store (two gateways on one embedded store); otherwise one is made. */
  store?: Store;
  redisUrl?: string;
  /** Base URL of the OpenAI-compatible upstream, e.g. the simulator's `http://127.0.0.1:P/v1`. */
  upstreamUrl?: string;
  /** YAML-shaped overrides, deep-merged over the defaults. */
  config?: Record<string, unknown>;
  env?: NodeJS.ProcessEnv;
  now?: () => number;
}

export interface TestGateway {
  url: string;
  adminUrl: string;
  /** Set when the config has server.metrics_port. */
  metricsUrl: string | undefined;
  gateway: Gateway;
  store: Store;
  logs: string[];
  auth(key: string): Record<string, string>;
  admin(path: string, init?: { method?: string; body?: unknown }): Promise<{ status: number; body: any; headers: Headers }>;
  createKey(k: {
    account: string;
    env: 'live' | 'test';
    name?: string;
    scopes?: string[];
    models?: string[];
    rate_limits?: unknown;
    expires_at?: string | null;
    budget?: unknown;
  }): Promise<{ key: string; id: string; [k: string]: unknown }>;
  grant(account: string, amountMicros: number, idempotencyKey?: string): Promise<any>;
  close(): Promise<void>;
}

function merge(a: Record<string, unknown>, b: Record<string, unknown>): Record<string, unknown> {
  const out = { ...a };
  for (const [k, v] of Object.entries(b)) {
    const prev = out[k];
    out[k] =
      v && typeof v === 'object' && !Array.isArray(v) && prev && typeof prev === 'object' && !Array.isArray(prev)
        ? merge(prev as Record<string, unknown>, v as Record<string, unknown>)
        : v;
  }
  return out;
}

/** Every steering header of the simulator (src/simulator/steer.ts), in both spellings the tests use. */
export const SIM_HEADERS = [
  'tokens',
  'delay-ms',
  'headers-delay-ms',
  'usage',
  'status',
  'refuse',
  'cut-after',
  'ignore-max-tokens',
  'request-id',
  'cached-tokens',
  'encoding',
  'corrupt-after',
].map((n) => `x-sim-${n}`);

/** The default test document: loopback, free ports, one priced model on the given upstream. */
export function testConfigDoc(upstreamUrl = 'http://127.0.0.1:9/v1'): Record<string, unknown> {
  return {
    // A spool of its own per gateway (created only if a settle is spooled at close), never the repository's ./data/spool.
    server: {
      host: '127.0.0.1',
      port: 0,
      admin_host: '127.0.0.1',
      admin_port: 0,
      drain_seconds: 5,
      spool_dir: join(tmpdir(), `tollgate-spool-${randomBytes(6).toString('hex')}`),
    },
    // Long enough for a saturated CI box; outage tests ask for a short timeout themselves.
    store: { command_timeout_ms: 2000 },
    // The simulator's steering headers are forwarded (upstream.forward_headers): tests steer it through
    // the gateway with them as well as with the body's sim field. x-sim-request-id is its recorder's key.
    upstream: {
      connect_timeout_ms: 1000,
      headers_timeout_ms: 5000,
      idle_timeout_ms: 5000,
      total_timeout_ms: 30000,
      forward_headers: SIM_HEADERS,
    },
    credit: { hold_margin_seconds: 5, reaper_interval_ms: 200 },
    // Share tests read unknown, revoked and malformed slugs by the thousand from one address: the
    // failed-read limiter is tested on its own (test/e2e/hostile-shares.test.ts) and kept out of the way here.
    shares: { failed_reads_per_minute: 1_000_000 },
    models: [
      {
        name: 'sim-small',
        upstream_model: 'sim/small-1',
        max_output_tokens: 256,
        price: { input: 1.5, output: 2.25 },
        upstreams: [{ url: upstreamUrl, api_key: 'upstream-secret' }],
      },
      {
        name: 'sim-free',
        upstream_model: 'sim/free',
        max_output_tokens: 64,
        price: { input: 0, output: 0 },
        upstreams: [{ url: upstreamUrl }],
      },
    ],
  };
}

export async function startGateway(t: Teardown, o: StartGatewayOptions = {}): Promise<TestGateway> {
  const env = { TOLLGATE_ADMIN_TOKEN: ADMIN_TOKEN, ...o.env };
  const doc = merge(testConfigDoc(o.upstreamUrl), o.config ?? {});
  const config = compileConfig(doc, env);
  const logs: string[] = [];
  const sink = new Writable({
    write(chunk, _enc, cb) {
      logs.push(...String(chunk).split('\n').filter(Boolean));
      cb();
    },
  });
  const logger = createLogger(process.env.TEST_LOG_LEVEL ?? 'info', sink);
  const ownStore = !o.store;
  // Redis as production opens it (main.ts openStore): the config decides the command timeout and marker TTL.
  const store =
    o.store ??
    (o.redisUrl
      ? await openStore({ ...config, store: { ...config.store, redisUrl: o.redisUrl } }, env, logger)
      : config.store.clusterNodes.length > 0
        ? await openStore(config, env, logger)
        : createMemoryStore(o.now));
  const gateway = createGateway({ config, store, logger, metrics: createMetrics({ defaults: false }), ...(o.now && { now: o.now }) });
  const { publicUrl, adminUrl, metricsUrl } = await gateway.listen();

  const admin: TestGateway['admin'] = async (path, init = {}) => {
    const res = await fetch(`${adminUrl}${path}`, {
      method: init.method ?? (init.body === undefined ? 'GET' : 'POST'),
      headers: { authorization: `Bearer ${ADMIN_TOKEN}`, ...(init.body !== undefined && { 'content-type': 'application/json' }) },
      ...(init.body !== undefined && { body: JSON.stringify(init.body) }),
    });
    const text = await res.text();
    return { status: res.status, body: text ? JSON.parse(text) : null, headers: res.headers };
  };

  let closed = false;
  const close = async () => {
    if (closed) return;
    closed = true;
    await gateway.close(1000);
    if (ownStore) await store.close();
  };
  t.teardown(close);

  return {
    url: publicUrl,
    adminUrl,
    metricsUrl,
    gateway,
    store,
    logs,
    auth: (key) => ({ authorization: `Bearer ${key}` }),
    admin,
    async createKey(k) {
      const r = await admin('/admin/keys', { body: { name: 'test key', ...k } });
      if (r.status !== 201) throw new Error(`createKey: ${r.status} ${JSON.stringify(r.body)}`);
      return r.body;
    },
    async grant(account, amountMicros, idempotencyKey) {
      const r = await admin(`/admin/accounts/${account}/credits`, {
        body: { amount_micros: amountMicros, ...(idempotencyKey && { idempotency_key: idempotencyKey }) },
      });
      if (r.status !== 201 && r.status !== 200) throw new Error(`grant: ${r.status} ${JSON.stringify(r.body)}`);
      return r.body;
    },
    close,
  };
}

/** A request id as the gateway makes them (SPEC §2a): `req_` and 22 base58 characters. */
export const REQ_ID = /^req_[1-9A-HJ-NP-Za-km-z]{22}$/;

/** The error of an OpenAI-envelope body (SPEC §3.2). */
export interface ErrorEnvelope {
  message: string;
  type: string;
  code: string;
  param: string | null;
}

/**
 * Asserts an OpenAI-envelope error (SPEC §3.2): the status, an x-request-id, a body of exactly `error`
 * with code, message, param and type, the code and its type. Returns the raw text and the error.
 */
export async function expectError(
  t: Test,
  res: Response,
  status: number,
  code: ErrorCode,
): Promise<{ text: string; error: ErrorEnvelope }> {
  const text = await res.text();
  t.equal(res.status, status, `status for ${code}: ${text}`);
  t.match(res.headers.get('x-request-id'), REQ_ID, 'x-request-id on the error');
  const body = JSON.parse(text);
  t.same(Object.keys(body), ['error']);
  t.same(Object.keys(body.error).sort(), ['code', 'message', 'param', 'type']);
  t.equal(body.error.code, code);
  t.equal(body.error.type, ERROR_CODES[code].type);
  return { text, error: body.error as ErrorEnvelope };
}
