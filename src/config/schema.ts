/**
 * Compiles the parsed YAML into Tollgate's runtime config: validated once at boot, defaults filled,
 * prices turned into exact integers, the whole tree frozen. A bad value stops the boot, never a request.
 */
import { isIP } from 'node:net';
import { ConfigError } from './errors.ts';
import { at, bool, list, noUnknown, num, object, str, type Obj } from './fields.ts';
import { parsePrice, type Price } from '../credit/pricing.ts';
import { adminTokenWeakness } from '../admin/token.ts';
import { autoWorkers } from './cpus.ts';
import { otelSection, type OtelConfig } from './otel.ts';

export interface UpstreamConfig {
  readonly url: string;
  /** The upstream's own credential; never the client's. */
  readonly apiKey: string | undefined;
}

/** The model endpoints a model may serve (`models[].endpoints`). */
export const ENDPOINTS = ['chat', 'responses', 'completions', 'embeddings'] as const;
export type Endpoint = (typeof ENDPOINTS)[number];
/** A generative model's endpoints when its config names none; an embeddings model says `[embeddings]`. */
export const DEFAULT_ENDPOINTS: readonly Endpoint[] = ['chat', 'responses', 'completions'];

export interface ModelConfig {
  readonly name: string;
  readonly upstreamModel: string;
  readonly maxOutputTokens: number;
  /**
   * Tokens the model takes in all (SPEC §4): the input part of the hold of a stateful request
   * (`/v1/responses` with `previous_response_id` or `conversation`), whose history the gateway never sees.
   */
  readonly contextWindow: number;
  readonly price: Price;
  readonly ownedBy: string;
  readonly created: number;
  readonly upstreams: readonly UpstreamConfig[];
  /** The endpoints this model serves; a request to another → 404 model_not_found. */
  readonly endpoints: readonly Endpoint[];
}

export interface LimitSpec {
  readonly requestsPerMinute: number | undefined;
  readonly tokensPerMinute: number | undefined;
}

export interface S3Config {
  readonly endpoint: string | undefined;
  readonly region: string;
  readonly bucket: string;
  readonly forcePathStyle: boolean;
  readonly accessKeyId: string | undefined;
  readonly secretAccessKey: string | undefined;
}

export interface Config {
  readonly server: {
    readonly host: string;
    readonly port: number;
    readonly adminHost: string;
    readonly adminPort: number;
    readonly headersTimeoutMs: number;
    readonly requestTimeoutMs: number;
    /** A request body not complete this long after it started to be read → 408 request_timeout (SPEC §13). */
    readonly bodyTimeoutMs: number;
    readonly drainSeconds: number;
    /** Processes serving the public port (node:cluster); 1 = no cluster. `auto` compiles to the cores available. */
    readonly workers: number;
    /** A listener of its own for `/metrics` (SPEC §12), on adminHost; undefined → the admin listener serves it. */
    readonly metricsPort: number | undefined;
    /** The metrics listener's address (`metrics_host` / METRICS_HOST; default adminHost): /metrics can be reachable where /admin/ is not. */
    readonly metricsHost: string;
    /** CIDRs whose `x-forwarded-for` / `forwarded` are believed for the client address (SPEC §12). */
    readonly trustedProxies: readonly string[];
    /** Where settles still owed at exit are spooled (SPEC §14, src/credit/spool.ts); relative to the working directory. */
    readonly spoolDir: string;
    /** How often a running gateway applies spool files other processes left (besides at start). */
    readonly spoolScanSeconds: number;
  };
  readonly store: { readonly redisUrl: string | undefined; readonly clusterNodes: readonly string[]; readonly commandTimeoutMs: number };
  readonly adminToken: string | undefined;
  readonly logLevel: string;
  /** `json` (one line per event, for collectors) or `pretty` (colourised, for a terminal). */
  readonly logFormat: 'json' | 'pretty';
  readonly limits: {
    readonly maxBodyBytes: number;
    /** Largest `n` a chat request may ask for (else 422); `n` multiplies the output part of the hold. */
    readonly maxN: number;
    /** Request bodies being read or held across the process; past it → 503 `overloaded`. */
    readonly maxInflightBodyBytes: number;
    /** Requests in flight per key; past it → 429 `concurrency_limit_exceeded`. */
    readonly maxConcurrentPerKey: number;
    /** Keys one account may hold (every key ever made, disabled ones too); past it → 429 `key_limit_exceeded`. */
    readonly maxKeysPerAccount: number;
    /** Requests in flight per account, all its keys together (SPEC §13); past it → 429 `concurrency_limit_exceeded`. */
    readonly maxConcurrentPerAccount: number;
    /** Request body bytes one key holds across the process (SPEC §13); past it → 429 `concurrency_limit_exceeded`. */
    readonly maxInflightBodyBytesPerKey: number;
    /** JSON nesting deeper than this → 422 `json_invalid`, found before parsing (SPEC §13). */
    readonly maxJsonDepth: number;
  };
  readonly auth: {
    readonly cacheTtlMs: number;
    readonly negativeTtlMs: number;
    readonly cacheMax: number;
    readonly failedPerMinute: number;
    /** Failed admin-token attempts per client address a minute; past it → 429. */
    readonly adminFailedPerMinute: number;
  };
  readonly upstream: {
    readonly connectTimeoutMs: number;
    readonly headersTimeoutMs: number;
    readonly idleTimeoutMs: number;
    readonly totalTimeoutMs: number;
    readonly ejectAfterFailures: number;
    readonly ejectSeconds: number;
    /** Cap of the ejection back-off, which at most doubles per re-ejection (SPEC §14). */
    readonly maxEjectSeconds: number;
    readonly maxConnections: number;
    /** Client request headers forwarded beside the built-in allowlist (lower-case). */
    readonly forwardHeaders: readonly string[];
    /** Upstream response headers returned beside the built-in allowlist (lower-case). */
    readonly returnHeaders: readonly string[];
  };
  readonly credit: { readonly holdMarginSeconds: number; readonly reaperIntervalMs: number };
  readonly rateLimits: {
    readonly windowSeconds: number;
    readonly test: LimitSpec;
    readonly live: LimitSpec;
    /** All test keys of one account together (SPEC §1.5, §13); default 4 × `test`. */
    readonly testAccount: LimitSpec;
  };
  readonly shares: {
    readonly urlTtlSeconds: number;
    readonly maxSnapshotBytes: number;
    readonly maxFiles: number;
    readonly cacheTtlMs: number;
    readonly negativeTtlMs: number;
    /** Quotas (SPEC §12): live shares and their snapshot + file bytes per account, creations per key a minute. */
    readonly maxPerAccount: number;
    readonly maxBytesPerAccount: number;
    readonly createPerMinute: number;
    /** File types served inline; every other type gets `content-disposition: attachment`. */
    readonly inlineTypes: readonly string[];
    /** Failed share reads (404/410/422) per client address a minute; past it → 429. */
    readonly failedReadsPerMinute: number;
    readonly s3: S3Config;
    /** Live shares of an account never granted credit (SPEC §13) → 429 share_quota_exceeded. */
    readonly unfundedMaxPerAccount: number;
    /** The orphan sweep and the snapshot migration (docs/shares.md "Storage"): tick, grace, batch. */
    readonly janitorIntervalMs: number;
    readonly orphanGraceSeconds: number;
    readonly migrateBatch: number;
  };
  readonly models: readonly ModelConfig[];
  /** The web console (SPEC §9). */
  readonly console: {
    readonly enabled: boolean;
    /** The console's origin in minted links and the CSRF check; undefined → http://127.0.0.1:<public port>. */
    readonly publicUrl: string | undefined;
    readonly sessionTtlSeconds: number;
    /** Grants (and corrections) above this many credits, in absolute value, ask the operator to confirm (docs/console.md). */
    readonly confirmGrantCredits: number;
  };
  /** SPEC §10: what stays in Redis, and the export of the ledger to S3 (docs/ledger-export.md). */
  readonly ledger: {
    /** Exported entries older than this are trimmed from Redis; 0 = as soon as exported. */
    readonly retentionDays: number;
    readonly export: {
      readonly enabled: boolean;
      readonly intervalSeconds: number;
      /** Entries per object at most (one account's run, one day). */
      readonly batchSize: number;
      /** Where objects go: `ledger.export.s3`, else `shares.s3`. */
      readonly s3: S3Config;
      /** Object key prefix inside the bucket. */
      readonly prefix: string;
    };
  };
  /** SPEC §10 usage aggregates (src/usage/). */
  readonly usage: {
    /** Days an aggregate (account × day) is kept. */
    readonly retentionDays: number;
    /** How often each process flushes what it aggregated (one pipeline per flush). */
    readonly flushIntervalMs: number;
  };
  /** SPEC §15 traces over OTLP/HTTP (config/otel.ts, docs/tracing.md); undefined = off, the default. */
  readonly otel: OtelConfig | undefined;
}

const TOP = [
  'server',
  'store',
  'limits',
  'auth',
  'upstream',
  'credit',
  'rate_limits',
  'shares',
  'models',
  'console',
  'log_level',
  'log_format',
  'ledger',
  'usage',
  'otel',
] as const;

function limitSpec(v: unknown, path: string, fallback: LimitSpec): LimitSpec {
  const o = object(v, path, true);
  noUnknown(o, path, ['requests_per_minute', 'tokens_per_minute']);
  const opt = (k: string, d: number | undefined) => (o[k] === undefined ? d : num(o[k], at(path, k), { min: 1, integer: true }));
  return {
    requestsPerMinute: opt('requests_per_minute', fallback.requestsPerMinute),
    tokensPerMinute: opt('tokens_per_minute', fallback.tokensPerMinute),
  };
}

/** A limit spec scaled (rate_limits.test_account's default: 4 × the per-key test limits); unset stays unset. */
function times(k: number, l: LimitSpec): LimitSpec {
  return {
    requestsPerMinute: l.requestsPerMinute === undefined ? undefined : l.requestsPerMinute * k,
    tokensPerMinute: l.tokensPerMinute === undefined ? undefined : l.tokensPerMinute * k,
  };
}

function model(v: unknown, path: string): ModelConfig {
  const o = object(v, path);
  noUnknown(o, path, [
    'name',
    'upstream_model',
    'max_output_tokens',
    'price',
    'upstreams',
    'owned_by',
    'created',
    'endpoints',
    'context_window',
  ]);
  const name = str(o.name, at(path, 'name'));
  if (!name) throw new ConfigError(at(path, 'name'), 'must not be empty');
  const p = object(o.price, at(path, 'price'));
  noUnknown(p, at(path, 'price'), ['input', 'output', 'cached_input']);
  const ups = list(o.upstreams, at(path, 'upstreams'));
  if (ups.length === 0) throw new ConfigError(at(path, 'upstreams'), 'must list at least one upstream');
  return {
    name,
    upstreamModel: str(o.upstream_model, at(path, 'upstream_model'), name),
    maxOutputTokens: num(o.max_output_tokens, at(path, 'max_output_tokens'), { fallback: 4096, min: 1, integer: true }),
    contextWindow: num(o.context_window, at(path, 'context_window'), { fallback: 131_072, min: 1, integer: true }),
    price: parsePrice(p.input, p.output, at(path, 'price'), p.cached_input),
    ownedBy: str(o.owned_by, at(path, 'owned_by'), 'tollgate'),
    created: num(o.created, at(path, 'created'), { fallback: 1_700_000_000, min: 0, integer: true }),
    endpoints: endpoints(o.endpoints, at(path, 'endpoints')),
    upstreams: ups.map((u, i) => {
      const up = at(at(path, 'upstreams'), i);
      const uo = object(u, up);
      noUnknown(uo, up, ['url', 'api_key']);
      const url = str(uo.url, at(up, 'url'));
      let parsed: URL;
      try {
        parsed = new URL(url);
      } catch {
        throw new ConfigError(at(up, 'url'), `is not a URL: ${JSON.stringify(url)}`);
      }
      if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') throw new ConfigError(at(up, 'url'), 'must be http or https');
      const apiKey = str(uo.api_key, at(up, 'api_key'), '');
      return { url: url.replace(/\/+$/, ''), apiKey: apiKey || undefined };
    }),
  };
}

function endpoints(v: unknown, path: string): readonly Endpoint[] {
  if (v === undefined || v === null) return DEFAULT_ENDPOINTS;
  const names = list(v, path);
  if (names.length === 0) throw new ConfigError(path, 'must name at least one endpoint');
  return names.map((n, i) => {
    const name = str(n, at(path, i));
    if (!(ENDPOINTS as readonly string[]).includes(name)) throw new ConfigError(at(path, i), `must be one of ${ENDPOINTS.join(', ')}`);
    return name as Endpoint;
  });
}

/** Validates and compiles a parsed (and interpolated) config document; `env` supplies the SPEC §6 overrides. */
export function compileConfig(doc: unknown, rawEnv: NodeJS.ProcessEnv): Config {
  // An override set to the empty string counts as unset, for every variable alike.
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(rawEnv)) if (v !== '') env[k] = v;
  const root = object(doc ?? {}, '(root)');
  noUnknown(root, '', TOP);
  const server = object(root.server, 'server', true);
  noUnknown(server, 'server', [
    'host',
    'port',
    'admin_host',
    'admin_port',
    'metrics_port',
    'trusted_proxies',
    'headers_timeout_ms',
    'request_timeout_ms',
    'body_timeout_ms',
    'drain_seconds',
    'workers',
    'spool_dir',
    'spool_scan_seconds',
    'metrics_host',
  ]);
  const store = object(root.store, 'store', true);
  noUnknown(store, 'store', ['redis_url', 'cluster_nodes', 'command_timeout_ms']);
  const limits = object(root.limits, 'limits', true);
  noUnknown(limits, 'limits', [
    'max_body_bytes',
    'max_n',
    'max_inflight_body_bytes',
    'max_concurrent_per_key',
    'max_concurrent_per_account',
    'max_inflight_body_bytes_per_key',
    'max_json_depth',
    'max_keys_per_account',
  ]);
  const auth = object(root.auth, 'auth', true);
  noUnknown(auth, 'auth', ['cache_ttl_ms', 'negative_ttl_ms', 'cache_max', 'failed_per_minute', 'admin_failed_per_minute']);
  const upstream = object(root.upstream, 'upstream', true);
  noUnknown(upstream, 'upstream', [
    'connect_timeout_ms',
    'headers_timeout_ms',
    'idle_timeout_ms',
    'total_timeout_ms',
    'eject_after_failures',
    'eject_seconds',
    'max_connections',
    'max_eject_seconds',
    'forward_headers',
    'return_headers',
  ]);
  const credit = object(root.credit, 'credit', true);
  noUnknown(credit, 'credit', ['hold_margin_seconds', 'reaper_interval_ms']);
  const rl = object(root.rate_limits, 'rate_limits', true);
  noUnknown(rl, 'rate_limits', ['window_seconds', 'test', 'live', 'test_account']);
  const shares = object(root.shares, 'shares', true);
  noUnknown(shares, 'shares', [
    'url_ttl_seconds',
    'max_snapshot_bytes',
    'max_files',
    'cache_ttl_ms',
    'negative_ttl_ms',
    'max_per_account',
    'max_bytes_per_account',
    'create_per_minute',
    'inline_types',
    'failed_reads_per_minute',
    's3',
    'unfunded_max_per_account',
    'janitor_interval_ms',
    'orphan_grace_seconds',
    'migrate_batch',
  ]);
  const s3 = object(shares.s3, 'shares.s3', true);
  noUnknown(s3, 'shares.s3', ['endpoint', 'region', 'bucket', 'force_path_style', 'access_key_id', 'secret_access_key']);

  const consoleDoc = object(root.console, 'console', true);
  noUnknown(consoleDoc, 'console', ['enabled', 'public_url', 'session_ttl_seconds', 'confirm_grant_credits']);
  const ledger = object(root.ledger, 'ledger', true);
  noUnknown(ledger, 'ledger', ['retention_days', 'export']);
  const exp = object(ledger.export, 'ledger.export', true);
  noUnknown(exp, 'ledger.export', ['enabled', 'interval_seconds', 'batch_size', 'prefix', 's3']);
  const usage = object(root.usage, 'usage', true);
  noUnknown(usage, 'usage', ['retention_days', 'flush_interval_ms']);
  // The export's bucket: its own section, else the shares' (parsed the same way, same field paths).
  const exportS3 = exp.s3 === undefined ? s3Section(shares.s3, 'shares.s3', env, 'shares') : s3Section(exp.s3, 'ledger.export.s3', env);

  const models = list(root.models, 'models').map((m, i) => model(m, at('models', i)));
  const seen = new Set<string>();
  models.forEach((m, i) => {
    if (seen.has(m.name)) throw new ConfigError(at(at('models', i), 'name'), `duplicate model name ${JSON.stringify(m.name)}`);
    seen.add(m.name);
  });

  const port = (envName: string, v: unknown, path: string, d: number) =>
    num(env[envName] ?? v, env[envName] !== undefined ? `${envName} (environment)` : path, {
      fallback: d,
      min: 0,
      max: 65535,
      integer: true,
    });
  const clusterNodes =
    env.REDIS_CLUSTER_NODES !== undefined
      ? env.REDIS_CLUSTER_NODES.split(',')
          .map((s) => s.trim())
          .filter(Boolean)
      : list(store.cluster_nodes, 'store.cluster_nodes', true).map((n, i) => str(n, at('store.cluster_nodes', i)));
  const optional = (v: unknown, path: string) => str(v, path, '') || undefined;
  const headerNames = (v: unknown, path: string) =>
    list(v, path, true).map((h, i) => {
      const name = str(h, at(path, i)).toLowerCase();
      if (!/^[!#$%&'*+.^_`|~0-9a-z-]+$/.test(name)) throw new ConfigError(at(path, i), `is not a header name: ${JSON.stringify(h)}`);
      return name;
    });
  const testLimits = limitSpec(rl.test, 'rate_limits.test', { requestsPerMinute: 60, tokensPerMinute: 100_000 });
  const urlTtl = num(shares.url_ttl_seconds, 'shares.url_ttl_seconds', { fallback: 900, min: 2, max: 604_800, integer: true });

  const config: Config = {
    server: {
      host: env.HOST ?? str(server.host, 'server.host', '0.0.0.0'),
      port: port('PORT', server.port, 'server.port', 8080),
      adminHost: env.ADMIN_HOST ?? str(server.admin_host, 'server.admin_host', '127.0.0.1'),
      adminPort: port('ADMIN_PORT', server.admin_port, 'server.admin_port', 9090),
      metricsPort:
        env.METRICS_PORT === undefined && server.metrics_port === undefined
          ? undefined
          : port('METRICS_PORT', server.metrics_port, 'server.metrics_port', 0),
      metricsHost:
        env.METRICS_HOST ??
        str(server.metrics_host, 'server.metrics_host', env.ADMIN_HOST ?? str(server.admin_host, 'server.admin_host', '127.0.0.1')),
      trustedProxies: list(server.trusted_proxies, 'server.trusted_proxies', true).map((c, i) =>
        cidr(str(c, at('server.trusted_proxies', i)), at('server.trusted_proxies', i)),
      ),
      headersTimeoutMs: num(server.headers_timeout_ms, 'server.headers_timeout_ms', { fallback: 10_000, min: 100 }),
      requestTimeoutMs: num(server.request_timeout_ms, 'server.request_timeout_ms', { fallback: 30_000, min: 100 }),
      bodyTimeoutMs: num(server.body_timeout_ms, 'server.body_timeout_ms', { fallback: 10_000, min: 100 }),
      drainSeconds: num(server.drain_seconds, 'server.drain_seconds', { fallback: 30, min: 0 }),
      workers: workerCount(
        env.TOLLGATE_WORKERS ?? server.workers,
        env.TOLLGATE_WORKERS !== undefined ? 'TOLLGATE_WORKERS (environment)' : 'server.workers',
      ),
      spoolDir: spoolDir(server.spool_dir),
      spoolScanSeconds: num(server.spool_scan_seconds, 'server.spool_scan_seconds', { fallback: 60, min: 1 }),
    },
    store: {
      redisUrl: env.REDIS_URL || optional(store.redis_url, 'store.redis_url'),
      clusterNodes,
      commandTimeoutMs: num(store.command_timeout_ms, 'store.command_timeout_ms', { fallback: 500, min: 10 }),
    },
    adminToken: env.TOLLGATE_ADMIN_TOKEN || undefined,
    logFormat: oneOf(
      env.LOG_FORMAT ?? str(root.log_format, 'log_format', 'json'),
      ['json', 'pretty'] as const,
      env.LOG_FORMAT !== undefined ? 'LOG_FORMAT (environment)' : 'log_format',
    ),
    logLevel: logLevel(
      env.LOG_LEVEL ?? str(root.log_level, 'log_level', 'info'),
      env.LOG_LEVEL !== undefined ? 'LOG_LEVEL (environment)' : 'log_level',
    ),
    limits: {
      maxBodyBytes: num(limits.max_body_bytes, 'limits.max_body_bytes', { fallback: 4 * 1024 * 1024, min: 1024, integer: true }),
      maxN: num(limits.max_n, 'limits.max_n', { fallback: 8, min: 1, max: 128, integer: true }),
      maxInflightBodyBytes: num(limits.max_inflight_body_bytes, 'limits.max_inflight_body_bytes', {
        fallback: 64 * 1024 * 1024,
        min: 1024,
        integer: true,
      }),
      maxConcurrentPerKey: num(limits.max_concurrent_per_key, 'limits.max_concurrent_per_key', { fallback: 64, min: 1, integer: true }),
      maxKeysPerAccount: num(limits.max_keys_per_account, 'limits.max_keys_per_account', { fallback: 100, min: 1, integer: true }),
      maxConcurrentPerAccount: num(limits.max_concurrent_per_account, 'limits.max_concurrent_per_account', {
        fallback: 256,
        min: 1,
        integer: true,
      }),
      maxInflightBodyBytesPerKey: num(limits.max_inflight_body_bytes_per_key, 'limits.max_inflight_body_bytes_per_key', {
        fallback: 8 * 1024 * 1024,
        min: 1024,
        integer: true,
      }),
      maxJsonDepth: num(limits.max_json_depth, 'limits.max_json_depth', { fallback: 64, min: 2, max: 10_000, integer: true }),
    },
    auth: {
      cacheTtlMs: num(auth.cache_ttl_ms, 'auth.cache_ttl_ms', { fallback: 10_000, min: 1, max: 10_000 }),
      negativeTtlMs: num(auth.negative_ttl_ms, 'auth.negative_ttl_ms', { fallback: 5_000, min: 1, max: 10_000 }),
      cacheMax: num(auth.cache_max, 'auth.cache_max', { fallback: 100_000, min: 1, integer: true }),
      failedPerMinute: num(auth.failed_per_minute, 'auth.failed_per_minute', { fallback: 30, min: 1, integer: true }),
      adminFailedPerMinute: num(auth.admin_failed_per_minute, 'auth.admin_failed_per_minute', { fallback: 10, min: 1, integer: true }),
    },
    upstream: {
      connectTimeoutMs: num(upstream.connect_timeout_ms, 'upstream.connect_timeout_ms', { fallback: 5_000, min: 1 }),
      headersTimeoutMs: num(upstream.headers_timeout_ms, 'upstream.headers_timeout_ms', { fallback: 120_000, min: 1 }),
      idleTimeoutMs: num(upstream.idle_timeout_ms, 'upstream.idle_timeout_ms', { fallback: 60_000, min: 1 }),
      totalTimeoutMs: num(upstream.total_timeout_ms, 'upstream.total_timeout_ms', { fallback: 600_000, min: 1 }),
      ejectAfterFailures: num(upstream.eject_after_failures, 'upstream.eject_after_failures', { fallback: 5, min: 1, integer: true }),
      ejectSeconds: num(upstream.eject_seconds, 'upstream.eject_seconds', { fallback: 10, min: 0 }),
      maxEjectSeconds: num(upstream.max_eject_seconds, 'upstream.max_eject_seconds', { fallback: 60, min: 0 }),
      maxConnections: num(upstream.max_connections, 'upstream.max_connections', { fallback: 0, min: 0, integer: true }),
      forwardHeaders: headerNames(upstream.forward_headers, 'upstream.forward_headers'),
      returnHeaders: headerNames(upstream.return_headers, 'upstream.return_headers'),
    },
    credit: {
      holdMarginSeconds: num(credit.hold_margin_seconds, 'credit.hold_margin_seconds', { fallback: 60, min: 0 }),
      reaperIntervalMs: num(credit.reaper_interval_ms, 'credit.reaper_interval_ms', { fallback: 5_000, min: 10 }),
    },
    rateLimits: {
      windowSeconds: num(rl.window_seconds, 'rate_limits.window_seconds', { fallback: 60, min: 1, integer: true }),
      test: testLimits,
      live: limitSpec(rl.live, 'rate_limits.live', { requestsPerMinute: undefined, tokensPerMinute: undefined }),
      testAccount: limitSpec(rl.test_account, 'rate_limits.test_account', times(4, testLimits)),
    },
    shares: {
      urlTtlSeconds: urlTtl,
      maxSnapshotBytes: num(shares.max_snapshot_bytes, 'shares.max_snapshot_bytes', { fallback: 1024 * 1024, min: 1024, integer: true }),
      maxFiles: num(shares.max_files, 'shares.max_files', { fallback: 20, min: 0, integer: true }),
      cacheTtlMs: num(shares.cache_ttl_ms, 'shares.cache_ttl_ms', { fallback: 10_000, min: 1, max: 60_000 }),
      negativeTtlMs: num(shares.negative_ttl_ms, 'shares.negative_ttl_ms', { fallback: 2_000, min: 1, max: 60_000 }),
      maxPerAccount: num(shares.max_per_account, 'shares.max_per_account', { fallback: 10_000, min: 1, integer: true }),
      maxBytesPerAccount: num(shares.max_bytes_per_account, 'shares.max_bytes_per_account', {
        fallback: 1024 ** 3,
        min: 1024,
        integer: true,
      }),
      createPerMinute: num(shares.create_per_minute, 'shares.create_per_minute', { fallback: 60, min: 1, integer: true }),
      inlineTypes: list(shares.inline_types ?? DEFAULT_INLINE_TYPES, 'shares.inline_types').map((v, i) =>
        str(v, at('shares.inline_types', i)).toLowerCase(),
      ),
      failedReadsPerMinute: num(shares.failed_reads_per_minute, 'shares.failed_reads_per_minute', { fallback: 120, min: 1, integer: true }),
      s3: {
        endpoint: optional(s3.endpoint, 'shares.s3.endpoint'),
        region: str(s3.region, 'shares.s3.region', env.AWS_REGION || 'us-east-1'),
        bucket: str(s3.bucket, 'shares.s3.bucket', 'shares'),
        forcePathStyle: bool(s3.force_path_style, 'shares.s3.force_path_style', false),
        accessKeyId: optional(s3.access_key_id, 'shares.s3.access_key_id') ?? (env.AWS_ACCESS_KEY_ID || undefined),
        secretAccessKey: optional(s3.secret_access_key, 'shares.s3.secret_access_key') ?? (env.AWS_SECRET_ACCESS_KEY || undefined),
      },
      unfundedMaxPerAccount: num(shares.unfunded_max_per_account, 'shares.unfunded_max_per_account', {
        fallback: 100,
        min: 0,
        integer: true,
      }),
      janitorIntervalMs: num(shares.janitor_interval_ms, 'shares.janitor_interval_ms', {
        fallback: 10_000,
        min: 10,
        max: 3_600_000,
        integer: true,
      }),
      orphanGraceSeconds: num(shares.orphan_grace_seconds, 'shares.orphan_grace_seconds', { fallback: 300, min: 0, integer: true }),
      migrateBatch: num(shares.migrate_batch, 'shares.migrate_batch', { fallback: 100, min: 1, max: 10_000, integer: true }),
    },
    models,
    console: {
      enabled: bool(consoleDoc.enabled, 'console.enabled', true),
      publicUrl: origin(optional(consoleDoc.public_url, 'console.public_url'), 'console.public_url'),
      sessionTtlSeconds: num(consoleDoc.session_ttl_seconds, 'console.session_ttl_seconds', {
        fallback: 43_200,
        min: 60,
        max: 30 * 86_400,
        integer: true,
      }),
      confirmGrantCredits: num(consoleDoc.confirm_grant_credits, 'console.confirm_grant_credits', { fallback: 1000, min: 0, max: 1e9 }),
    },
    ledger: {
      retentionDays: num(ledger.retention_days, 'ledger.retention_days', { fallback: 7, min: 0, max: 36_500 }),
      export: {
        // SPEC §10: on by default wherever there is a bucket to export to.
        enabled: bool(exp.enabled, 'ledger.export.enabled', s3Configured(exportS3)),
        intervalSeconds: num(exp.interval_seconds, 'ledger.export.interval_seconds', { fallback: 60, min: 1, max: 86_400 }),
        batchSize: num(exp.batch_size, 'ledger.export.batch_size', { fallback: 10_000, min: 1, max: 1_000_000, integer: true }),
        prefix: str(exp.prefix, 'ledger.export.prefix', 'ledger/').replace(/\/*$/, '/'),
        s3: exportS3,
      },
    },
    usage: {
      retentionDays: num(usage.retention_days, 'usage.retention_days', { fallback: 400, min: 1, max: 36_500, integer: true }),
      flushIntervalMs: num(usage.flush_interval_ms, 'usage.flush_interval_ms', { fallback: 1_000, min: 10, max: 1_000 }),
    },
    otel: otelSection(root.otel, 'otel'),
  };
  const weakness = config.adminToken === undefined ? undefined : adminTokenWeakness(config.adminToken);
  // Never echo the token: its length and estimate say enough.
  if (weakness !== undefined) throw new ConfigError('TOLLGATE_ADMIN_TOKEN (environment)', weakness);
  // Issue 27: `http://127.0.0.1:6379` was accepted and taken by ioredis for a unix socket path.
  if (config.store.redisUrl !== undefined && !/^(rediss?:\/\/|\/)/i.test(config.store.redisUrl)) {
    throw new ConfigError(
      env.REDIS_URL ? 'REDIS_URL (environment)' : 'store.redis_url',
      `must start with redis:// or rediss:// (TLS), or be a unix socket path starting with /; got a value starting ${JSON.stringify(config.store.redisUrl.split(':')[0] + ':')}`,
    );
  }
  if (config.server.workers > 1 && !config.store.redisUrl && config.store.clusterNodes.length === 0) {
    throw new ConfigError(
      'server.workers',
      `is ${config.server.workers}, but the embedded store lives inside one process: workers > 1 need REDIS_URL (or REDIS_CLUSTER_NODES)`,
    );
  }
  return deepFreeze(config);
}

/** An endpoint or static credentials: the same test as share files (file-urls.ts filesConfigured). */
function s3Configured(s3: S3Config): boolean {
  return s3.endpoint !== undefined || s3.accessKeyId !== undefined;
}

/** An S3 location as `shares.s3` is read (for `ledger.export.s3`); credentials fall back to the AWS_* variables. */
function s3Section(v: unknown, path: string, env: NodeJS.ProcessEnv, defaultBucket?: string): S3Config {
  const s3 = object(v, path, true);
  noUnknown(s3, path, ['endpoint', 'region', 'bucket', 'force_path_style', 'access_key_id', 'secret_access_key']);
  const optional = (x: unknown, p: string) => str(x, p, '') || undefined;
  return {
    endpoint: optional(s3.endpoint, at(path, 'endpoint')),
    region: str(s3.region, at(path, 'region'), env.AWS_REGION || 'us-east-1'),
    bucket: str(s3.bucket, at(path, 'bucket'), defaultBucket),
    forcePathStyle: bool(s3.force_path_style, at(path, 'force_path_style'), false),
    accessKeyId: optional(s3.access_key_id, at(path, 'access_key_id')) ?? (env.AWS_ACCESS_KEY_ID || undefined),
    secretAccessKey: optional(s3.secret_access_key, at(path, 'secret_access_key')) ?? (env.AWS_SECRET_ACCESS_KEY || undefined),
  };
}

/** `server.spool_dir`: a path (default `./data/spool`); an empty string would spool into the working directory. */
function spoolDir(v: unknown): string {
  const dir = str(v, 'server.spool_dir', './data/spool');
  if (dir.trim() === '') throw new ConfigError('server.spool_dir', 'must not be empty');
  return dir;
}

/** `server.workers`: a whole number ≥ 1, or `auto` (the CPUs this process may use: cgroup quota, else cores). */
function workerCount(v: unknown, path: string): number {
  if (v === 'auto') return autoWorkers();
  return num(v, path, { fallback: 1, min: 1, max: 1024, integer: true });
}

/** Share file types a browser may render inline from the S3 origin: raster images only, never HTML or SVG. */
const DEFAULT_INLINE_TYPES = ['image/png', 'image/jpeg', 'image/gif', 'image/webp'];

/**
 * The console's public origin (`https://console.example.com`): http or https, no path, query or
 * fragment, because it is compared with browsers' `Origin` header (SPEC §9) and prefixed to `/console/`.
 */
function origin(v: string | undefined, path: string): string | undefined {
  if (v === undefined) return undefined;
  let u: URL;
  try {
    u = new URL(v);
  } catch {
    throw new ConfigError(path, `is not a URL: ${JSON.stringify(v)}`);
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new ConfigError(path, 'must be http or https');
  if (u.pathname !== '/' || u.search || u.hash || u.username || u.password)
    throw new ConfigError(path, `must be an origin only (scheme, host, port), like https://console.example.com; got ${JSON.stringify(v)}`);
  return u.origin;
}

/** A CIDR (`10.0.0.0/8`, `::1/128`) or a bare address, checked with node:net so the runtime accepts it too. */
function cidr(v: string, path: string): string {
  const [addr, bits, extra] = v.trim().split('/');
  const family = isIP(addr ?? '');
  const prefix = bits === undefined ? (family === 6 ? 128 : 32) : Number(bits);
  if (family === 0 || extra !== undefined || !Number.isInteger(prefix) || prefix < 0 || prefix > (family === 6 ? 128 : 32)) {
    throw new ConfigError(path, `is not an IP address or CIDR: ${JSON.stringify(v)}`);
  }
  return `${addr}/${prefix}`;
}

const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'];

function oneOf<T extends string>(v: string, allowed: readonly T[], path: string): T {
  if (!(allowed as readonly string[]).includes(v))
    throw new ConfigError(path, `must be one of ${allowed.join(', ')}, got ${JSON.stringify(v)}`);
  return v as T;
}

function logLevel(v: string, path: string): string {
  if (!LOG_LEVELS.includes(v)) throw new ConfigError(path, `must be one of ${LOG_LEVELS.join(', ')}, got ${JSON.stringify(v)}`);
  return v;
}

function deepFreeze<T>(o: T): T {
  if (o && typeof o === 'object') {
    for (const v of Object.values(o as Obj)) deepFreeze(v);
    Object.freeze(o);
  }
  return o;
}
