/**
 * `server.metrics_port` with `server.workers > 1`: the primary itself listens on the metrics port and
 * answers `GET /metrics` from its collector (collect-metrics.ts); the workers do not bind it. Opened by
 * the workers, node:cluster handed each scrape connection to some worker, and one handed to a stalled
 * worker (event loop blocked, process stopped) was not answered at all until the worker was killed at
 * 10 s, while the primary, whose event loop runs nothing else, answers within the 3 s part wait.
 *
 * The listener is the workers' own (http/server.ts edge and listen(), the same route, so the same
 * headers, content type, timeouts, request lines and 404/405 answers); its request metrics (requests,
 * durations, in flight) are kept in a registry of the primary's and added to every sum, as the worker
 * that took a scrape counted it before. Imported only when metrics_port is set: the primary loads none
 * of the gateway's modules otherwise.
 */
import type { Server } from 'node:http';
import { drain, listen, portOf, createEdge } from '../http/server.ts';
import { createRouter } from '../http/router.ts';
import { metricsRoute } from '../admin/ops.ts';
import { createMetrics } from '../obs/metrics.ts';
import type { Logger } from '../obs/logger.ts';
import type { ServerConfig } from '../http/server-config.ts';

export interface PrimaryMetricsListener {
  /** Where it listens, e.g. `http://127.0.0.1:9100`. */
  readonly url: string;
  /** The listener's own request metrics, a part for the collector's sum. */
  own(): Promise<object[]>;
  /** Answers /metrics with `collect()` from now on (primary.ts, once its collector exists). */
  serve(collect: () => Promise<string>): void;
  /** Stops accepting (at the primary's stop, as a worker's listeners do at its drain). */
  close(deadlineMs: number): void;
}

/** Binds metrics_host:metrics_port; rejects with the listen error (EADDRINUSE…) before any worker is forked. */
export async function listenPrimaryMetrics(o: { server: ServerConfig; logger: Logger }): Promise<PrimaryMetricsListener> {
  const s = o.server;
  const metrics = createMetrics({ defaults: false });
  const own = new Set([metrics.requests, metrics.duration, metrics.inFlight].map((m) => (m as unknown as { name: string }).name));
  let collect: (() => Promise<string>) | undefined;
  const route = metricsRoute({
    metrics,
    // Not reachable before serve(): runPrimary calls it in the turn the listen resolves in (main.ts).
    text: () => (collect ? collect() : Promise.reject(new Error('the primary is starting'))),
  });
  const handler = createEdge({ router: createRouter([route]), logger: o.logger, metrics, listener: 'metrics' });
  const server: Server = await listen(handler, {
    host: s.metricsHost,
    port: s.metricsPort!,
    headersTimeoutMs: s.headersTimeoutMs,
    requestTimeoutMs: s.requestTimeoutMs,
    writeTimeoutMs: s.writeTimeoutMs,
  });
  const host = s.metricsHost === '0.0.0.0' || s.metricsHost === '::' ? '127.0.0.1' : s.metricsHost;
  return {
    url: `http://${host}:${portOf(server)}`,
    own: async () => ((await metrics.registry.getMetricsAsJSON()) as Array<{ name: string }>).filter((m) => own.has(m.name)),
    serve: (c) => void (collect = c),
    close: (deadlineMs) => void drain(server, deadlineMs),
  };
}
