/**
 * Fair share of the event loop for uncached share reads (SPEC §13): the snapshot bytes being read from
 * S3 at once are bounded per owning account. Reads need no key and a valid slug is never refused, so an
 * account reading its own big shares round-robin (every read a miss) is made to wait its turn instead:
 * past the bound its misses queue, first come first served, and go as its earlier ones finish. Another
 * account's misses never wait behind them. A read is let through whatever its size when none of its
 * account's is in flight, so a share larger than the bound is still read, alone. share-cache.ts keeps
 * two gates: small snapshots take turns in a lane of their own, so a flood of an account's big shares
 * (reads need no key) does not hold its small ones up.
 *
 * The queue needs no bound of its own: misses are coalesced per slug (share-cache.ts), so it holds at
 * most one entry per distinct slug being read, no more than there are open connections.
 */

/** Gives the slot back; calling it again does nothing. */
export type Release = () => void;

export interface ObjectReadGate {
  /** Resolves once `bytes` of `account`'s may be read; the caller must call the Release it gets. */
  acquire(account: string, bytes: number): Promise<Release>;
  /** Bytes in flight and reads waiting for `account` (tests, metrics). */
  load(account: string): { inFlight: number; waiting: number };
}

interface Waiter {
  bytes: number;
  grant: () => void;
}

interface AccountState {
  inFlight: number;
  /** FIFO; `head` is the next to go (an index, so a long queue is not shifted per grant). */
  queue: (Waiter | undefined)[];
  head: number;
}

export function createObjectReadGate(maxBytesPerAccount: number): ObjectReadGate {
  const accounts = new Map<string, AccountState>();

  function pump(account: string, a: AccountState): void {
    while (a.head < a.queue.length) {
      const next = a.queue[a.head]!;
      if (a.inFlight > 0 && a.inFlight + next.bytes > maxBytesPerAccount) break;
      a.queue[a.head++] = undefined;
      a.inFlight += next.bytes;
      next.grant();
    }
    if (a.head === a.queue.length) {
      a.queue.length = 0;
      a.head = 0;
      if (a.inFlight === 0) accounts.delete(account);
    } else if (a.head >= 1024 && a.head * 2 >= a.queue.length) {
      // A flood that never lets the queue empty: drop the granted slots now and then, not per grant.
      a.queue.splice(0, a.head);
      a.head = 0;
    }
  }

  return {
    acquire(account, bytes) {
      let a = accounts.get(account);
      if (!a) accounts.set(account, (a = { inFlight: 0, queue: [], head: 0 }));
      const state = a;
      return new Promise<Release>((resolve) => {
        state.queue.push({
          bytes,
          grant: () => {
            let released = false;
            resolve(() => {
              if (released) return;
              released = true;
              state.inFlight -= bytes;
              pump(account, state);
            });
          },
        });
        pump(account, state);
      });
    },
    load(account) {
      const a = accounts.get(account);
      return { inFlight: a?.inFlight ?? 0, waiting: a ? a.queue.length - a.head : 0 };
    },
  };
}
