/**
 * Header hygiene both ways, by allowlist (SPEC §12, §1.2). Toward the upstream only `accept`,
 * `user-agent`, `traceparent`, `tracestate`, `baggage` and `upstream.forward_headers` pass, then
 * Tollgate's own content-type, content-length, x-request-id, `accept-encoding: identity` and the
 * upstream's own credential: a key holder cannot pick the operator's OpenAI organisation or project,
 * spoof its address to the upstream (x-forwarded-for, forwarded) or steer a routing proxy
 * (helicone-target-url). Toward the client only `content-type`, `cache-control` and
 * `upstream.return_headers` pass: upstream rate-limit, organisation and host headers stay inside. A
 * denylist fails open on every header nobody thought of; this fails closed. Both sets are built once,
 * at boot; per request it is one Set lookup per header.
 */
import type { IncomingHttpHeaders, OutgoingHttpHeaders } from 'node:http';

/** Client request headers every upstream may see (W3C trace context and the client's format wishes). */
export const FORWARDED_ALWAYS = ['accept', 'user-agent', 'traceparent', 'tracestate', 'baggage'] as const;
/** Upstream response headers every client may see. */
export const RETURNED_ALWAYS = ['content-type', 'cache-control'] as const;
/** Never forwarded whatever the config says: credentials, cookies and what Tollgate sets itself. */
const NEVER_UPSTREAM = new Set([
  'authorization',
  'proxy-authorization',
  'cookie',
  'x-api-key',
  'api-key',
  'content-length',
  'content-type',
  'x-request-id',
  'host',
  'connection',
  'transfer-encoding',
  'keep-alive',
  'upgrade',
  'te',
  'trailer',
  'expect',
  'accept-encoding',
]);
/** Never returned whatever the config says: Tollgate's own, framing and cookie headers. */
const NEVER_CLIENT = new Set([
  'set-cookie',
  'content-length',
  'content-encoding',
  'transfer-encoding',
  'connection',
  'keep-alive',
  'x-request-id',
  'upgrade',
  'te',
  'trailer',
]);

export interface HeaderPolicy {
  /** Headers for the upstream request. */
  upstreamRequest(
    client: IncomingHttpHeaders,
    requestId: string,
    authorization: string | undefined,
    length: number,
  ): Record<string, string>;
  /** Headers for the client response (content-length is set by the route when the body is unchanged). */
  clientResponse(upstream: IncomingHttpHeaders): OutgoingHttpHeaders;
}

/** The policy for the configured extra names (lower-case; validated at boot). */
export function createHeaderPolicy(
  extra: { forward: readonly string[]; return: readonly string[] } = { forward: [], return: [] },
): HeaderPolicy {
  const forward = [...new Set([...FORWARDED_ALWAYS, ...extra.forward])].filter((h) => !NEVER_UPSTREAM.has(h));
  const back = [...new Set([...RETURNED_ALWAYS, ...extra.return])].filter((h) => !NEVER_CLIENT.has(h));
  return {
    upstreamRequest(client, requestId, authorization, length) {
      const out: Record<string, string> = {};
      for (const name of forward) {
        const v = client[name];
        if (v !== undefined) out[name] = Array.isArray(v) ? v.join(', ') : v;
      }
      out['content-type'] = 'application/json';
      out['content-length'] = String(length);
      out['x-request-id'] = requestId;
      // Without accept-encoding any coding is acceptable (RFC 9110 §12.5.3): say the answer must be plain,
      // so the meter reads it as it comes and the bytes relayed are the upstream's. One still encoded is
      // decoded (content-coding.ts).
      out['accept-encoding'] = 'identity';
      if (authorization) out.authorization = authorization;
      return out;
    },
    clientResponse(upstream) {
      const out: OutgoingHttpHeaders = {};
      for (const name of back) {
        const v = upstream[name];
        if (v !== undefined) out[name] = v;
      }
      return out;
    },
  };
}
