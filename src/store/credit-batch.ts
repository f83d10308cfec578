/**
 * Group commit (docs/ledger.md "Group commit"): the calls one process makes in one event-loop turn are
 * collected per Redis slot and sent as one script call per slot, just before the turn's write; the reply
 * (one result per call, in order) fans out to each caller. Nothing waits for a batch to fill: at low load
 * a batch is one call, sent in the turn it was made in (the caller's single-request script), and under
 * load batches form by themselves from the calls that arrive in the same turn.
 *
 * A batch is one script, so on a connection loss either all of its calls ran or none did; every caller of
 * it gets the same error and treats it as "may have run", exactly as for a call of its own (holds and
 * settles are idempotent per request).
 */

/** The most calls in one script call: a larger turn is split, so no single script holds Redis long. */
export const MAX_BATCH = 128;

export interface TurnBatcherOptions<I, R> {
  /**
   * Runs `flush` once before this turn's write (the script pipe's beforeWrite), or at the turn's end; or,
   * for calls that may linger (lease settles, credit-lease.ts), after a timer, returning its cancel.
   */
  schedule: (flush: () => void) => void | (() => void);
  /** Sends the pending calls at once when this many are waiting (a lingering batcher; default never). */
  full?: number;
  /** The slot a call goes to (Cluster); one value for every call on a single node. */
  slotOf: (item: I) => string | number;
  /** Sends a batch of one: the single-request script, as before group commit. */
  one: (item: I) => Promise<R>;
  /**
   * Sends a batch of two or more (all of one slot) as one call; resolves one result per item, in order
   * (an Error in an item's place fails that item alone).
   */
  many: (items: I[]) => Promise<R[]>;
}

interface Pending<I, R> {
  items: I[];
  waiters: { resolve(r: R): void; reject(e: unknown): void }[];
}

/** Queues a call for the batch of its slot and resolves with its own result; `flush` sends what waits now. */
export type TurnBatcher<I, R> = ((item: I) => Promise<R>) & {
  /** Sends what waits now; resolves once every call it sent has answered (or failed). */
  flush(): Promise<void>;
};

/** Returns `add`: queues a call for this turn's batch of its slot and resolves with its own result. */
export function createTurnBatcher<I, R>(o: TurnBatcherOptions<I, R>): TurnBatcher<I, R> {
  let pending = new Map<string | number, Pending<I, R>>();
  let scheduled = false;
  let waiting = 0;
  let cancel: (() => void) | undefined;

  function send(items: I[], waiters: Pending<I, R>['waiters']): Promise<void> {
    if (items.length === 1) return o.one(items[0]!).then(waiters[0]!.resolve, waiters[0]!.reject);
    return o.many(items).then(
      (results) => {
        if (results.length !== items.length) {
          const err = new Error(`batch of ${items.length} answered with ${results.length} results`);
          for (const w of waiters) w.reject(err);
          return;
        }
        // A request that failed on its own inside the script is an error in its place; the others stand.
        for (let i = 0; i < waiters.length; i++) {
          const r = results[i]!;
          if (r instanceof Error) waiters[i]!.reject(r);
          else waiters[i]!.resolve(r);
        }
      },
      (err: unknown) => {
        for (const w of waiters) w.reject(err);
      },
    );
  }

  /** Sends what waits; `sent` (the store's close, not a turn's flush) collects the sends to wait for. */
  function flush(sent?: Promise<void>[]): void {
    scheduled = false;
    waiting = 0;
    cancel?.();
    cancel = undefined;
    const batches = pending;
    pending = new Map();
    for (const { items, waiters } of batches.values()) {
      for (let i = 0; i < items.length; i += MAX_BATCH) {
        // (Not `sent?.push(send(…))`: a short-circuit would skip the send itself.)
        const p = items.length <= MAX_BATCH ? send(items, waiters) : send(items.slice(i, i + MAX_BATCH), waiters.slice(i, i + MAX_BATCH));
        if (sent) sent.push(p);
      }
    }
  }

  const add = (item: I) => {
    const slot = o.slotOf(item);
    let p = pending.get(slot);
    if (!p) {
      p = { items: [], waiters: [] };
      pending.set(slot, p);
    }
    p.items.push(item);
    const result = new Promise<R>((resolve, reject) => p.waiters.push({ resolve, reject }));
    if (++waiting === o.full) flush();
    else if (!scheduled) {
      scheduled = true;
      cancel = o.schedule(() => flush()) ?? undefined;
    }
    return result;
  };
  return Object.assign(add, {
    flush: async () => {
      const sent: Promise<void>[] = [];
      flush(sent);
      await Promise.all(sent);
    },
  });
}
