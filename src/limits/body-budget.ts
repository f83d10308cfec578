/**
 * Request body bytes held across the process (SPEC §12: limits.max_inflight_body_bytes, default
 * 64 MiB → 503 overloaded). Each body is reserved as it is read — its declared content-length up front
 * when there is one — and released once the request no longer needs it (for chat: once the upstream has
 * the payload). The text, the parsed object and the upstream payload that a body becomes are about
 * 3–4× its bytes, so the heap such bodies can take is bounded by a few times the budget, whatever mix
 * of requests arrives (60 parallel 4 MB bodies crashed a 256 MB heap before).
 */
import { GatewayError } from '../http/errors.ts';

export interface BodyBudget {
  /** Reserves `bytes` more; throws 503 overloaded when that would pass the budget. */
  reserve(bytes: number): void;
  release(bytes: number): void;
  readonly used: number;
}

/** `onChange` sees the bytes held after each change (the tollgate_inflight_body_bytes gauge). */
export function createBodyBudget(max: number, onChange?: (used: number) => void): BodyBudget {
  let used = 0;
  return {
    reserve(bytes) {
      if (used + bytes > max) {
        throw new GatewayError('overloaded', 'The gateway is reading too many request bodies at once; retry shortly.', {
          headers: { 'retry-after': '1', 'retry-after-ms': '500' },
        });
      }
      used += bytes;
      onChange?.(used);
    },
    release(bytes) {
      used = Math.max(0, used - bytes);
      onChange?.(used);
    },
    get used() {
      return used;
    },
  };
}
