/**
 * Credit leases (docs/ledger.md "Leases", `credit.leases`): a process that makes many holds for one
 * account takes one larger hold — a lease, in the requests' own hold bucket — and takes the next holds of
 * that bucket from it in memory, with no Redis call; each request's settle then debits, releases its draw
 * from the lease and records itself in one pass (lease-settle.lua), and the lease's undrawn part is given
 * back when no more requests can fall into its bucket. Only the bookkeeping is here; redis-credit.ts sends
 * the calls.
 *
 * Why it stays exact: the lease is a hold, taken by hold.lua against `balance − held` like any other, so
 * the draws of all processes together never exceed the balance; each draw is released once (by its
 * request's settle, which finds the request's field absent exactly once, or by the reaper with the rest of
 * the lease once its bucket is due, which is never before a drawn request's own hold would have expired).
 */

/** Per-request holds of an account and bucket in this process before it takes a lease. */
export const LEASE_AFTER = 8;
/** A first lease covers this many holds of the size that asked for it; each next one in the bucket twice the last. */
export const LEASE_HOLDS = 32;
/** The most holds of that size one lease covers. */
export const LEASE_MAX_HOLDS = 1024;
/** A lease takes at most this share of the account's available credit (balance − held)… */
export const LEASE_SHARE = 64;
/** …and is not taken when that leaves it fewer than this many holds of the size that asked. */
export const LEASE_MIN_HOLDS = 8;

export interface LeaseDeps {
  /** Takes the lease: a hold of `amount` for the field `id` in bucket `due` of `account` (hold.lua). */
  take(account: string, due: number, id: string, amount: number): Promise<{ ok: boolean }>;
  /** Gives the undrawn `amount` of a closed lease back (lease-settle.lua with no settles). */
  giveBack(account: string, due: number, id: string, amount: number): Promise<unknown>;
  /** The hold TTL: a request holding at `t` falls into the bucket due at or after `t + holdTtlMs`. */
  holdTtlMs: number;
  now(): number;
  onError(err: Error): void;
  /**
   * How long after its bucket is due a drawn request still settles through its lease (the reaped lease's
   * 'r' lives that long: RedisStoreOptions.settledTtlSeconds); later it settles as one without a hold.
   */
  keepMs: number;
  /** The lease ids' prefix, unique to this process (a restart or another worker never reuses an id). */
  idPrefix: string;
  /**
   * The connection's generation (the script pipe's), when there is one: a lease taken on an earlier
   * connection is not drawn from (the server may have restarted empty, and the lease with it).
   */
  generation?: () => number;
}

/** How often the book looks for leases whose bucket's window is over, and for draws to forget. */
export const SWEEP_MS = 250;

interface Lease {
  readonly id: string;
  readonly account: string;
  readonly due: number;
  /** What is left to draw. */
  avail: number;
  /** Draws are still taken from it. */
  open: boolean;
  /** The connection generation it was taken on. */
  readonly generation: number | undefined;
  /** The requests drawn from it (drawn's keys), until each settles (forgotten `keepMs` after the bucket is due). */
  readonly requests: Set<string>;
}

/** An account and bucket this process holds in: its per-request holds, its lease. */
interface Slot {
  readonly due: number;
  holds: number;
  current: Lease | undefined;
  taking: boolean;
  /** Holds of the asking size the next lease covers. */
  nextHolds: number;
}

export interface LeaseBook {
  /** Draws `amount` from the account's open lease of bucket `due`: the lease's id, or undefined (take a hold). */
  draw(account: string, due: number, requestId: string, amount: number): string | undefined;
  /** A per-request hold of `amount` was taken with `available` (balance − held) left: maybe take a lease. */
  held(account: string, due: number, amount: number, available: number): void;
  /** The lease the account's request drew from and how much, if it drew in bucket `due`. */
  leaseOf(account: string, requestId: string, due: number): { id: string; amount: number } | undefined;
  /** The request's settle landed: it no longer counts against its lease. */
  settled(account: string, requestId: string): void;
  /** Leases open now (for tests and metrics). */
  readonly open: number;
  /** Leases taken and holds drawn since the book was made (for metrics). */
  readonly taken: number;
  readonly draws: number;
  /** Leases the book still remembers: open, or with draws not settled yet (its memory is bounded by these). */
  readonly remembered: number;
  /** Closes every lease, giving back what is undrawn. */
  close(): Promise<void>;
}

export function createLeaseBook(d: LeaseDeps): LeaseBook {
  /** By `<due> <account>`: each account and bucket this process held in while the bucket's window lasts. */
  const slots = new Map<string, Slot>();
  /** Leases open or with draws not settled yet (those forgotten `keepMs` after their bucket is due). */
  const leases = new Set<Lease>();
  /** By account and request id (a request id is the store's per account): the lease and the draw. */
  const drawn = new Map<string, { lease: Lease; amount: number }>();
  const drawKey = (account: string, requestId: string) => `${account}\n${requestId}`;
  const giving = new Set<Promise<unknown>>();
  let seq = 0;
  let open = 0;
  let draws = 0;
  let taken = 0;

  /** No more draws; the undrawn part goes back. */
  function closeLease(l: Lease): void {
    if (!l.open) return;
    l.open = false;
    open--;
    const amount = l.avail;
    l.avail = 0;
    if (amount <= 0) return;
    const p = d
      .giveBack(l.account, l.due, l.id, amount)
      .catch(d.onError)
      .finally(() => giving.delete(p));
    giving.add(p);
  }

  /** A request holding from now on falls into a later bucket: `due`'s window is over. */
  const windowLeft = (due: number) => due - d.holdTtlMs - d.now();

  /**
   * One timer for the book, running while it has slots or leases (unref'd: it never keeps the process up):
   * a slot whose window is over goes, its lease closed (the rest given back); a lease `keepMs` past its
   * bucket's due time forgets its unsettled draws (such a settle goes the per-request way).
   */
  let sweeper: NodeJS.Timeout | undefined;
  function sweep(): void {
    const now = d.now();
    for (const [key, s] of slots) {
      if (s.due - d.holdTtlMs > now) continue;
      slots.delete(key);
      if (s.current) closeLease(s.current);
    }
    for (const l of leases) {
      // Closed with every draw settled: nothing left to remember (a busy process takes a lease a second or more).
      if (!l.open && l.requests.size === 0) leases.delete(l);
      else if (l.due + d.keepMs <= now) {
        leases.delete(l);
        for (const r of l.requests) if (drawn.get(r)?.lease === l) drawn.delete(r);
      }
    }
    if (slots.size === 0 && leases.size === 0) {
      clearInterval(sweeper);
      sweeper = undefined;
    }
  }
  const sweeping = () => (sweeper ??= setInterval(sweep, SWEEP_MS).unref());

  function slotOf(account: string, due: number, make: boolean): Slot | undefined {
    const key = `${due} ${account}`;
    let s = slots.get(key);
    if (!s && make) {
      if (windowLeft(due) <= 0) return undefined;
      s = { due, holds: 0, current: undefined, taking: false, nextHolds: LEASE_HOLDS };
      slots.set(key, s);
      sweeping();
    }
    return s;
  }

  return {
    draw(account, due, requestId, amount) {
      const s = slotOf(account, due, false);
      const l = s?.current;
      if (!l) return undefined;
      // A hold repeated for the same request draws once.
      const key = drawKey(account, requestId);
      if (drawn.get(key)?.lease === l) return l.id;
      if (!l.open || windowLeft(due) <= 0) return undefined;
      // Spent, or taken on an earlier connection (its give-back then finds it, or finds nothing and does
      // nothing): closed, the rest given back, and the next hold asks for a new, larger one.
      if (l.avail < amount || (d.generation && l.generation !== d.generation())) {
        closeLease(l);
        s!.current = undefined;
        s!.holds = LEASE_AFTER - 1;
        return undefined;
      }
      l.avail -= amount;
      draws++;
      l.requests.add(key);
      drawn.set(key, { lease: l, amount });
      return l.id;
    },

    held(account, due, amount, available) {
      if (!(amount > 0) || windowLeft(due) <= 0) return;
      const s = slotOf(account, due, true);
      if (!s || s.taking || s.current) return;
      if (++s.holds < LEASE_AFTER) return;
      const size = Math.min(s.nextHolds * amount, Math.floor(available / LEASE_SHARE));
      if (!(size >= LEASE_MIN_HOLDS * amount) || !Number.isSafeInteger(size)) return;
      s.taking = true;
      const id = `${d.idPrefix}.${++seq}`;
      const generation = d.generation?.();
      d.take(account, due, id, size).then(
        (r) => {
          s.taking = false;
          // Refused (the credit went meanwhile, or the bucket is stale): ask again after as many holds.
          if (!r.ok) {
            s.holds = 0;
            return;
          }
          const l: Lease = { id, account, due, avail: size, open: true, generation, requests: new Set() };
          open++;
          taken++;
          s.current = l;
          s.nextHolds = Math.min(s.nextHolds * 2, LEASE_MAX_HOLDS);
          leases.add(l);
          sweeping();
          // The window may have ended while the lease was taken.
          if (slots.get(`${due} ${account}`) !== s) closeLease(l);
        },
        (err: unknown) => {
          s.taking = false;
          s.holds = 0;
          d.onError(err instanceof Error ? err : new Error(String(err)));
        },
      );
    },

    leaseOf(account, requestId, due) {
      const x = drawn.get(drawKey(account, requestId));
      return x && x.lease.due === due ? { id: x.lease.id, amount: x.amount } : undefined;
    },

    settled(account, requestId) {
      const key = drawKey(account, requestId);
      const x = drawn.get(key);
      if (!x) return;
      drawn.delete(key);
      x.lease.requests.delete(key);
    },

    get open() {
      return open;
    },

    get remembered() {
      return leases.size;
    },

    get taken() {
      return taken;
    },

    get draws() {
      return draws;
    },

    async close() {
      for (const s of slots.values()) if (s.current) closeLease(s.current);
      slots.clear();
      clearInterval(sweeper);
      sweeper = undefined;
      await Promise.allSettled([...giving]);
    },
  };
}
