/**
 * Sends a request to the model's upstreams until one answers (SPEC §1.2, §2a): least-outstanding pick,
 * retry on the next upstream for connect errors, timeouts before headers, 429, 502, 503 and 504 — only
 * ever before the first byte reaches the client, which is guaranteed here because nothing is written
 * until this resolves. The answered call is returned with its status; the caller streams it.
 */
import type { IncomingHttpHeaders } from 'node:http';
import { GatewayError } from '../http/errors.ts';
import type { ModelConfig } from '../config/schema.ts';
import type { Metrics } from '../obs/metrics.ts';
import { UpstreamCall, classify, type FailureKind } from './call.ts';
import type { Upstreams } from './pool.ts';

const RETRY_STATUS = new Set([429, 502, 503, 504]);

export interface ForwardRequest {
  /** Path below the upstream's base path, e.g. `/chat/completions`. */
  path: string;
  body: Buffer;
  headers: (authorization: string | undefined) => Record<string, string>;
  headersTimeoutMs: number;
  idleTimeoutMs: number;
  /** Epoch ms after which no further upstream is tried. */
  deadline: number;
  /**
   * False for a stream: its headers come before its first token, so a timeout before them is the
   * upstream's failure. A non-streaming answer's headers come after its whole generation: a timeout before
   * them, once sent, counts toward ejection only if the upstream answered nobody meanwhile (pool.ts).
   */
  stream: boolean;
  /**
   * Called for an attempt that timed out before its headers once its request had been completely sent
   * (call.ts `sent`): the upstream had the whole request, and a non-streaming answer's headers only come
   * after its generation, so it may have generated one (routes/metered.ts bills that). Still retried.
   */
  onSentTimeout?: ((call: UpstreamCall) => void) | undefined;
  /**
   * The request's account (SPEC §13's tenant): its attempts' failures are blamed on it, and an upstream
   * ejected by another account's failures only is still this request's to try (pool.ts).
   */
  account: string;
}

export interface Answered {
  call: UpstreamCall;
  status: number;
  headers: IncomingHttpHeaders;
  /** Nanoseconds from the first dispatch to the answering upstream's headers. */
  waitedNs: bigint;
}

/** Thrown when the client left before any upstream answered. */
export class ClientGoneError extends Error {
  constructor() {
    super('client disconnected');
    this.name = 'ClientGoneError';
  }
}

export async function forward(
  d: { upstreams: Upstreams; metrics: Metrics; now: () => number },
  model: ModelConfig,
  r: ForwardRequest,
  signal: AbortSignal,
  onCall: (call: UpstreamCall | undefined) => void,
): Promise<Answered> {
  const tried = new Set<import('./pool.ts').Upstream>();
  const failures: FailureKind[] = [];
  const t0 = process.hrtime.bigint();
  for (;;) {
    if (signal.aborted) throw new ClientGoneError();
    // The total deadline bounds the whole request, retries included. One clock read per attempt.
    const now = d.now();
    if (now >= r.deadline) throw upstreamFailure(model.name, true);
    const up = d.upstreams.pick(model, tried, now, r.account);
    if (!up) break;
    tried.add(up);
    const call = new UpstreamCall(up, d.upstreams.start(up, now, r.account));
    onCall(call);
    up.outstanding++;
    up.pool.dispatch(
      {
        path: up.basePath + r.path,
        method: 'POST',
        headers: r.headers(up.authorization),
        body: r.body,
        headersTimeout: Math.max(1, Math.min(r.headersTimeoutMs, r.deadline - now)),
        bodyTimeout: r.idleTimeoutMs,
      },
      call,
    );
    // An attempt aborted while queued still occupies the pool's queue until a connection frees (call.ts
    // `unqueued`): counted as outstanding until then, so the least-outstanding pick sees it.
    void call.done.then(
      () => up.outstanding--,
      () => (call.unqueued ? void call.unqueued.then(() => up.outstanding--) : up.outstanding--),
    );
    let start;
    try {
      start = await call.started;
    } catch (err) {
      if (signal.aborted) throw new ClientGoneError();
      const c = classify(err);
      const sentTimeout = c.kind === 'timeout' && call.sent;
      if (sentTimeout) r.onSentTimeout?.(call);
      d.metrics.upstreamErrors.inc({ upstream: up.label, reason: c.reason });
      // A non-streaming request may just be generating (its headers come after the answer): counted only
      // if the upstream answered nobody while it waited, and blamed on its account. A stream's, one never
      // sent, and no connection or a reset before any answer, always count, for everyone.
      if (sentTimeout && !r.stream) d.upstreams.generationTimedOut(up, d.now(), call.attempt);
      else d.upstreams.failedForEveryone(up, d.now(), call.attempt);
      failures.push(c.kind);
      continue;
    }
    if (signal.aborted) {
      call.abort(new ClientGoneError());
      throw new ClientGoneError();
    }
    if (RETRY_STATUS.has(start.status)) {
      call.abort(new Error(`upstream answered ${start.status}; trying the next one`));
      d.metrics.upstreamErrors.inc({ upstream: up.label, reason: `status_${start.status}` });
      // An answer to this request: it may be this request's doing, blamed on its account (pool.ts).
      d.upstreams.failed(up, d.now(), call.attempt);
      failures.push('error');
      continue;
    }
    if (start.status >= 500) {
      d.metrics.upstreamErrors.inc({ upstream: up.label, reason: `status_${start.status}` });
      d.upstreams.failed(up, d.now(), call.attempt);
    } else {
      if (start.status < 300) up.answers++; // proof of life for generationTimedOut() (pool.ts)
      d.upstreams.succeeded(up, call.attempt);
    }
    onCall(call);
    return { call, status: start.status, headers: start.headers, waitedNs: process.hrtime.bigint() - t0 };
  }
  onCall(undefined);
  if (failures.length === 0 || failures.every((f) => f === 'unavailable')) {
    throw new GatewayError('upstream_unavailable', `No upstream of model '${model.name}' is reachable.`);
  }
  // The same failures give the same status whatever order the upstreams were tried in.
  throw upstreamFailure(model.name, failures.includes('timeout'));
}

/** SPEC §3's error for an upstream that failed: 504 `upstream_timeout` when it timed out, else 502 `upstream_error`. */
export function upstreamFailure(model: string, timedOut: boolean): GatewayError {
  return timedOut
    ? new GatewayError('upstream_timeout', `The upstream of model '${model}' timed out.`)
    : new GatewayError('upstream_error', `The upstream of model '${model}' failed.`);
}
