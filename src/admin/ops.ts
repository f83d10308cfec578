/** Unauthenticated operator endpoints on the admin listener: /metrics, /healthz, /readyz (SPEC §2). */
import { sendJson } from '../http/respond.ts';
import type { Route } from '../http/router.ts';
import type { RequestContext } from '../http/context.ts';
import type { Metrics } from '../obs/metrics.ts';
import type { Store } from '../store/types.ts';

export function opsRoutes(d: { metrics: Metrics; store: Store }): Route[] {
  return [
    {
      method: 'GET', pattern: '/metrics', handler: async (ctx: RequestContext) => {
        const text = await d.metrics.registry.metrics();
        ctx.res.writeHead(200, { 'content-type': d.metrics.registry.contentType, 'content-length': Buffer.byteLength(text) });
        ctx.res.end(text);
      },
    },
    { method: 'GET', pattern: '/healthz', handler: async (ctx) => sendJson(ctx.res, 200, { status: 'ok' }) },
    {
      method: 'GET', pattern: '/readyz', handler: async (ctx) => {
        const store = await d.store.ping();
        sendJson(ctx.res, store ? 200 : 503, { status: store ? 'ready' : 'not_ready', store: store ? 'ok' : 'unreachable', store_kind: d.store.kind, config: 'loaded' });
      },
    },
  ];
}
