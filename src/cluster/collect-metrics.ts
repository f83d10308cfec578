/**
 * The primary's side of `/metrics` with workers: asks every listening worker for its registry
 * (messages.ts CollectRequest), waits for each at most PART_WAIT_MS, and sums the parts that came with
 * prom-client's `AggregatorRegistry.aggregate` (counters and histogram buckets added, one series per
 * label set), plus `tollgate_metrics_workers_missing`: how many of the configured workers are not in the
 * sum. Not prom-client's `clusterMetrics()`: it waits for every worker and fails the whole scrape after
 * 5 s when one is stalled (a blocked event loop, a stopped process), so every metric was lost exactly
 * while a worker was in trouble, and it waits out those 5 s for a worker that died mid-scrape too.
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
  /** Every answering worker's metrics, summed, as Prometheus text; within PART_WAIT_MS and a little. */
  collect(workers: Worker[]): Promise<string>;
  /** A part a worker sent (primary.ts routes `tollgate:part` messages here). */
  received(w: Worker, m: MetricsPart): void;
}

/**
 * `expected()` is how many workers should answer: `server.workers` once they all listened (so a dead or
 * restarting worker counts), the ones listening before that (primary.ts: a worker still booting is not missing).
 */
export function createCollector(o: { expected: () => number; logger: Logger; waitMs?: number }): MetricsCollector {
  type Outcome = { part: object[] } | { missing: string };
  const waiting = new Map<number, { worker: number; settle(r: Outcome): void }>();
  let next = 0;

  // A worker gone mid-scrape sends nothing: the scrape need not wait out PART_WAIT_MS for it.
  cluster.on('exit', (w) => {
    for (const p of waiting.values()) if (p.worker === w.id) p.settle({ missing: 'exited' });
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
      const outcomes = await Promise.all(workers.map(ask));
      const parts: object[][] = [];
      const missed: Array<{ worker: number; pid: number | undefined; why: string }> = [];
      outcomes.forEach((r, i) => {
        if ('part' in r) parts.push(r.part);
        else missed.push({ worker: workers[i]!.id, pid: workers[i]!.process.pid, why: r.missing });
      });
      const missing = Math.max(0, expected - parts.length);
      if (missing > 0) o.logger.warn({ answered: parts.length, of: expected, missed }, 'metrics scrape without every worker');
      // Each worker exports the gauge at 0; this part adds the count to their sum (after theirs, so the
      // help and type come from a worker's registry when one answered).
      parts.push([{ ...WORKERS_MISSING, type: 'gauge', aggregator: 'sum', values: [{ value: missing, labels: {} }] }]);
      return AggregatorRegistry.aggregate(parts).metrics();
    },
    received(w, m) {
      const p = waiting.get(m.id);
      if (!p || p.worker !== w.id) return;
      p.settle(m.metrics ? { part: m.metrics } : { missing: m.error ?? 'no metrics' });
    },
  };
}
