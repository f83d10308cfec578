/**
 * Failures per client address in fixed windows, synchronous and bounded: the admin guard and the share
 * read path count failures without a promise per request. Past `perWindow` failures an address is
 * refused until its window ends. At most `maxAddresses` are remembered (lru-cache): an attacker
 * spraying addresses evicts the oldest entries, never grows memory.
 */
import { LRUCache } from 'lru-cache';

export interface FailureWindow {
  /** Milliseconds until the address may try again, 0 when it is not blocked. */
  blockedFor(address: string): number;
  /** Counts one failure; returns the wait in ms when the address is now past the limit, else 0. */
  fail(address: string): number;
}

export function createFailureWindow(o: { perWindow: number; windowMs?: number; now?: () => number; maxAddresses?: number }): FailureWindow {
  const windowMs = o.windowMs ?? 60_000;
  const now = o.now ?? Date.now;
  const seen = new LRUCache<string, { count: number; resetAt: number }>({ max: o.maxAddresses ?? 100_000 });
  const current = (address: string) => {
    const e = seen.get(address);
    return e && now() < e.resetAt ? e : undefined;
  };
  return {
    blockedFor(address) {
      const e = current(address);
      return e && e.count >= o.perWindow ? e.resetAt - now() : 0;
    },
    fail(address) {
      let e = current(address);
      if (!e) seen.set(address, (e = { count: 0, resetAt: now() + windowMs }));
      e.count++;
      return e.count > o.perWindow ? e.resetAt - now() : 0;
    },
  };
}
