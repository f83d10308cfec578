/**
 * SPEC §15 traces of a metered request: one SERVER span per request, parented on the client's
 * `traceparent`, with the OpenTelemetry GenAI attributes and Tollgate's own (account, key id, cost; never
 * key material), and three children: the credit hold, the upstream call (whose context goes upstream as
 * `traceparent`, so vLLM's own spans join) and the settle (open until the settle lands in the store).
 *
 * This file is what the route sees: types and one helper, no OpenTelemetry import. Off (no
 * `otel.endpoint`) the gateway has no Tracing: the route's hooks are `trace?.x(…)` on an undefined
 * `trace`, which evaluates no argument and allocates nothing, and the SDK is never loaded (it costs
 * ~1 s and ~10 MB of heap at boot: docs/tracing.md). On, the gateway imports obs/otlp.ts at listen().
 * A request whose trace id the sampler leaves out gets no RequestTrace either: the same cost as off,
 * and the client's own traceparent passes upstream unchanged (upstream/headers.ts).
 */
import type { RequestContext } from '../http/context.ts';
import type { Endpoint } from '../config/schema.ts';

export interface Tracing {
  /** The request's trace, or undefined when the sampler leaves this trace id out. */
  start(ctx: RequestContext, endpoint: Endpoint): RequestTrace | undefined;
  /** Exports what is queued and stops the exporter (the gateway's close). */
  shutdown(): Promise<void>;
}

/** A child span the route ends itself (the hold). */
export interface Phase {
  end(err?: unknown): void;
}

/** One sampled request's spans (obs/request-trace.ts); routes/metered.ts calls each through `trace?.`. */
export interface RequestTrace {
  /** The body named its model. */
  model(requested: string, upstreamModel: string): void;
  /** The credit hold of `micros` starts now. */
  hold(micros: number): Phase;
  /** The upstream call starts now (one span across forward's attempts). */
  upstreamStart(): void;
  /** The `traceparent` naming the upstream span. */
  upstreamTraceparent(): string | undefined;
  /** The upstream answered: with what status, from which upstream. */
  upstreamAnswered(status: number, upstream: string): void;
  /** The upstream call is over (the relay ended, or no upstream answered). */
  upstreamEnd(status: number | undefined, end: string | undefined): void;
  /** The settle was issued; its span lasts until the store has it. */
  settle(settling: Promise<unknown>, costMicros: number): void;
  /** The request's final billing (`cachedTokens`: the cached part of the prompt, SPEC §4). */
  billed(promptTokens: number, completionTokens: number, costMicros: number, source: string, cachedTokens?: number): void;
  /** The pipeline threw: the edge answers with this error. */
  fail(err: unknown): void;
  /** The request is over; `status` is what the response said (unless fail() saw an error first). */
  end(status: number): void;
}

/** Puts the upstream span's traceparent on the upstream request's headers when the request is traced. */
export function withTraceparent(t: RequestTrace | undefined, headers: Record<string, string>): Record<string, string> {
  if (t !== undefined) {
    const tp = t.upstreamTraceparent();
    if (tp !== undefined) headers.traceparent = tp;
  }
  return headers;
}
