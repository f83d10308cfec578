/**
 * A worker's side of the cluster protocol (messages.ts): tells the primary it listens, and asks it for
 * the whole cluster's metrics and readiness. Registers the worker's registry with prom-client's cluster
 * aggregation, whose IPC listener exists only once an AggregatorRegistry was constructed (NOTES §5).
 */
import { AggregatorRegistry, type Registry } from 'prom-client';
import { isOurs, type Reply, type ToPrimary } from './messages.ts';

/** How long a worker waits for the primary's answer (prom-client's own timeout is 5 s). */
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
  new AggregatorRegistry();
  AggregatorRegistry.setRegistries([registry]);
  const pending = new Map<number, (r: Reply) => void>();
  let next = 0;
  process.on('message', (m: unknown) => {
    if (!isOurs(m)) return;
    if (m.type === 'tollgate:ping') {
      if (process.connected) process.send!({ type: 'tollgate:pong' } satisfies ToPrimary);
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
