/**
 * One timed request over an undici dispatcher, for the load clients autocannon cannot replace: time
 * to the first body byte (autocannon only sees whole responses) and open-loop pacing. A raw dispatch
 * handler: no stream objects, the body is counted and dropped, so the client costs little per chunk.
 */
import type { Dispatcher } from 'undici';

/** How one request went; times in ms from `t0`. */
export interface Timing {
  status: number;
  /** First body byte (or the end, for an empty body). */
  ttfbMs: number;
  totalMs: number;
  bytes: number;
  error?: Error;
}

/**
 * Sends one request; `done` is called exactly once, `firstByte` (optional) when the first body byte
 * arrives. `t0` is when the request counts as started.
 */
export function timedRequest(
  d: Dispatcher,
  opts: Dispatcher.DispatchOptions,
  t0: number,
  done: (t: Timing) => void,
  firstByte?: (ms: number, status: number) => void,
): void {
  let status = 0;
  let ttfb = -1;
  let bytes = 0;
  const handler: Dispatcher.DispatchHandler = {
    onRequestStart() {},
    onResponseStart(_c, statusCode) {
      status = statusCode;
    },
    onResponseData(_c, chunk) {
      if (ttfb < 0) {
        ttfb = performance.now() - t0;
        firstByte?.(ttfb, status);
      }
      bytes += chunk.length;
    },
    onResponseEnd() {
      const total = performance.now() - t0;
      done({ status, ttfbMs: ttfb < 0 ? total : ttfb, totalMs: total, bytes });
    },
    onResponseError(_c, err) {
      const total = performance.now() - t0;
      done({ status, ttfbMs: ttfb < 0 ? total : ttfb, totalMs: total, bytes, error: err });
    },
  };
  d.dispatch(opts, handler);
}

/** Dispatch options for a POST of spec-like inputs. */
export function postOptions(url: URL, headers: Record<string, string>, body: string): Dispatcher.DispatchOptions {
  const buf = Buffer.from(body); // encoded once, not per request
  return {
    origin: url.origin,
    path: url.pathname + url.search,
    method: 'POST',
    headers: { ...headers, 'content-length': String(buf.length) },
    body: buf,
  };
}
