/**
 * The OTLP/HTTP tracer behind SPEC §15 traces, built by the gateway only when `otel.endpoint` is set.
 * A provider of our own, never registered globally: no `trace.setGlobalTracerProvider`, no context
 * manager, no instrumentation patching http or undici. The route hands contexts over explicitly
 * (obs/tracing.ts), so nothing else in the process starts emitting spans.
 */
import type { Tracer } from '@opentelemetry/api';
import { BatchSpanProcessor, TraceIdRatioBasedSampler, TracerProvider } from '@opentelemetry/sdk-trace';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { resourceFromAttributes } from '@opentelemetry/resources';
import type { OtelConfig } from '../config/otel.ts';
import type { Tracing } from './tracing.ts';
import { createTracing } from './request-trace.ts';

export interface OtlpTracer {
  readonly tracer: Tracer;
  /** Exports what is queued and stops the exporter (gateway close). */
  shutdown(): Promise<void>;
}

/** A tracer exporting JSON over OTLP/HTTP to `c.endpoint`, sampling `c.sampleRatio` of trace ids. */
export function createOtlpTracer(c: OtelConfig, version: string): OtlpTracer {
  // The endpoint and headers come from the config (they win over OTEL_EXPORTER_OTLP_* by the exporter's
  // own precedence); the JSON encoding needs no protobuf library.
  const exporter = new OTLPTraceExporter({ url: c.endpoint, headers: { ...c.headers } });
  const provider = new TracerProvider({
    resource: resourceFromAttributes({ 'service.name': c.serviceName, 'service.version': version }),
    // By trace id alone, not ParentBased: a client's `sampled` flag must not decide how many spans the
    // gateway exports (SPEC §12: every key holder is a potential attacker). The trace still joins the client's.
    sampler: new TraceIdRatioBasedSampler(c.sampleRatio),
    // Batched off the request path: spans queue in memory (2048 at most, then dropped) and leave every 5 s
    // or 512 at a time, the SDK's defaults.
    spanProcessors: [new BatchSpanProcessor({ exporter })],
  });
  return { tracer: provider.getTracer('tollgate', version), shutdown: () => provider.shutdown() };
}

/** The gateway's Tracing over a new OTLP tracer (obs/tracing.ts loadTracing). */
export function createOtlpTracing(c: OtelConfig, version: string): Tracing {
  return createTracing(createOtlpTracer(c, version));
}
