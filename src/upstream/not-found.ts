/**
 * An upstream's 404 (issue 27): an OpenAI-compatible server's error about the request (vLLM's unknown
 * model is `{"object": "error", …}`, OpenAI's `{"error": {…}}`) passes through like every other 4xx
 * (SPEC §2a), but a 404 of the server's router (FastAPI's `{"detail": "Not Found"}`, a text page, an
 * empty body) means Tollgate called a route the upstream does not have, usually an upstream URL without
 * its `/v1`: the client gets 502 `upstream_error` naming the route, not a bare 404 that an SDK shows as
 * an unexplained NotFoundError. Only 404s are read here, at most MAX_BODY bytes.
 */
import { GatewayError } from '../http/errors.ts';
import type { UpstreamCall } from './call.ts';

/** The most of a 404 body read; a larger one is not an error object worth relaying as is. */
export const MAX_BODY = 8192;

/** Reads an answered call's (small) body; past `max` bytes it stops reading and returns undefined. */
export async function readSmallBody(call: UpstreamCall, max = MAX_BODY): Promise<Buffer | undefined> {
  const chunks: Buffer[] = [];
  let n = 0;
  call.attach({
    data(chunk) {
      n += chunk.length;
      if (n > max) call.abort(new Error('upstream 404 body over the inspection limit'));
      else chunks.push(chunk);
      return true;
    },
  });
  try {
    await call.done;
  } catch {
    return undefined;
  }
  return n > max ? undefined : Buffer.concat(chunks);
}

/** True when the 404 body is an OpenAI-style error object (about the request, so the client's to see). */
export function isApiError(body: Buffer): boolean {
  try {
    const v = JSON.parse(body.toString('utf8')) as unknown;
    return typeof v === 'object' && v !== null && ('error' in v || (v as { object?: unknown }).object === 'error');
  } catch {
    return false;
  }
}

/** The 502 for a route the upstream does not have: names the route it was asked for, never its address. */
export function routeNotFound(model: string, route: string): GatewayError {
  return new GatewayError(
    'upstream_error',
    `The upstream of model '${model}' has no route POST ${route} (it answered 404 Not Found): the gateway's upstream URL for this model is probably missing its version path (…/v1). Report this to the gateway's operator.`,
  );
}
