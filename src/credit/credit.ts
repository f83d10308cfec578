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
 *
 * Failover (docs/ledger.md "Failover"): Redis acknowledges a write before its replicas have it, so a
 * master that dies takes its last acknowledged settles with it when a replica is promoted. The settles
 * that landed in the last `resendWindowMs` are kept (references, no copy), and when the store reports a
 * possible loss (Store.onPossibleLoss) each is sent once more: one that survived answers as a replay and
 * debits nothing, one that was lost is debited now, exactly once either way.
 */
import type { Config } from '../config/schema.ts';
import { GatewayError } from '../http/errors.ts';
import type { Logger } from '../obs/logger.ts';
import type { BudgetCharge, SettleInput, SettleResult, Store } from '../store/types.ts';
import type { Spool } from './spool.ts';
import { within } from '../deadline.ts';

export interface Credit {
  /** Takes the hold or throws 402 `insufficient_credit` (503 `store_unavailable` when the store is down). */
  hold(account: string, requestId: string, amountMicros: number, expiresAtMs: number, budget?: BudgetCharge): Promise<void>;
  /**
   * The due time of the hold bucket a hold expiring at `expiresAtMs` is taken in (Store.holdBucketDue), for
   * the request's settle to carry (`SettleInput.holdBucketDue`, spool lines included); undefined when the
   * store does not say.
   */
  holdBucketDue(expiresAtMs: number): number | undefined;
  /** Settles now, or keeps retrying in the background; resolves with the result once it landed. */
  settle(input: SettleInput): Promise<SettleResult | undefined>;
  /**
   * Marks a settle still to come (a hold was taken; billing may first await the tokenizer): drain()
   * waits for it too. Call the returned function once the settle was handed to settle(), or given up.
   * `what` names it in the error line should the process exit before it is handed over (abandonExpected).
   */
  expect(what?: ExpectedSettle): () => void;
  /** Settles (and expected settles) not yet landed. */
  readonly pending: number;
  /** Waits (up to the deadline) for pending settles. */
  drain(deadlineMs: number): Promise<void>;
  /**
   * At exit, after drain(): appends every settle still owed to the spool (fsynced; SPEC §14) and stops
   * retrying them; from then on a settle handed over whose first attempt fails goes there too (no retry).
   * Each is logged at error level with the whole settle. Resolves with how many were spooled now.
   */
  spool(spool: Spool): Promise<number>;
  /**
   * At exit, after spool(): waits (up to the deadline) for the settles still expected to be handed over
   * and for every settle in flight to land or be spooled. Resolves with how many are still pending.
   */
  settleLate(deadlineMs: number): Promise<number>;
  /**
   * At exit, once the wait is over: logs at error level each settle still expected (its billing did not end
   * in time; it can be neither settled nor spooled: its hold is released by the reaper with a hold_expired
   * entry) and returns how many.
   */
  abandonExpected(): number;
}

/** What an expected settle is, for the error line should it never be handed over. */
export interface ExpectedSettle {
  account: string;
  requestId: string;
  holdMicros?: number;
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

/**
 * Error replies Redis gives before it runs a command at all (a script included): the cluster has no
 * master for a slot (CLUSTERDOWN, TRYAGAIN), the server is still loading its data set (LOADING), a
 * replica without its master (MASTERDOWN), a script still running (BUSY). Nothing of the command ran.
 * READONLY and OOM are left out: inside a script Redis reports them at a write, after the script ran
 * its reads, and nothing here needs the difference.
 */
const REFUSED_BEFORE_RUN = /^(?:CLUSTERDOWN|TRYAGAIN|LOADING|MASTERDOWN|BUSY) /;

/** A store error whose command was refused before it was written (the pipe not connected, the node guard). */
export function neverSent(err: unknown): boolean {
  return (err as { cause?: { sent?: unknown } } | null)?.cause?.sent === false;
}

/**
 * A hold's store error that says the hold did not run: never written (neverSent), or answered with one of
 * Redis's refusals above. During a Cluster's CLUSTERDOWN window every hold fails this way; before, each
 * refused request's hold was treated as may-have-run, and a settle at 0 was sent for it, retried through
 * the outage and written to the ledger as a zero debit once the cluster came back. For holds only: ioredis
 * (Cluster after a lost connection, Sentinel's resend) may send a command again and answer with the second
 * attempt's refusal while the first ran; for a hold that costs at most a hold left to the reaper, but a
 * settle must keep `mayHaveRun` then (a retry after its bucket was reaped would otherwise debit twice),
 * so the settle path uses neverSent alone.
 */
export function holdNotRun(err: unknown): boolean {
  if (neverSent(err)) return true;
  const message = (err as { cause?: { message?: unknown } } | null)?.cause?.message;
  return typeof message === 'string' && REFUSED_BEFORE_RUN.test(message);
}

export interface CreditDeps {
  store: Store;
  logger: Logger;
  /** Clock for the retry window (tests shorten time with it). */
  now?: () => number;
  /** Defaults to SETTLE_RETRY_WINDOW_MS; must stay below the store's settled-marker lifetime. */
  retryWindowMs?: number;
  /**
   * How long a landed settle is kept to be sent again should the store report a possible loss
   * (`store.resend_settles_ms`); 0 keeps none. Defaults to RESEND_WINDOW_MS.
   */
  resendWindowMs?: number;
  /** Told of each settle sent again that landed: whether it had been lost (debited now) or had survived. */
  onResent?: (debited: boolean) => void;
}

/** `store.resend_settles_ms`'s default: settles that landed in the last 5 s are sent again after a possible loss. */
export const RESEND_WINDOW_MS = 5_000;

export function createCredit(d: CreditDeps): Credit {
  const now = d.now ?? Date.now;
  const retryWindowMs = d.retryWindowMs ?? SETTLE_RETRY_WINDOW_MS;
  const resendWindowMs = d.resendWindowMs ?? RESEND_WINDOW_MS;
  const inFlight = new Set<Promise<unknown>>();

  /**
   * Settles that landed in the last resendWindowMs, oldest first, and when each landed: two arrays from
   * `head` on (no object per settle; the front is cut as it ages, the arrays compacted now and then).
   */
  let landed: SettleInput[] = [];
  let landedAt: number[] = [];
  let head = 0;
  function remember(input: SettleInput): void {
    const t = now();
    landed.push(input);
    landedAt.push(t);
    const from = t - resendWindowMs;
    while (landedAt[head]! < from) head++;
    if (head >= 1024 && head * 2 >= landed.length) {
      landed = landed.slice(head);
      landedAt = landedAt.slice(head);
      head = 0;
    }
  }
  /**
   * The store may have lost writes it acknowledged: the settles that landed in the window before now are
   * taken, and once the store knows they may be lost, each goes again, once.
   */
  function resendLanded(lost: Promise<boolean>): void {
    const from = now() - resendWindowMs;
    const again: SettleInput[] = [];
    for (let i = head; i < landed.length; i++) if (landedAt[i]! >= from) again.push(landed[i]!);
    landed = [];
    landedAt = [];
    head = 0;
    if (again.length === 0) return;
    // Not waited for by drain(): only known once the store is reached again (the resends are, once sent).
    void lost.then((l) => l && resend(again));
  }
  function resend(again: SettleInput[]): void {
    d.logger.warn(
      { settles: again.length, window_ms: resendWindowMs },
      'the store may have lost acknowledged writes (a connection to a Redis master ended or a node stopped answering): sending the settles that landed just before again (a survivor replays, a lost one is debited once)',
    );
    for (const input of again) {
      // An attempt ran: where its bucket was emptied since, the store debits nothing rather than twice.
      void track(
        settleWithRetry({ ...input, mayHaveRun: true }).then((r) => {
          if (r) d.onResent?.(!r.replayed);
          if (r && !r.replayed)
            d.logger.warn(
              { request_id: input.requestId, account: input.account, cost_micros: input.costMicros, entry_id: r.entry_id },
              'settle lost by the store after it was acknowledged (failover): debited again, once',
            );
        }),
      );
    }
  }
  // Only a store that can report a loss has settles kept for it (not the embedded store).
  const resending = resendWindowMs > 0 && d.store.onPossibleLoss !== undefined;
  if (resending) d.store.onPossibleLoss!(resendLanded);
  /** Counts `p` as pending (drain waits for it) until it settles. */
  function track<T>(p: Promise<T>): Promise<T> {
    inFlight.add(p);
    void p.finally(() => inFlight.delete(p));
    return p;
  }

  /** A settle not landed yet: what the spool takes at exit. */
  interface Owed {
    input: SettleInput;
    /** An attempt is in flight (it may run even if its answer never comes). */
    sending: boolean;
    spooled: boolean;
    /** Ends the retry wait early (once spooled). */
    wake: () => void;
  }
  const owed = new Set<Owed>();
  /** Settles expected (expect() with what they are) and not handed over yet. */
  const expected = new Set<ExpectedSettle>();

  /** Waits until nothing is pending (an expected settle resolves when its settle starts, then that one is waited for) or the deadline. */
  async function waitPending(deadlineMs: number): Promise<void> {
    const deadline = Date.now() + deadlineMs;
    while (inFlight.size > 0 && Date.now() < deadline) {
      if (!(await within(Promise.allSettled([...inFlight]), deadline - Date.now()))) break;
    }
  }
  /** Set by spool(): from then on a failed settle is spooled instead of retried. */
  let spoolTo: Spool | undefined;

  async function spoolOwed(spool: Spool, list: Owed[]): Promise<void> {
    for (const o of list) {
      o.spooled = true;
      o.wake();
    }
    // An attempt in flight may still run in Redis: the spooled copy says so.
    const inputs = list.map((o) => (o.sending && !o.input.mayHaveRun ? { ...o.input, mayHaveRun: true } : o.input));
    try {
      await spool.append(inputs);
      for (const settle of inputs)
        d.logger.error(
          { settle, spool: spool.file },
          'settle spooled at shutdown (store unreachable): it is applied at the next start or by `tollgate spool replay`; if this volume is lost, reconcile the ledger from this line',
        );
    } catch (err) {
      for (const settle of inputs)
        d.logger.error({ err: (err as Error).message, settle }, 'settle could not be spooled: reconcile the ledger from this line');
    }
  }

  async function settleWithRetry(first: SettleInput): Promise<SettleResult | undefined> {
    const giveUpAt = now() + retryWindowMs;
    const o: Owed = { input: first, sending: false, spooled: false, wake: () => {} };
    owed.add(o);
    try {
      return await attempts(o, giveUpAt);
    } finally {
      owed.delete(o);
    }
  }

  async function attempts(o: Owed, giveUpAt: number): Promise<SettleResult | undefined> {
    for (let wait = FIRST_RETRY_MS, attempt = 1; ; attempt++, wait = Math.min(wait * 2, MAX_RETRY_MS)) {
      const input = o.input;
      try {
        o.sending = true;
        const r = await d.store.settle(input);
        if (resending) remember(input);
        if (attempt > 1) d.logger.warn({ request_id: input.requestId, attempts: attempt }, 'settle landed after retries');
        if (r.replayed && r.entry_id === '') {
          d.logger.error(
            { settle: input, attempts: attempt },
            'settle retried after its hold bucket was reaped: an earlier attempt may have debited it; nothing debited again; reconcile the ledger from this line',
          );
        }
        return r;
      } catch (err) {
        o.sending = false;
        if (!input.mayHaveRun && !neverSent(err)) o.input = { ...input, mayHaveRun: true };
        // Spooled meanwhile (shutdown), or failing after the spool was opened: the spool has it.
        if (o.spooled) return undefined;
        if (spoolTo) {
          await spoolOwed(spoolTo, [o]);
          return undefined;
        }
        const last = now() + wait > giveUpAt;
        if (last) {
          // Every field of the ledger entry that did not land, so it can be entered by hand.
          d.logger.error(
            { err: (err as Error).message, settle: o.input, attempts: attempt },
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
        await new Promise<void>((r) => {
          const timer = setTimeout(r, wait).unref();
          o.wake = () => (clearTimeout(timer), r());
        });
        if (o.spooled) return undefined;
      }
    }
  }

  return {
    async hold(account, requestId, amountMicros, expiresAtMs, budget) {
      const r = await d.store.hold(account, requestId, amountMicros, Math.ceil(expiresAtMs), budget);
      if (!r.ok && r.budget && budget) {
        const left = Math.max(0, budget.limitMicros - r.budget.used_micros);
        throw new GatewayError(
          'key_budget_exceeded',
          `This API key's budget is exhausted: this request needs a hold of ${amountMicros} micro-credits and ${left} of the key's ${budget.limitMicros} are left this period.`,
          { headers: { 'x-should-retry': 'false' } },
        );
      }
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
    holdBucketDue(expiresAtMs) {
      return d.store.holdBucketDue?.(Math.ceil(expiresAtMs));
    },
    settle(input) {
      return track(settleWithRetry(input));
    },
    expect(what) {
      let done!: () => void;
      track(new Promise<void>((r) => (done = r)));
      if (!what) return done;
      expected.add(what);
      return () => {
        expected.delete(what);
        done();
      };
    },
    get pending() {
      return inFlight.size;
    },
    async drain(deadlineMs) {
      // Settles lingering for others to share their call go now: the drain waits for them.
      d.store.hurry?.();
      await waitPending(deadlineMs);
      if (inFlight.size > 0)
        d.logger.warn({ pending: inFlight.size, owed: owed.size }, 'settles still pending at the end of the drain: spooling those owed');
    },
    async settleLate(deadlineMs) {
      await waitPending(deadlineMs);
      return inFlight.size;
    },
    abandonExpected() {
      for (const what of expected)
        d.logger.error(
          { settle: what },
          'settle still being billed at exit: neither settled nor spooled; its hold is released by the reaper (hold_expired); reconcile the ledger from this line and the request log',
        );
      return expected.size;
    },
    async spool(spool) {
      spoolTo = spool;
      const list = [...owed].filter((o) => !o.spooled);
      if (list.length > 0) await spoolOwed(spool, list);
      return list.length;
    },
  };
}
