/**
 * The primary's side of `/metrics` with workers: asks every listening worker for its registry
 * (messages.ts CollectRequest), waits for each at most PART_WAIT_MS, and sums the parts with prom-client's
 * `AggregatorRegistry.aggregate` (counters and histogram buckets added, one series per label set), plus
 * `tollgate_metrics_workers_missing`: how many of the configured workers did not answer this scrape. Not
 * prom-client's `clusterMetrics()`: it waits for every worker and fails the whole scrape after 5 s when one
 * is stalled (a blocked event loop, a stopped process), so every metric was lost exactly while a worker
 * was in trouble, and it waits out those 5 s for a worker that died mid-scrape too.
 *
 * A summed counter must never go down: Prometheus' rate() and increase() read any decrease as a counter
 * reset and count the whole totals again. So each worker's last answered part is kept: a live worker that
 * does not answer (stalled, or its channel closing) is summed with its last part (its counters flat), and
 * a worker that exits has the monotonic series of its last part (counters and histograms, the only
 * monotonic types in the registry) folded into one `retired` part that stays in every later sum, however
 * many workers die (one value per label set). Its gauges (in-flight counts, the event-loop lag…) are
 * dropped: they describe a process that is gone. What a worker counted after its last answered scrape
 * is lost with it (the sum stays flat for it, never dips).
 */
import cluster, { type Worker } from 'node:cluster';
import { AggregatorRegistry } from 'prom-client';
import type { Logger } from '../obs/logger.ts';
import { WORKERS_MISSING } from '../obs/metrics.ts';
import type { CollectRequest, MetricsPart } from './messages.ts';

/**
 * How long the primary waits for a worker's part. Equal to the ping silence that makes /readyz 503
 * (primary.ts READY_PONG_MS): a worker that cannot answer in 3 s is stalled by the gateway's own
 * measure (a tokenizer count, the longest sync work, is capped at 2 s), and a scrape still answers well
 * inside Prometheus' default 10 s scrape_timeout.
 */
export const PART_WAIT_MS = 3_000;

export interface MetricsCollector {
  /** Every worker's metrics, summed, as Prometheus text; within PART_WAIT_MS and a little. */
  collect(workers: Worker[]): Promise<string>;
  /** A part a worker sent (primary.ts routes `tollgate:part` messages here). */
  received(w: Worker, m: MetricsPart): void;
}

/** One metric of prom-client's `getMetricsAsJSON()`, as far as the sum needs it. */
interface MetricJson {
  name: string;
  help: string;
  type: string;
  aggregator: string;
  values: Array<{ value: number; labels: Record<string, string | number>; metricName?: string }>;
}

/** True for a series that only grows while its process lives: summed counters and histograms. */
const monotonic = (m: MetricJson) => (m.type === 'counter' || m.type === 'histogram') && m.aggregator === 'sum';

/**
 * The monotonic series of the exited workers' last parts, added up: one metric per name, one value per
 * series (metricName and labels), so its size is the registry's label sets, not the number of workers.
 */
function createRetired() {
  const metrics = new Map<string, { meta: Omit<MetricJson, 'values'>; values: Map<string, MetricJson['values'][number]> }>();
  const key = (v: MetricJson['values'][number]) =>
    `${v.metricName ?? ''}\0${Object.keys(v.labels)
      .sort()
      .map((l) => `${l}=${v.labels[l]}`)
      .join('\0')}`;
  return {
    add(part: object[]) {
      for (const m of part as MetricJson[]) {
        if (!monotonic(m)) continue;
        let r = metrics.get(m.name);
        if (!r)
          metrics.set(m.name, (r = { meta: { name: m.name, help: m.help, type: m.type, aggregator: m.aggregator }, values: new Map() }));
        for (const v of m.values) {
          const k = key(v);
          const had = r.values.get(k);
          if (had) had.value += v.value;
          else r.values.set(k, { ...v, labels: { ...v.labels } });
        }
      }
    },
    part: (): object[] => [...metrics.values()].map((r) => ({ ...r.meta, values: [...r.values.values()] })),
  };
}

/**
 * `expected()` is how many workers should answer: `server.workers` once they all listened (so a dead or
 * restarting worker counts), the ones listening before that (primary.ts: a worker still booting is not missing).
 * `own()` is a part of the primary's own, added to every sum (its metrics listener's request counts).
 */
export function createCollector(o: {
  expected: () => number;
  logger: Logger;
  waitMs?: number;
  own?: () => Promise<object[]>;
}): MetricsCollector {
  type Outcome = { part: object[] } | { missing: string };
  const waiting = new Map<number, { worker: number; settle(r: Outcome): void }>();
  let next = 0;
  // Each live worker's last answered part, set as it arrives (not after the scrape: a worker exiting
  // meanwhile must find it here, or its part would outlive it beside its retired copy).
  const last = new Map<number, object[]>();
  const retired = createRetired();

  cluster.on('exit', (w) => {
    // A worker gone mid-scrape sends nothing: the scrape need not wait out PART_WAIT_MS for it.
    for (const p of waiting.values()) if (p.worker === w.id) p.settle({ missing: 'exited' });
    const part = last.get(w.id);
    if (part) retired.add(part);
    last.delete(w.id);
  });

  const ask = (w: Worker): Promise<Outcome> =>
    new Promise((resolve) => {
      const id = next++;
      const timer = setTimeout(() => settle({ missing: 'no answer' }), o.waitMs ?? PART_WAIT_MS);
      function settle(r: Outcome) {
        clearTimeout(timer);
        waiting.delete(id);
        resolve(r);
      }
      waiting.set(id, { worker: w.id, settle });
      // With a callback, a channel closed meanwhile is reported here, not as an 'error' event on the worker.
      w.send({ type: 'tollgate:collect', id } satisfies CollectRequest, (e) => e && settle({ missing: e.message }));
    });

  return {
    async collect(workers) {
      // Read with the workers asked: the last booting worker listening mid-scrape must not count as missing.
      const expected = o.expected();
      const [outcomes, own] = await Promise.all([Promise.all(workers.map(ask)), o.own?.()]);
      let answered = 0;
      const missed: Array<{ worker: number; pid: number | undefined; why: string }> = [];
      outcomes.forEach((r, i) => {
        if ('part' in r) answered++;
        else missed.push({ worker: workers[i]!.id, pid: workers[i]!.process.pid, why: r.missing });
      });
      const missing = Math.max(0, expected - answered);
      if (missing > 0) o.logger.warn({ answered, of: expected, missed }, 'metrics scrape without every worker');
      // Every live worker's latest part (this scrape's answer, or the last one before it), the exited ones'.
      const parts = [...last.values(), retired.part(), ...(own ? [own] : [])];
      // Each worker exports the gauge at 0; this part adds the count to their sum (after theirs, so the
      // help and type come from a worker's registry when one answered).
      parts.push([{ ...WORKERS_MISSING, type: 'gauge', aggregator: 'sum', values: [{ value: missing, labels: {} }] }]);
      return AggregatorRegistry.aggregate(parts).metrics();
    },
    received(w, m) {
      const p = waiting.get(m.id);
      if (!p || p.worker !== w.id) return;
      if (m.metrics) last.set(w.id, m.metrics);
      p.settle(m.metrics ? { part: m.metrics } : { missing: m.error ?? 'no metrics' });
    },
  };
}
