import type { ServerResponse } from 'node:http';
import { GatewayError, ValidationError } from './errors.ts';

const JSON_TYPE = 'application/json';

/** Headers of a response that shows a whole key (created or rolled): no cache, proxy or browser, keeps it. */
export const SHOWS_KEY: Readonly<Record<string, string>> = { 'cache-control': 'no-store' };

/** Writes a JSON body with content-length. The request id header is set earlier, by the server. */
export function sendJson(res: ServerResponse, status: number, body: unknown, headers?: Record<string, string>): void {
  const text = JSON.stringify(body);
  res.statusCode = status;
  if (headers) for (const name in headers) res.setHeader(name, headers[name]!);
  res.setHeader('content-type', JSON_TYPE);
  res.setHeader('content-length', Buffer.byteLength(text));
  res.end(text);
}

export function sendEmpty(res: ServerResponse, status: number): void {
  res.statusCode = status;
  res.end();
}

/** The error body of SPEC §3.2 (OpenAI's envelope). */
export function errorBody(err: GatewayError): { error: { message: string; type: string; code: string; param: string | null } } {
  return { error: { message: err.message, type: err.type, code: err.code, param: err.param } };
}

/**
 * The single place where a thrown value becomes an HTTP response. Anything that is not one of our
 * errors becomes a 500 whose message is not shown (the caller logs the original).
 */
export function sendError(res: ServerResponse, err: unknown): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  if (err instanceof ValidationError) return sendJson(res, 422, { detail: err.detail });
  const ge = err instanceof GatewayError ? err : new GatewayError('internal_error', 'Internal server error.');
  sendJson(res, ge.status, errorBody(ge), ge.headers);
}
