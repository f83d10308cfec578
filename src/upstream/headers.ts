/**
 * Header hygiene (SPEC §1.2). Toward the upstream: the client's credential, cookies and hop-by-hop
 * headers never pass; the upstream's own key and our request id are added; accept-encoding is dropped
 * so the meter always sees plain bytes. Toward the client: hop-by-hop and upstream-identifying headers
 * (`server`, `set-cookie`, auth challenges) are dropped.
 */
import type { IncomingHttpHeaders, OutgoingHttpHeaders } from 'node:http';

const NOT_UPSTREAM = new Set([
  'host', 'connection', 'keep-alive', 'transfer-encoding', 'te', 'trailer', 'upgrade', 'expect', 'proxy-authorization',
  'proxy-connection', 'content-length', 'authorization', 'cookie', 'x-api-key', 'api-key', 'x-request-id', 'accept-encoding',
]);

const NOT_CLIENT = new Set([
  'connection', 'keep-alive', 'transfer-encoding', 'te', 'trailer', 'upgrade', 'proxy-authenticate', 'proxy-connection',
  'server', 'set-cookie', 'www-authenticate', 'x-powered-by', 'via', 'date', 'x-request-id', 'content-length', 'content-encoding',
]);

/** Field names a `Connection` header nominates: hop-by-hop too (RFC 9110 §7.6.1). */
function nominated(connection: string | string[] | undefined): Set<string> | undefined {
  if (connection === undefined) return undefined;
  const names = (Array.isArray(connection) ? connection.join(',') : connection).split(',').map((n) => n.trim().toLowerCase()).filter(Boolean);
  return names.length > 0 ? new Set(names) : undefined;
}

/** Headers for the upstream request. */
export function upstreamRequestHeaders(client: IncomingHttpHeaders, requestId: string, authorization: string | undefined, length: number): Record<string, string> {
  const out: Record<string, string> = {};
  const hop = nominated(client.connection);
  for (const name in client) {
    const v = client[name];
    if (v === undefined || NOT_UPSTREAM.has(name) || hop?.has(name)) continue;
    out[name] = Array.isArray(v) ? v.join(', ') : v;
  }
  out['content-type'] = 'application/json';
  out['content-length'] = String(length);
  out['x-request-id'] = requestId;
  if (authorization) out.authorization = authorization;
  return out;
}

/** Headers for the client response (content-length is set by the route when the body is unchanged). */
export function clientResponseHeaders(upstream: IncomingHttpHeaders): OutgoingHttpHeaders {
  const out: OutgoingHttpHeaders = {};
  const hop = nominated(upstream.connection);
  for (const name in upstream) {
    const v = upstream[name];
    if (v !== undefined && !NOT_CLIENT.has(name) && !hop?.has(name)) out[name] = v;
  }
  return out;
}
