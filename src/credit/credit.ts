/**
 * Credit for live keys (SPEC §4): a hold before the upstream is contacted (402 when balance − held
 * cannot cover it) and a settle after — each one Lua script, idempotent per request id. A settle that
 * fails (store briefly down) is retried in the background until it lands: the settle is idempotent, and
 * a settle after the reaper released the hold still debits, so a blip never leaves a completion
 * unbilled. Shutdown waits for pending settles.
 */
import { GatewayError } from '../http/errors.ts';
import type { Logger } from '../obs/logger.ts';
import type { SettleInput, SettleResult, Store } from '../store/types.ts';

export interface Credit {
  /** Takes the hold or throws 402 `insufficient_credit` (503 `store_unavailable` when the store is down). */
  hold(account: string, requestId: string, amountMicros: number, expiresAtMs: number): Promise<void>;
  /** Settles now, or keeps retrying in the background; resolves with the result once it landed. */
  settle(input: SettleInput): Promise<SettleResult | undefined>;
  /**
   * Marks a settle still to come (a hold was taken; billing may first await the tokenizer): drain()
   * waits for it too. Call the returned function once the settle was handed to settle(), or given up.
   */
  expect(): () => void;
  /** Settles (and expected settles) not yet landed. */
  readonly pending: number;
  /** Waits (up to the deadline) for pending settles. */
  drain(deadlineMs: number): Promise<void>;
}

/** Retry back-off for a failed settle: 100 ms doubling to 5 s, for as long as the process lives. */
const FIRST_RETRY_MS = 100;
const MAX_RETRY_MS = 5_000;

export function createCredit(d: { store: Store; logger: Logger }): Credit {
  const inFlight = new Set<Promise<unknown>>();
  /** Counts `p` as pending (drain waits for it) until it settles. */
  function track<T>(p: Promise<T>): Promise<T> {
    inFlight.add(p);
    void p.finally(() => inFlight.delete(p));
    return p;
  }

  async function settleWithRetry(input: SettleInput): Promise<SettleResult | undefined> {
    for (let wait = FIRST_RETRY_MS, attempt = 1; ; attempt++, wait = Math.min(wait * 2, MAX_RETRY_MS)) {
      try {
        const r = await d.store.settle(input);
        if (attempt > 1) d.logger.warn({ request_id: input.requestId, attempts: attempt }, 'settle landed after retries');
        return r;
      } catch (err) {
        if (attempt === 1 || attempt % 10 === 0) {
          d.logger.error({ err: (err as Error).message, request_id: input.requestId, account: input.account, cost_micros: input.costMicros, attempt }, 'settle failed; retrying');
        }
        await new Promise((r) => setTimeout(r, wait).unref());
      }
    }
  }

  return {
    async hold(account, requestId, amountMicros, expiresAtMs) {
      const r = await d.store.hold(account, requestId, amountMicros, Math.ceil(expiresAtMs));
      if (!r.ok) {
        const available = r.balance_micros - r.held_micros;
        throw new GatewayError('insufficient_credit', `Insufficient credit: this request needs a hold of ${amountMicros} micro-credits and ${Math.max(0, available)} are available.`, {
          headers: { 'x-should-retry': 'false' },
        });
      }
    },
    settle(input) {
      return track(settleWithRetry(input));
    },
    expect() {
      let done!: () => void;
      track(new Promise<void>((r) => (done = r)));
      return done;
    },
    get pending() {
      return inFlight.size;
    },
    async drain(deadlineMs) {
      // Rounds: an expected settle resolves when its settle starts, which is then waited for in turn.
      const deadline = Date.now() + deadlineMs;
      while (inFlight.size > 0 && Date.now() < deadline) {
        let timer: NodeJS.Timeout | undefined;
        const late = new Promise<boolean>((r) => (timer = setTimeout(r, deadline - Date.now(), true)));
        const timedOut = await Promise.race([Promise.allSettled([...inFlight]).then(() => false), late]);
        clearTimeout(timer);
        if (timedOut) break;
      }
      if (inFlight.size > 0) d.logger.error({ pending: inFlight.size }, 'shutdown with settles still pending: their holds will be reaped and the ledger must be reconciled from these logs');
    },
  };
}
