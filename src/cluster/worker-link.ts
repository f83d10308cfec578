/**
 * A worker's side of the cluster protocol (messages.ts): tells the primary it listens, asks it for the
 * whole cluster's metrics and readiness, and sends its own registry when the primary collects them
 * (collect-metrics.ts).
 */
import type { Registry } from 'prom-client';
import { isOurs, type Reply, type ToPrimary } from './messages.ts';

/** How long a worker waits for the primary's answer (the primary waits at most 3 s for each worker's part). */
const ASK_TIMEOUT_MS = 6_000;

export interface ClusterLink {
  /** Every worker's metrics, summed (histograms merged bucket by bucket). */
  metrics(): Promise<string>;
  /** True when every worker is listening. */
  ready(): Promise<boolean>;
  /** Tells the primary this worker listens. */
  listening(): void;
}

/** The link of this worker process; `registry` is the gateway's own. */
export function linkWorker(registry: Registry): ClusterLink {
  const pending = new Map<number, (r: Reply) => void>();
  let next = 0;
  process.on('message', (m: unknown) => {
    if (!isOurs(m)) return;
    if (m.type === 'tollgate:ping') {
      if (process.connected) process.send!({ type: 'tollgate:pong' } satisfies ToPrimary);
      return;
    }
    if (m.type === 'tollgate:collect') {
      const id = m.id;
      const send = (part: ToPrimary) => process.connected && process.send!(part);
      registry.getMetricsAsJSON().then(
        (metrics) => send({ type: 'tollgate:part', id, metrics }),
        (e: unknown) => send({ type: 'tollgate:part', id, error: (e as Error).message }),
      );
      return;
    }
    if (m.type === 'tollgate:reply') pending.get(m.id)?.(m);
  });
  const ask = (type: 'tollgate:metrics' | 'tollgate:ready'): Promise<Reply> =>
    new Promise((resolve, reject) => {
      const id = next++;
      const timer = setTimeout(() => {
        pending.delete(id);
        reject(new Error('the primary did not answer'));
      }, ASK_TIMEOUT_MS);
      pending.set(id, (r) => {
        clearTimeout(timer);
        pending.delete(id);
        if (r.error) reject(new Error(r.error));
        else resolve(r);
      });
      process.send!({ type, id } satisfies ToPrimary);
    });
  return {
    metrics: async () => (await ask('tollgate:metrics')).metrics ?? '',
    ready: async () => (await ask('tollgate:ready')).ready === true,
    listening: () => void process.send!({ type: 'tollgate:listening' } satisfies ToPrimary),
  };
}
