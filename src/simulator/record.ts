/**
 * The simulator's memory of requests: a bounded list (benchmarks send millions of requests) plus
 * waiters that tests block on until a request reaches some state.
 */
import type { IncomingHttpHeaders } from 'node:http';

/** One request as the simulator saw it. Fields after `body` change while the response runs. */
export interface RecordedRequest {
  /** 1-based, in arrival order; also in the completion id `chatcmpl-sim-<id>`. */
  id: number;
  method: string;
  /** Path and query as sent. */
  path: string;
  headers: IncomingHttpHeaders;
  /** The parsed JSON body exactly as received (a `sim` field is left in); the raw text if not JSON; undefined for no body. */
  body: any;
  /** The client closed the connection before the simulator finished (a steered cut is not an abort). */
  aborted: boolean;
  /** The response was sent completely. */
  finished: boolean;
  /** JSON SSE chunks written (role, tokens, finish, usage; `[DONE]` not counted). */
  chunksSent: number;
  /** Completion tokens written (content chunks when streaming; all tokens once a JSON body is sent). */
  completionTokensSent: number;
  /** Epoch ms with sub-ms precision (performance.timeOrigin + performance.now()). */
  startedAt: number;
  /** When the response finished, was cut, or the client went away; same clock as startedAt. */
  endedAt?: number;
}

type Waiter = (r: RecordedRequest) => boolean;

/** Epoch milliseconds with sub-millisecond precision, comparable with Date.now(). */
export function preciseNow(): number {
  return performance.timeOrigin + performance.now();
}

/** Bounded request log with change notification. */
export class Recorder {
  readonly requests: RecordedRequest[] = [];
  readonly #max: number;
  readonly #waiters = new Set<Waiter>();

  /** `max` records are kept; older ones are dropped in batches (10 % of max) to keep pushes O(1) amortized. */
  constructor(max: number) {
    this.#max = max;
  }

  /** Adds a record (unless max is 0) and wakes waiters either way. */
  push(r: RecordedRequest): void {
    if (this.#max > 0) {
      if (this.requests.length >= this.#max) this.requests.splice(0, Math.max(1, Math.ceil(this.#max / 10)));
      this.requests.push(r);
    }
    this.changed(r);
  }

  /** Tells waiters that `r` changed (cheap when nobody waits: one size check). */
  changed(r: RecordedRequest): void {
    if (this.#waiters.size === 0) return;
    for (const w of this.#waiters) if (w(r)) this.#waiters.delete(w);
  }

  /** Forgets every record (waiters stay). */
  clear(): void {
    this.requests.length = 0;
  }

  /** Resolves with the first record (existing or future) matching `pred`; rejects after `timeoutMs`. */
  waitFor(pred: (r: RecordedRequest) => boolean, timeoutMs = 5000): Promise<RecordedRequest> {
    const hit = this.requests.find(pred);
    if (hit !== undefined) return Promise.resolve(hit);
    return new Promise((resolve, reject) => {
      const waiter: Waiter = (r) => {
        if (!pred(r)) return false;
        clearTimeout(timer);
        resolve(r);
        return true;
      };
      const timer = setTimeout(() => {
        this.#waiters.delete(waiter);
        reject(new Error(`simulator: no matching request within ${timeoutMs} ms (${this.requests.length} recorded)`));
      }, timeoutMs);
      this.#waiters.add(waiter);
    });
  }
}
