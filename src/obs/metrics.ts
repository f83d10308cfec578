/**
 * Prometheus metrics in the gateway's own registry (never prom-client's global one), prefix
 * `tollgate_` (SPEC §7). Labels are bounded: route, model, status, key env, reason, upstream index —
 * never a key, an account or a slug.
 */
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { LeaseStats } from '../store/types.ts';

/** Gateway overhead is sub-millisecond when healthy (NOTES §5 suggestion). */
const OVERHEAD_BUCKETS = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25];
/** LLM calls run from 100 ms to minutes; prom-client's defaults stop at 10 s. */
const UPSTREAM_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300];

export type Metrics = ReturnType<typeof createMetrics>;

/**
 * With `server.workers`, the workers whose metrics a /metrics answer lacks (stalled past the primary's
 * wait, dead, or being replaced): every worker exports 0 and the primary adds the count to the sum
 * (cluster/collect-metrics.ts). Always 0 without workers.
 */
export const WORKERS_MISSING = {
  name: 'tollgate_metrics_workers_missing',
  help: 'Workers whose metrics this scrape lacks (stalled past 3 s, dead or being replaced): their counters are absent from the sums',
} as const;

/** A bound counter child: `inc` adds to a plain number; the registry gets the sum when it is read. */
export interface HotCounter {
  inc(n?: number): void;
}
/** A bound histogram child: `observe` counts into plain numbers; the registry gets them when it is read. */
export interface HotHistogram {
  observe(value: number): void;
}

/** prom-client's own series of a histogram (lib/histogram.js createBaseValues), as flush() adds to it. */
interface HistogramSeries {
  labels: Record<string, string>;
  bucketValues: Record<number, number>;
  sum: number;
  count: number;
}
/** What flush() reaches of a prom-client histogram: its series by label hash (lib/histogram.js). */
interface HistogramInternals {
  hashMap: Record<string, HistogramSeries>;
  upperBounds: readonly number[];
  labelNames: readonly string[];
}

class CounterCell implements HotCounter {
  pending = 0;
  readonly child: { inc(n: number): void };
  constructor(child: { inc(n: number): void }) {
    this.child = child;
  }
  inc(n = 1): void {
    // prom-client's own checks, at the call as before: a counter never goes down.
    if (!(n >= 0) || n === Infinity) throw new Error(`It is not possible to decrease a counter or add ${n}`);
    this.pending += n;
  }
  flush(): void {
    if (this.pending === 0) return;
    const n = this.pending;
    this.pending = 0;
    this.child.inc(n);
  }
}

class HistogramCell implements HotHistogram {
  readonly metric: HistogramInternals & { zero(labels: Record<string, string>): void };
  readonly labels: Record<string, string>;
  readonly bounds: readonly number[];
  /** Observations per bucket (not cumulative), the last past every bound (counted in +Inf only). */
  readonly counts: Float64Array;
  sum = 0;
  count = 0;
  constructor(metric: HistogramCell['metric'], labels: Record<string, string>) {
    this.metric = metric;
    this.labels = labels;
    this.bounds = metric.upperBounds;
    this.counts = new Float64Array(this.bounds.length + 1);
  }
  observe(value: number): void {
    if (!Number.isFinite(value)) throw new TypeError(`Value is not a valid number: ${value}`);
    const b = this.bounds;
    let i = 0;
    while (i < b.length && value > b[i]!) i++;
    this.counts[i]!++;
    this.sum += value;
    this.count++;
  }
  /** Adds what was observed since the last flush to prom-client's series of these labels. */
  flush(): void {
    if (this.count === 0) return;
    let series = this.series();
    if (series === undefined) {
      this.metric.zero(this.labels);
      series = this.series()!;
    }
    for (let i = 0; i < this.bounds.length; i++) if (this.counts[i] !== 0) series.bucketValues[this.bounds[i]!]! += this.counts[i]!;
    series.sum += this.sum;
    series.count += this.count;
    this.counts.fill(0);
    this.sum = 0;
    this.count = 0;
  }
  private series(): HistogramSeries | undefined {
    const names = this.metric.labelNames;
    // As strings: a series made by a direct observe({ status: 200 }) is the same series (and zero() would replace it).
    for (const s of Object.values(this.metric.hashMap)) if (names.every((n) => String(s.labels[n]) === this.labels[n])) return s;
    return undefined;
  }
}

/**
 * Hot-path children: `bound(m)` returns `(…labelValues) => child`, a child made once per label set and
 * reused. Its `inc` / `observe` only add to plain numbers (prom-client's own children hash and validate
 * the labels, and key a bucket by a float, on every call: a tenth of the gateway's instructions per
 * live request, bench/results/metrics-ab.md). What they hold is added to the metric when the registry is
 * read (the metric's collect hook: every scrape, cluster aggregation and `get()`), so a scrape sees every
 * call made before it. Label values are bounded (routes, models, statuses, envs) and validated once, by
 * prom-client's `labels()`, when the child is made.
 */
export function bound(metric: Histogram<string>): (...values: (string | number)[]) => HotHistogram;
export function bound(metric: Counter<string>): (...values: (string | number)[]) => HotCounter;
export function bound(metric: Counter<string> | Histogram<string>): (...values: (string | number)[]) => HotCounter | HotHistogram {
  const cells: (CounterCell | HistogramCell)[] = [];
  const hooked = metric as unknown as { collect?: (this: unknown) => unknown };
  const previous = hooked.collect;
  hooked.collect = function (this: unknown) {
    for (const c of cells) c.flush();
    return previous?.call(this);
  };
  // Label values to cell, a Map level per label: a lookup joins no strings.
  const root = new Map<unknown, unknown>();
  return (...values) => {
    let node = root;
    const last = values.length - 1;
    for (let i = 0; i < last; i++) {
      let next = node.get(values[i]) as Map<unknown, unknown> | undefined;
      if (next === undefined) node.set(values[i], (next = new Map()));
      node = next;
    }
    let c = node.get(values[last]) as CounterCell | HistogramCell | undefined;
    if (c === undefined) {
      const strings = values.map(String);
      const child = metric.labels(...strings); // validates the label values, once
      if (metric instanceof Histogram) {
        const internals = metric as unknown as HistogramCell['metric'];
        c = new HistogramCell(internals, Object.fromEntries(internals.labelNames.map((n, i) => [n, strings[i]!])));
      } else {
        c = new CounterCell(child as { inc(n: number): void });
      }
      node.set(values[last], c);
      cells.push(c);
    }
    return c;
  };
}

/** A counter that follows a running total kept elsewhere: each scrape adds what the total gained since the last. */
function followingCounter(name: string, help: string, registers: Registry[], total: () => number | undefined): Counter {
  let seen = 0;
  return new Counter({
    name,
    help,
    registers,
    collect() {
      const now = total();
      if (now === undefined || now <= seen) return;
      this.inc(now - seen);
      seen = now;
    },
  });
}

/** Creates the registry and every metric; `defaults` adds process metrics (off in most tests). */
export function createMetrics(opts: { defaults?: boolean } = {}) {
  const registry = new Registry();
  // Credit leases (docs/ledger.md "Leases"): the store counts them in plain numbers, read at each scrape.
  let leaseStats: (() => LeaseStats) | undefined;
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
    workersMissing: new Gauge({ ...WORKERS_MISSING, registers: r }),
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
      help: "Request body bytes being read or held: the keys' (limits.max_inflight_body_bytes) and the admin listener's",
      registers: r,
    }),
    holdsReaped: new Counter({ name: 'tollgate_holds_reaped_total', help: 'Expired credit holds released by the reaper', registers: r }),
    leasesTaken: followingCounter(
      'tollgate_credit_leases_taken_total',
      "Credit leases taken (credit.leases: a hot account's holds drawn in memory)",
      r,
      () => leaseStats?.().taken,
    ),
    leaseDraws: followingCounter(
      'tollgate_credit_lease_draws_total',
      'Holds drawn from a credit lease, with no Redis call',
      r,
      () => leaseStats?.().draws,
    ),
    leasesOpen: new Gauge({
      name: 'tollgate_credit_leases_open',
      help: 'Credit leases open (lending) now',
      registers: r,
      collect() {
        if (leaseStats) this.set(leaseStats().open);
      },
    }),
    /** Where the lease metrics come from (the store's leaseStats, when it has leases on). */
    watchLeases(source: () => LeaseStats) {
      leaseStats = source;
    },
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
    settleResends: new Counter({
      name: 'tollgate_settle_resends_total',
      help: 'Settles sent again after the store reported a possible loss (docs/ledger.md "Failover"): outcome "replayed" (it had survived) or "debited" (it had been lost)',
      labelNames: ['outcome'],
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
