/**
 * Failures per client address in fixed windows, synchronous and bounded: the failed-auth limiter, the
 * admin guard, the console's logins and the share read path count failures without a promise per
 * request. Past `perWindow` failures an address is refused until its window ends. At most
 * `maxAddresses` are remembered (lru-cache): an attacker spraying addresses evicts the oldest entries,
 * never grows memory. IPv6 addresses count by their /64 (addressKey): one holder of a /64 (a single
 * subscriber's allocation) would otherwise have 2^64 fresh addresses to fail from.
 */
import { isIP } from 'node:net';
import { LRUCache } from 'lru-cache';

export interface FailureWindow {
  /** Milliseconds until the address may try again, 0 when it is not blocked. */
  blockedFor(address: string): number;
  /** Counts one failure; returns the wait in ms when the address is now past the limit, else 0. */
  fail(address: string): number;
}

/** Addresses remembered by default: ~150–220 B of entry and key each (measured), so ~15–22 MB at worst. */
export const MAX_ADDRESSES = 100_000;

/**
 * What a failure is counted against: an IPv4 address (or anything that is not an IPv6 address) as is,
 * an IPv6 address as its /64, written `2001:db8:0:1::/64` (groups without leading zeros, zone dropped).
 */
export function addressKey(address: string): string {
  if (isIP(address) !== 6) return address;
  const zone = address.indexOf('%');
  const a = zone < 0 ? address : address.slice(0, zone);
  const gap = a.indexOf('::');
  const groups = (s: string) => (s === '' ? [] : s.split(':'));
  let head: string[];
  if (gap < 0) head = groups(a);
  else {
    head = groups(a.slice(0, gap));
    // A trailing dotted IPv4 part stands for two groups.
    const tail = groups(a.slice(gap + 2)).flatMap((g) => (g.includes('.') ? ['0', '0'] : [g]));
    head = [...head, ...Array<string>(8 - head.length - tail.length).fill('0'), ...tail];
  }
  return `${head
    .slice(0, 4)
    .map((g) => parseInt(g, 16).toString(16))
    .join(':')}::/64`;
}

export function createFailureWindow(o: { perWindow: number; windowMs?: number; now?: () => number; maxAddresses?: number }): FailureWindow {
  const windowMs = o.windowMs ?? 60_000;
  const now = o.now ?? Date.now;
  const seen = new LRUCache<string, { count: number; resetAt: number }>({ max: o.maxAddresses ?? MAX_ADDRESSES });
  const current = (key: string) => {
    const e = seen.get(key);
    return e && now() < e.resetAt ? e : undefined;
  };
  return {
    blockedFor(address) {
      const e = current(addressKey(address));
      return e && e.count >= o.perWindow ? e.resetAt - now() : 0;
    },
    fail(address) {
      const key = addressKey(address);
      let e = current(key);
      if (!e) seen.set(key, (e = { count: 0, resetAt: now() + windowMs }));
      e.count++;
      return e.count > o.perWindow ? e.resetAt - now() : 0;
    },
  };
}
