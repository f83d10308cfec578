/**
 * Unauthenticated operator endpoints on the admin listener: /metrics, /healthz, /readyz (SPEC §2). With
 * workers (`cluster`), /metrics is every worker's summed and /readyz is ready only when every worker is.
 */
import { sendJson } from '../http/respond.ts';
import type { Route } from '../http/router.ts';
import type { RequestContext } from '../http/context.ts';
import type { Metrics } from '../obs/metrics.ts';
import type { Store } from '../store/types.ts';
import type { ClusterLink } from '../cluster/worker-link.ts';
import type { WarmUp } from './warm-up.ts';

/**
 * GET /metrics: `text()` as Prometheus text (this process's registry, or every worker's summed). Also the
 * metrics listener's only route, in a single process or a worker and in the primary of `server.workers > 1`
 * (cluster/primary-metrics.ts); `metrics` is that process's registry (its content type).
 */
export function metricsRoute(d: { metrics: Pick<Metrics, 'registry'>; text: () => Promise<string> }): Route {
  return {
    method: 'GET',
    pattern: '/metrics',
    doc: {
      summary: 'Prometheus metrics (every worker summed)',
      auth: 'none',
      responses: { 200: { description: 'Prometheus text', contentType: 'text/plain', schema: { type: 'string' } } },
    },
    handler: async (ctx: RequestContext) => {
      const text = await d.text();
      ctx.res.writeHead(200, { 'content-type': d.metrics.registry.contentType, 'content-length': Buffer.byteLength(text) });
      ctx.res.end(text);
    },
  };
}

export function opsRoutes(d: {
  metrics: Metrics;
  store: Store;
  cluster?: ClusterLink | undefined;
  openapi?: () => unknown;
  /** What must be loaded before ready (admin/warm-up.ts); ready while it is `done` or `failed`. */
  warmUp?: Pick<WarmUp, 'state'>;
}): Route[] {
  const cluster = d.cluster;
  return [
    metricsRoute({ metrics: d.metrics, text: cluster ? () => cluster.metrics() : () => d.metrics.registry.metrics() }),
    {
      method: 'GET',
      pattern: '/healthz',
      handler: async (ctx) => sendJson(ctx.res, 200, { status: 'ok' }),
      doc: { summary: 'The process is up', auth: 'none', responses: { 200: 'Up' } },
    },
    {
      method: 'GET',
      pattern: '/openapi.json',
      handler: async (ctx) => sendJson(ctx.res, 200, d.openapi?.() ?? {}),
      doc: {
        summary: 'This document (OpenAPI 3.1)',
        auth: 'none',
        responses: { 200: { description: 'OpenAPI document', schema: { type: 'object' } } },
      },
    },
    {
      method: 'GET',
      pattern: '/readyz',
      doc: {
        summary: 'Ready: store reachable, tokenizer and clients loaded (and every worker listening)',
        auth: 'none',
        responses: { 200: 'Ready', 503: { description: 'Not ready', schema: { type: 'object' } } },
      },
      handler: async (ctx) => {
        const store = await d.store.ping();
        d.metrics.storeUp.set(store ? 1 : 0);
        const workers = d.cluster ? await d.cluster.ready().catch(() => false) : true;
        const warm = d.warmUp?.state ?? 'done';
        const loaded = warm === 'done' || warm === 'failed';
        const ready = store && workers && loaded;
        sendJson(ctx.res, ready ? 200 : 503, {
          status: ready ? 'ready' : 'not_ready',
          store: store ? 'ok' : 'unreachable',
          store_kind: d.store.kind,
          config: 'loaded',
          warm_up: warm,
          ...(d.cluster && { workers: workers ? 'all listening' : 'not all listening' }),
        });
      },
    },
  ];
}
