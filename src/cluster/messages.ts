/**
 * The IPC messages between the primary and its workers (node:cluster), one shape per concern. Workers
 * all serve the public and admin ports (cluster shares every listening socket), so an admin request may
 * land on any worker; what only the primary can know — the whole cluster's metrics, whether every worker
 * is up — is asked of it over IPC. The metrics port, when set, is the primary's own (primary-metrics.ts).
 */

/** Worker → primary: this worker is listening (sent once, after its listeners are up). */
export interface Listening {
  type: 'tollgate:listening';
}
/** Worker → primary: every worker's metrics, summed (collect-metrics.ts). */
export interface MetricsRequest {
  type: 'tollgate:metrics';
  id: number;
}
/** Worker → primary: is every worker up? */
export interface ReadyRequest {
  type: 'tollgate:ready';
  id: number;
}
/** Primary → worker, every second: answer if your event loop runs (primary.ts's stall watchdog). */
export interface Ping {
  type: 'tollgate:ping';
}
/** Worker → primary: the answer to a ping. */
export interface Pong {
  type: 'tollgate:pong';
}
/** Primary → worker: send your registry's metrics (for a /metrics asked of any worker). */
export interface CollectRequest {
  type: 'tollgate:collect';
  id: number;
}
/** Worker → primary: the answer to a CollectRequest: the registry's `getMetricsAsJSON()`, or why not. */
export interface MetricsPart {
  type: 'tollgate:part';
  id: number;
  metrics?: object[];
  error?: string;
}
/** Primary → worker: the answer to a request, by id. */
export interface Reply {
  type: 'tollgate:reply';
  id: number;
  metrics?: string;
  ready?: boolean;
  error?: string;
}

export type ToPrimary = Listening | MetricsRequest | ReadyRequest | Pong | MetricsPart;

/** True for messages of this protocol (anything else sent on the channel, a library's own, is ignored). */
export function isOurs(m: unknown): m is ToPrimary | Reply | Ping | CollectRequest {
  return (
    typeof m === 'object' &&
    m !== null &&
    typeof (m as { type?: unknown }).type === 'string' &&
    (m as { type: string }).type.startsWith('tollgate:')
  );
}
