/**
 * Request body bytes held across the process and per key (SPEC §12, §13):
 * `limits.max_inflight_body_bytes` (default 64 MiB) → 503 overloaded, and
 * `limits.max_inflight_body_bytes_per_key` (default 8 MiB) → 429 concurrency_limit_exceeded.
 *
 * Bytes are reserved as they arrive, never on a promise: a declared `content-length` reserves nothing
 * until its bytes come (16 sockets declaring 4 MiB and sending one byte each used to take the whole
 * process budget and refuse every other tenant). They are released once the request no longer needs
 * them (for chat: once its pipeline ends, upstream answered and billed; its upstream payload lives that long). The text, the parsed
 * object and the upstream payload that a body becomes are about 3–4× its bytes, so the heap such bodies
 * can take is bounded by a few times the budget, whatever mix of requests arrives; the per-key cap keeps
 * one key from taking that budget away from the others.
 *
 * The budget also carries `server.body_timeout_ms`: a body read under it that is not complete within
 * that time is refused with 408 (http/body.ts), so a trickling client holds its bytes and its slot for
 * at most that long.
 */
import { GatewayError } from '../http/errors.ts';

export interface BodyBudget {
  /** Reserves `bytes` more; throws 503 overloaded (process) or 429 (key) when that would pass a budget. */
  reserve(bytes: number): void;
  release(bytes: number): void;
  readonly used: number;
  /** How long a body read under this budget may take to arrive (server.body_timeout_ms); undefined → no bound. */
  readonly timeoutMs: number | undefined;
}

/** The process budget; `forKey` gives the budget one key's bodies are read under. */
export interface ProcessBodyBudget extends BodyBudget {
  /** The process budget and the key's own cap together. */
  forKey(keyId: string): BodyBudget;
  /** Body bytes a key holds (tests). */
  usedBy(keyId: string): number;
}

export interface BodyBudgetOptions {
  /** Bytes one key may hold (limits.max_inflight_body_bytes_per_key); default: no cap of its own. */
  perKey?: number;
  timeoutMs?: number;
}

/** `onChange` sees the bytes held after each change (the tollgate_inflight_body_bytes gauge). */
export function createBodyBudget(max: number, onChange?: (used: number) => void, o: BodyBudgetOptions = {}): ProcessBodyBudget {
  let used = 0;
  const perKey = o.perKey ?? Infinity;
  const byKey = new Map<string, number>();
  /**
   * One key's budget, for one request: a class, so a request costs one small object (its methods and
   * getter live on the prototype; an object literal with a getter is defined in V8's runtime each time).
   */
  class KeyBudget implements BodyBudget {
    readonly keyId: string;
    readonly timeoutMs = o.timeoutMs;
    constructor(keyId: string) {
      this.keyId = keyId;
    }
    reserve(bytes: number): void {
      const mine = byKey.get(this.keyId) ?? 0;
      if (mine + bytes > perKey) {
        throw new GatewayError(
          'concurrency_limit_exceeded',
          `This API key already has ${perKey} bytes of request bodies in flight; wait for a request to finish.`,
          { headers: { 'retry-after': '1', 'retry-after-ms': '1000', 'x-ratelimit-scope': 'key' } },
        );
      }
      process.reserve(bytes);
      byKey.set(this.keyId, mine + bytes);
    }
    release(bytes: number): void {
      const left = (byKey.get(this.keyId) ?? 0) - bytes;
      if (left <= 0) byKey.delete(this.keyId);
      else byKey.set(this.keyId, left);
      process.release(bytes);
    }
    get used(): number {
      return byKey.get(this.keyId) ?? 0;
    }
  }

  const process: ProcessBodyBudget = {
    reserve(bytes: number): void {
      if (used + bytes > max) {
        throw new GatewayError('overloaded', 'The gateway is reading too many request bodies at once; retry shortly.', {
          headers: { 'retry-after': '1', 'retry-after-ms': '500' },
        });
      }
      used += bytes;
      onChange?.(used);
    },
    release(bytes: number): void {
      used = Math.max(0, used - bytes);
      onChange?.(used);
    },
    get used(): number {
      return used;
    },
    timeoutMs: o.timeoutMs,
    usedBy: (keyId) => byKey.get(keyId) ?? 0,
    forKey: (keyId) => new KeyBudget(keyId),
  };
  return process;
}
