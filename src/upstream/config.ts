/**
 * The `upstream` section (timeouts, ejection, header allowlists, SPEC §14) and `models` (each model's
 * upstreams, price and endpoints): what the gateway forwards to, and how.
 */
import { ConfigError } from '../config/errors.ts';
import { at, list, MAX_TIMER_MS, MAX_TIMER_SECONDS, noUnknown, num, object, str } from '../config/fields.ts';
import { parsePrice, type Price } from '../credit/pricing.ts';

export interface UpstreamConfig {
  readonly url: string;
  /** The upstream's own credential; never the client's. */
  readonly apiKey: string | undefined;
}

/** The model endpoints a model may serve (`models[].endpoints`). */
export const ENDPOINTS = ['chat', 'responses', 'completions', 'embeddings'] as const;
export type Endpoint = (typeof ENDPOINTS)[number];
/** A generative model's endpoints when its config names none; an embeddings model says `[embeddings]`. */
export const DEFAULT_ENDPOINTS: readonly Endpoint[] = ['chat', 'responses', 'completions'];

export interface ModelConfig {
  readonly name: string;
  readonly upstreamModel: string;
  readonly maxOutputTokens: number;
  /**
   * Tokens the model takes in all (SPEC §4): the input part of the hold of a stateful request
   * (`/v1/responses` with `previous_response_id` or `conversation`, a stored `prompt` template or an
   * `item_reference`), whose added input the gateway never sees; per item of vLLM's `prompt_embeds` on
   * /v1/completions, once for a chat request with vLLM's `prompt_embeds` content parts.
   */
  readonly contextWindow: number;
  readonly price: Price;
  readonly ownedBy: string;
  readonly created: number;
  readonly upstreams: readonly UpstreamConfig[];
  /** The endpoints this model serves; a request to another → 404 model_not_found. */
  readonly endpoints: readonly Endpoint[];
}

/** The `upstream` section: how every upstream is called. */
export interface UpstreamPolicy {
  readonly connectTimeoutMs: number;
  readonly headersTimeoutMs: number;
  readonly idleTimeoutMs: number;
  readonly totalTimeoutMs: number;
  readonly ejectAfterFailures: number;
  readonly ejectSeconds: number;
  /** Cap of the ejection back-off, which at most doubles per re-ejection (SPEC §14). */
  readonly maxEjectSeconds: number;
  readonly maxConnections: number;
  /** Client request headers forwarded beside the built-in allowlist (lower-case). */
  readonly forwardHeaders: readonly string[];
  /** Upstream response headers returned beside the built-in allowlist (lower-case). */
  readonly returnHeaders: readonly string[];
}

export const UPSTREAM_FIELDS = [
  'connect_timeout_ms',
  'headers_timeout_ms',
  'idle_timeout_ms',
  'total_timeout_ms',
  'eject_after_failures',
  'eject_seconds',
  'max_connections',
  'max_eject_seconds',
  'forward_headers',
  'return_headers',
] as const;

/** Compiles `upstream`. */
export function upstreamSection(v: unknown): UpstreamPolicy {
  const upstream = object(v, 'upstream', true);
  noUnknown(upstream, 'upstream', UPSTREAM_FIELDS);
  return {
    connectTimeoutMs: num(upstream.connect_timeout_ms, 'upstream.connect_timeout_ms', { fallback: 5_000, min: 1, max: MAX_TIMER_MS }),
    headersTimeoutMs: num(upstream.headers_timeout_ms, 'upstream.headers_timeout_ms', { fallback: 120_000, min: 1, max: MAX_TIMER_MS }),
    idleTimeoutMs: num(upstream.idle_timeout_ms, 'upstream.idle_timeout_ms', { fallback: 60_000, min: 1, max: MAX_TIMER_MS }),
    totalTimeoutMs: num(upstream.total_timeout_ms, 'upstream.total_timeout_ms', { fallback: 600_000, min: 1, max: MAX_TIMER_MS }),
    ejectAfterFailures: num(upstream.eject_after_failures, 'upstream.eject_after_failures', { fallback: 5, min: 1, integer: true }),
    ejectSeconds: num(upstream.eject_seconds, 'upstream.eject_seconds', { fallback: 10, min: 0, max: MAX_TIMER_SECONDS }),
    maxEjectSeconds: num(upstream.max_eject_seconds, 'upstream.max_eject_seconds', { fallback: 60, min: 0, max: MAX_TIMER_SECONDS }),
    maxConnections: num(upstream.max_connections, 'upstream.max_connections', { fallback: 0, min: 0, integer: true }),
    forwardHeaders: headerNames(upstream.forward_headers, 'upstream.forward_headers'),
    returnHeaders: headerNames(upstream.return_headers, 'upstream.return_headers'),
  };
}

/** Compiles `models`: at least the list, each model checked, names unique. */
export function modelsSection(v: unknown): readonly ModelConfig[] {
  const models = list(v, 'models').map((m, i) => model(m, at('models', i)));
  const seen = new Set<string>();
  models.forEach((m, i) => {
    if (seen.has(m.name)) throw new ConfigError(at(at('models', i), 'name'), `duplicate model name ${JSON.stringify(m.name)}`);
    seen.add(m.name);
  });
  return models;
}

function headerNames(v: unknown, path: string): string[] {
  return list(v, path, true).map((h, i) => {
    const name = str(h, at(path, i)).toLowerCase();
    if (!/^[!#$%&'*+.^_`|~0-9a-z-]+$/.test(name)) throw new ConfigError(at(path, i), `is not a header name: ${JSON.stringify(h)}`);
    return name;
  });
}

function model(v: unknown, path: string): ModelConfig {
  const o = object(v, path);
  noUnknown(o, path, [
    'name',
    'upstream_model',
    'max_output_tokens',
    'price',
    'upstreams',
    'owned_by',
    'created',
    'endpoints',
    'context_window',
  ]);
  const name = str(o.name, at(path, 'name'));
  if (!name) throw new ConfigError(at(path, 'name'), 'must not be empty');
  const p = object(o.price, at(path, 'price'));
  noUnknown(p, at(path, 'price'), ['input', 'output', 'cached_input']);
  const ups = list(o.upstreams, at(path, 'upstreams'));
  if (ups.length === 0) throw new ConfigError(at(path, 'upstreams'), 'must list at least one upstream');
  return {
    name,
    upstreamModel: str(o.upstream_model, at(path, 'upstream_model'), name),
    maxOutputTokens: num(o.max_output_tokens, at(path, 'max_output_tokens'), { fallback: 4096, min: 1, integer: true }),
    contextWindow: num(o.context_window, at(path, 'context_window'), { fallback: 131_072, min: 1, integer: true }),
    price: parsePrice(p.input, p.output, at(path, 'price'), p.cached_input),
    ownedBy: str(o.owned_by, at(path, 'owned_by'), 'tollgate'),
    created: num(o.created, at(path, 'created'), { fallback: 1_700_000_000, min: 0, integer: true }),
    endpoints: endpoints(o.endpoints, at(path, 'endpoints')),
    upstreams: ups.map((u, i) => {
      const up = at(at(path, 'upstreams'), i);
      const uo = object(u, up);
      noUnknown(uo, up, ['url', 'api_key']);
      const url = str(uo.url, at(up, 'url'));
      let parsed: URL;
      try {
        parsed = new URL(url);
      } catch {
        throw new ConfigError(at(up, 'url'), `is not a URL: ${JSON.stringify(url)}`);
      }
      if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') throw new ConfigError(at(up, 'url'), 'must be http or https');
      const apiKey = str(uo.api_key, at(up, 'api_key'), '');
      return { url: url.replace(/\/+$/, ''), apiKey: apiKey || undefined };
    }),
  };
}

function endpoints(v: unknown, path: string): readonly Endpoint[] {
  if (v === undefined || v === null) return DEFAULT_ENDPOINTS;
  const names = list(v, path);
  if (names.length === 0) throw new ConfigError(path, 'must name at least one endpoint');
  return names.map((n, i) => {
    const name = str(n, at(path, i));
    if (!(ENDPOINTS as readonly string[]).includes(name)) throw new ConfigError(at(path, i), `must be one of ${ENDPOINTS.join(', ')}`);
    return name as Endpoint;
  });
}
