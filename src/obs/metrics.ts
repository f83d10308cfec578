/**
 * Prometheus metrics in the gateway's own registry (never prom-client's global one), prefix
 * `tollgate_` (SPEC §7). Labels are bounded: route, model, status, key env, reason, upstream index —
 * never a key, an account or a slug.
 */
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

/** Gateway overhead is sub-millisecond when healthy (NOTES §5 suggestion). */
const OVERHEAD_BUCKETS = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25];
/** LLM calls run from 100 ms to minutes; prom-client's defaults stop at 10 s. */
const UPSTREAM_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300];

export type Metrics = ReturnType<typeof createMetrics>;

/**
 * Pre-bound children for the hot path: `bound(m)` returns `(…labelValues) => child`, each child made once
 * by prom-client's `labels()` (which hashes and validates the labels) and reused, so a request's
 * inc/observe is a Map lookup and an add. Label values are bounded (routes, models, statuses, envs).
 */
export function bound<C>(metric: { labels(...values: string[]): C }): (...values: (string | number)[]) => C {
  const children = new Map<string, C>();
  return (...values) => {
    const id = values.length === 1 ? String(values[0]) : values.join('\u0001');
    let c = children.get(id);
    if (c === undefined) {
      c = metric.labels(...values.map(String));
      children.set(id, c);
    }
    return c;
  };
}

/** Creates the registry and every metric; `defaults` adds process metrics (off in most tests). */
export function createMetrics(opts: { defaults?: boolean } = {}) {
  const registry = new Registry();
  if (opts.defaults !== false) collectDefaultMetrics({ register: registry, prefix: 'tollgate_' });
  const r = [registry];
  return {
    registry,
    requests: new Counter({
      name: 'tollgate_requests_total',
      help: 'Requests by route, model, status and key env',
      labelNames: ['route', 'model', 'status', 'env'],
      registers: r,
    }),
    duration: new Histogram({
      name: 'tollgate_request_duration_seconds',
      help: 'Whole request duration',
      labelNames: ['route'],
      buckets: UPSTREAM_BUCKETS,
      registers: r,
    }),
    overhead: new Histogram({
      name: 'tollgate_gateway_overhead_seconds',
      help: 'Time the gateway itself spends on a request, upstream time excluded',
      labelNames: ['route'],
      buckets: OVERHEAD_BUCKETS,
      registers: r,
    }),
    upstreamTtfb: new Histogram({
      name: 'tollgate_upstream_ttfb_seconds',
      help: 'Upstream time to response headers',
      labelNames: ['model'],
      buckets: UPSTREAM_BUCKETS,
      registers: r,
    }),
    tokens: new Counter({
      name: 'tollgate_tokens_total',
      help: 'Tokens by model and kind (prompt|completion)',
      labelNames: ['model', 'kind', 'source'],
      registers: r,
    }),
    creditDebited: new Counter({
      name: 'tollgate_credit_debited_micros_total',
      help: 'Micro-credits debited',
      labelNames: ['model'],
      registers: r,
    }),
    rateLimited: new Counter({
      name: 'tollgate_rate_limited_total',
      help: 'Requests refused by a rate limit',
      labelNames: ['env', 'dimension'],
      registers: r,
    }),
    // Issue 27: the limiter's fallback gauge stays 0 on a gateway that started while Redis was down, so
    // the store alert watches this: set by every hold-reaper pass (each credit.reaper_interval_ms, from
    // boot) and every /readyz. With workers, the lowest worker's value (any worker cut off → 0).
    storeUp: new Gauge({
      name: 'tollgate_store_up',
      help: '1 when the last store operation of the hold reaper or /readyz succeeded, 0 when it failed',
      aggregator: 'min',
      registers: r,
    }),
    limiterFallback: new Gauge({
      name: 'tollgate_rate_limiter_fallback',
      help: '1 while the rate limiter runs on its in-memory insurance (store unreachable)',
      registers: r,
    }),
    limiterLatency: new Histogram({
      name: 'tollgate_rate_limiter_seconds',
      help: 'Rate limiter store latency',
      buckets: OVERHEAD_BUCKETS,
      registers: r,
    }),
    authFailures: new Counter({
      name: 'tollgate_auth_failures_total',
      help: 'Failed authentications by reason',
      labelNames: ['reason'],
      registers: r,
    }),
    cache: new Counter({
      name: 'tollgate_cache_lookups_total',
      help: 'In-process cache lookups',
      labelNames: ['cache', 'outcome'],
      registers: r,
    }),
    upstreamErrors: new Counter({
      name: 'tollgate_upstream_errors_total',
      help: 'Upstream failures by upstream and reason',
      labelNames: ['upstream', 'reason'],
      registers: r,
    }),
    inFlight: new Gauge({ name: 'tollgate_in_flight_requests', help: 'Requests in flight', registers: r }),
    streams: new Gauge({ name: 'tollgate_in_flight_streams', help: 'Streams open to clients', registers: r }),
    upstreamOverruns: new Counter({
      name: 'tollgate_upstream_overruns_total',
      help: "Responses with more completion tokens than the request's capped max_tokens × n (debited in full)",
      labelNames: ['model'],
      registers: r,
    }),
    inflightBodyBytes: new Gauge({
      name: 'tollgate_inflight_body_bytes',
      help: 'Request body bytes being read or held (limits.max_inflight_body_bytes)',
      registers: r,
    }),
    holdsReaped: new Counter({ name: 'tollgate_holds_reaped_total', help: 'Expired credit holds released by the reaper', registers: r }),
    ledgerExported: new Counter({
      name: 'tollgate_ledger_exported_entries_total',
      help: 'Ledger entries acknowledged by S3',
      registers: r,
    }),
    ledgerTrimmed: new Counter({
      name: 'tollgate_ledger_trimmed_entries_total',
      help: 'Ledger entries trimmed from Redis (exported and past ledger.retention_days)',
      registers: r,
    }),
    ledgerExportFailures: new Counter({
      name: 'tollgate_ledger_export_failures_total',
      help: 'Accounts whose export pass failed (S3 or store); their entries stay in Redis',
      registers: r,
    }),
    usageFlushFailures: new Counter({
      name: 'tollgate_usage_flush_failures_total',
      help: 'Usage aggregate flushes the store refused (kept for the next flush)',
      registers: r,
    }),
    shareReads: new Counter({ name: 'tollgate_share_reads_total', help: 'Share reads by outcome', labelNames: ['status'], registers: r }),
    shareObjects: new Counter({
      name: 'tollgate_share_objects_total',
      help: 'Snapshot objects handled in the background or found wrong: migrated, orphan_deleted, missing, corrupt',
      labelNames: ['outcome'],
      registers: r,
    }),
    presign: new Histogram({
      name: 'tollgate_presign_seconds',
      help: 'Time to presign one S3 URL',
      labelNames: ['method'],
      buckets: OVERHEAD_BUCKETS,
      registers: r,
    }),
  };
}
