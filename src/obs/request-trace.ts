/**
 * The spans of one metered request (SPEC §15; what they are: obs/tracing.ts). Loaded only when `otel`
 * is configured (through obs/otlp.ts), so with tracing off neither this file nor the OpenTelemetry
 * packages are ever imported.
 */
import {
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  defaultTextMapGetter,
  trace as traceApi,
  type Context,
  type Span,
  type Tracer,
} from '@opentelemetry/api';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import type { RequestContext } from '../http/context.ts';
import type { Endpoint } from '../config/schema.ts';
import type { Phase, RequestTrace as Trace, Tracing } from './tracing.ts';

/** `gen_ai.operation.name` per endpoint (GenAI semantic conventions; the Responses API is a chat). */
const OPERATION: Readonly<Record<Endpoint, string>> = {
  chat: 'chat',
  responses: 'chat',
  completions: 'text_completion',
  embeddings: 'embeddings',
};

export interface TracingDeps {
  tracer: Tracer;
  /** Flushes and stops the exporter; called by the gateway's close. */
  shutdown?: () => Promise<void>;
}

/** Tracing over `deps.tracer`; the route calls start() once per metered request. */
export function createTracing(deps: TracingDeps): Tracing {
  const propagator = new W3CTraceContextPropagator();
  return {
    start(ctx, endpoint) {
      const parent = propagator.extract(ROOT_CONTEXT, ctx.req.headers, defaultTextMapGetter);
      const op = OPERATION[endpoint];
      const key = ctx.key!;
      const span = deps.tracer.startSpan(
        op,
        {
          kind: SpanKind.SERVER,
          attributes: {
            'gen_ai.operation.name': op,
            'tollgate.request_id': ctx.requestId,
            'tollgate.account': key.account,
            'tollgate.key.id': key.id,
            'tollgate.key.env': key.env,
            'http.request.method': 'POST',
            'http.route': ctx.route,
          },
        },
        parent,
      );
      if (!span.isRecording()) return undefined;
      return new RequestTrace(deps.tracer, span, op, key.env === 'live');
    },
    shutdown: () => deps.shutdown?.() ?? Promise.resolve(),
  };
}

/** One sampled request's spans; every method is called by routes/metered.ts through `trace?.`. */
export class RequestTrace implements Trace {
  readonly #tracer: Tracer;
  readonly #span: Span;
  /** The request span as a parent for its children. */
  readonly #ctx: Context;
  readonly #op: string;
  readonly #live: boolean;
  #upstreamModel = '';
  #upstream: Span | undefined;
  /** Set by fail(): the status the edge is about to answer. */
  #failedStatus: number | undefined;

  constructor(tracer: Tracer, span: Span, op: string, live: boolean) {
    this.#tracer = tracer;
    this.#span = span;
    this.#ctx = traceApi.setSpan(ROOT_CONTEXT, span);
    this.#op = op;
    this.#live = live;
  }

  /** The body named its model: `{operation} {model}` as GenAI spans are named. */
  model(requested: string, upstreamModel: string): void {
    this.#upstreamModel = upstreamModel;
    this.#span.updateName(`${this.#op} ${requested}`);
    // The response model is the upstream model Tollgate asked for (what vLLM answers as `model`); reading
    // it from the body would mean parsing every response.
    this.#span.setAttributes({ 'gen_ai.request.model': requested, 'gen_ai.response.model': upstreamModel });
  }

  /** The credit hold of `micros` starts now. */
  hold(micros: number): Phase {
    const span = this.#tracer.startSpan('tollgate.credit.hold', { attributes: { 'tollgate.hold_micros': micros } }, this.#ctx);
    return { end: (err) => finish(span, err) };
  }

  /** The upstream call starts now (one span across forward's attempts). */
  upstreamStart(): void {
    this.#upstream = this.#tracer.startSpan(
      `${this.#op} ${this.#upstreamModel}`,
      {
        kind: SpanKind.CLIENT,
        attributes: { 'gen_ai.operation.name': this.#op, 'gen_ai.request.model': this.#upstreamModel },
      },
      this.#ctx,
    );
  }

  /** The W3C `traceparent` naming the upstream span (sampled), for the upstream request. */
  upstreamTraceparent(): string | undefined {
    const sc = this.#upstream?.spanContext();
    return sc && `00-${sc.traceId}-${sc.spanId}-01`;
  }

  /** The upstream answered: which one and with what status. */
  upstreamAnswered(status: number, upstream: string): void {
    this.#upstream?.setAttributes({ 'http.response.status_code': status, 'tollgate.upstream': upstream });
  }

  /** The upstream call is over (the relay ended, or no upstream answered). */
  upstreamEnd(status: number | undefined, end: string | undefined): void {
    const span = this.#upstream;
    if (!span) return;
    this.#upstream = undefined;
    if (end) span.setAttribute('tollgate.relay_end', end);
    const failed = status === undefined || status >= 500 || end === 'upstream_failed';
    if (failed) span.setStatus({ code: SpanStatusCode.ERROR, message: end ?? 'no upstream answered' });
    span.end();
  }

  /** The settle was issued; its span lasts until the store has it. */
  settle(settling: Promise<unknown>, costMicros: number): void {
    const span = this.#tracer.startSpan('tollgate.credit.settle', { attributes: { 'tollgate.cost_micros': costMicros } }, this.#ctx);
    settling.then(
      () => span.end(),
      (err: unknown) => finish(span, err),
    );
  }

  /** The request's final billing (routes/metered.ts recordFinalBilling). */
  billed(promptTokens: number, completionTokens: number, costMicros: number, source: string, cachedTokens = 0): void {
    this.#span.setAttributes({
      'gen_ai.usage.input_tokens': promptTokens,
      'gen_ai.usage.output_tokens': completionTokens,
      'tollgate.cost_micros': this.#live ? costMicros : 0,
      'tollgate.usage_source': source,
    });
    // GenAI semantic conventions: the part of input_tokens served from the provider's cache (SPEC §4 "Cached input").
    if (cachedTokens > 0) this.#span.setAttribute('gen_ai.usage.cache_read.input_tokens', cachedTokens);
  }

  /** The pipeline threw: the edge answers with this error. */
  fail(err: unknown): void {
    const e = err as { code?: unknown; status?: unknown; name?: unknown };
    this.#failedStatus = typeof e.status === 'number' ? e.status : 500;
    this.#span.setAttribute('error.type', typeof e.code === 'string' ? e.code : String(e.name ?? 'Error'));
  }

  /** The request is over; `status` is what the response said (unless fail() saw an error first). */
  end(status: number): void {
    const code = this.#failedStatus ?? status;
    this.#span.setAttribute('http.response.status_code', code);
    // HTTP semantic conventions: a SERVER span is an error on 5xx only; 4xx are the client's.
    if (code >= 500) this.#span.setStatus({ code: SpanStatusCode.ERROR });
    this.#span.end();
  }
}

/** Ends a child span, as an error when `err` is set. */
function finish(span: Span, err: unknown): void {
  if (err !== undefined) {
    const e = err as { code?: unknown; message?: unknown };
    span.setAttribute('error.type', typeof e.code === 'string' ? e.code : 'Error');
    span.setStatus(typeof e.message === 'string' ? { code: SpanStatusCode.ERROR, message: e.message } : { code: SpanStatusCode.ERROR });
  }
  span.end();
}
