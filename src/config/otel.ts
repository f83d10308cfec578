/**
 * The `otel` section (SPEC §15 "Traces"): where spans go over OTLP/HTTP and how many requests are traced.
 * Absent, or with an empty endpoint (`endpoint: "${OTEL_ENDPOINT:-}"`), tracing is off: no provider, no
 * exporter, nothing on the hot path. The standard OTEL_* variables never turn it on (docs/tracing.md).
 */
import { ConfigError } from './errors.ts';
import { at, noUnknown, num, object, str } from './fields.ts';

export interface OtelConfig {
  /** The OTLP/HTTP traces URL (`…/v1/traces`; a base URL gets that path appended). */
  readonly endpoint: string;
  /** Fraction of requests traced, by trace id (0..1). */
  readonly sampleRatio: number;
  /** Extra request headers to the collector (a vendor's API key, through `${VAR}`). */
  readonly headers: Readonly<Record<string, string>>;
  /** The resource's `service.name`. */
  readonly serviceName: string;
}

const TRACES_PATH = '/v1/traces';

/** Compiles `otel`; undefined (tracing off) when the section or its endpoint is absent or empty. */
export function otelSection(v: unknown, path: string): OtelConfig | undefined {
  const o = object(v, path, true);
  noUnknown(o, path, ['endpoint', 'sample_ratio', 'headers', 'service_name']);
  const endpoint = str(o.endpoint, at(path, 'endpoint'), '');
  if (!endpoint) return undefined;
  let u: URL;
  try {
    u = new URL(endpoint);
  } catch {
    throw new ConfigError(at(path, 'endpoint'), `is not a URL: ${JSON.stringify(endpoint)}`);
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new ConfigError(at(path, 'endpoint'), 'must be http or https');
  // Like OTEL_EXPORTER_OTLP_ENDPOINT: a collector's base URL gets the traces path; a full traces URL is kept.
  const url = u.pathname.endsWith(TRACES_PATH) ? u.href : u.href.replace(/\/*$/, '') + TRACES_PATH;
  const h = object(o.headers, at(path, 'headers'), true);
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(h)) {
    if (!/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(name)) throw new ConfigError(at(at(path, 'headers'), name), 'is not a header name');
    headers[name.toLowerCase()] = str(value, at(at(path, 'headers'), name));
  }
  return {
    endpoint: url,
    sampleRatio: num(o.sample_ratio, at(path, 'sample_ratio'), { fallback: 1, min: 0, max: 1 }),
    headers,
    serviceName: str(o.service_name, at(path, 'service_name'), 'tollgate') || 'tollgate',
  };
}
