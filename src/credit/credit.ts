/**
 * Credit for live keys (SPEC §4): a hold before the upstream is contacted (402 when balance − held
 * cannot cover it) and a settle after — each one Lua script, idempotent per request id. A settle that
 * fails (store briefly down) is retried in the background until it lands: the settle is idempotent, and
 * a settle after the reaper released the hold still debits, so a blip never leaves a completion
 * unbilled. Shutdown waits for pending settles.
 *
 * Idempotency (docs/ledger.md): the request's own field in its hold bucket records the settle until the
 * reaper empties that bucket, after the hold's expiry. A retry after an attempt that may have run says so
 * (`mayHaveRun`); should it come after that bucket was emptied, the store debits nothing rather than risk a
 * second debit, and the settle is logged for reconciliation. Reaped holds are remembered for
 * `settledMarkerTtlSeconds`, longer than any retry, so a settle after a reap still debits once.
 */
import type { Config } from '../config/schema.ts';
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

/** Retry back-off for a failed settle: 100 ms doubling to 5 s. */
const FIRST_RETRY_MS = 100;
const MAX_RETRY_MS = 5_000;
/**
 * No settle attempt starts later than this after the first one. Past it the settle is abandoned with an
 * error line that carries everything needed to reconcile, as at shutdown: the hold is reaped
 * (`hold_expired`). An hour of Redis being unreachable is an outage in which every live request fails anyway.
 */
export const SETTLE_RETRY_WINDOW_MS = 3_600_000;

/** How long a hold may stay before the reaper releases it: the whole upstream deadline plus the margin. */
export function holdTtlMs(config: Pick<Config, 'upstream' | 'credit'>): number {
  return config.upstream.totalTimeoutMs + config.credit.holdMarginSeconds * 1000;
}

/**
 * How long the store remembers a reaped hold (the Redis store's `settledTtlSeconds`): it must outlive every
 * later attempt of the request's settle (all start within the retry window of the first, and the hold
 * is reaped after it was taken), so a settle after a reap debits exactly once. Only reaped holds are kept:
 * a process that died, or an outage longer than the hold TTL.
 */
export function settledMarkerTtlSeconds(config: Pick<Config, 'upstream' | 'credit'>): number {
  return Math.ceil((holdTtlMs(config) + SETTLE_RETRY_WINDOW_MS) / 1000);
}

/** A store error that says the command was refused before it was sent (types.ts Store.settle). */
export function neverSent(err: unknown): boolean {
  return (err as { cause?: { sent?: unknown } } | null)?.cause?.sent === false;
}

export interface CreditDeps {
  store: Store;
  logger: Logger;
  /** Clock for the retry window (tests shorten time with it). */
  now?: () => number;
  /** Defaults to SETTLE_RETRY_WINDOW_MS; must stay below the store's settled-marker lifetime. */
  retryWindowMs?: number;
}

export function createCredit(d: CreditDeps): Credit {
  const now = d.now ?? Date.now;
  const retryWindowMs = d.retryWindowMs ?? SETTLE_RETRY_WINDOW_MS;
  const inFlight = new Set<Promise<unknown>>();
  /** Counts `p` as pending (drain waits for it) until it settles. */
  function track<T>(p: Promise<T>): Promise<T> {
    inFlight.add(p);
    void p.finally(() => inFlight.delete(p));
    return p;
  }

  async function settleWithRetry(first: SettleInput): Promise<SettleResult | undefined> {
    const giveUpAt = now() + retryWindowMs;
    let input = first;
    for (let wait = FIRST_RETRY_MS, attempt = 1; ; attempt++, wait = Math.min(wait * 2, MAX_RETRY_MS)) {
      try {
        const r = await d.store.settle(input);
        if (attempt > 1) d.logger.warn({ request_id: input.requestId, attempts: attempt }, 'settle landed after retries');
        if (r.replayed && r.entry_id === '') {
          d.logger.error(
            { settle: input, attempts: attempt },
            'settle retried after its hold bucket was reaped: an earlier attempt may have debited it; nothing debited again; reconcile the ledger from this line',
          );
        }
        return r;
      } catch (err) {
        if (!input.mayHaveRun && !neverSent(err)) input = { ...input, mayHaveRun: true };
        const last = now() + wait > giveUpAt;
        if (last) {
          // Every field of the ledger entry that did not land, so it can be entered by hand.
          d.logger.error(
            { err: (err as Error).message, settle: input, attempts: attempt },
            'settle abandoned after its retry window: the hold will be reaped; reconcile the ledger from this line',
          );
          return undefined;
        }
        if (attempt === 1 || attempt % 10 === 0) {
          d.logger.error(
            { err: (err as Error).message, request_id: input.requestId, account: input.account, cost_micros: input.costMicros, attempt },
            'settle failed; retrying',
          );
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
        throw new GatewayError(
          'insufficient_credit',
          `Insufficient credit: this request needs a hold of ${amountMicros} micro-credits and ${Math.max(0, available)} are available.`,
          {
            headers: { 'x-should-retry': 'false' },
          },
        );
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
      if (inFlight.size > 0)
        d.logger.error(
          { pending: inFlight.size },
          'shutdown with settles still pending: their holds will be reaped and the ledger must be reconciled from these logs',
        );
    },
  };
}
