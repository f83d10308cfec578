/**
 * Failed authentications per client address (SPEC §2a): missing and invalid attempts count; past the
 * limit (default 30 a minute) such attempts answer 429 without a store lookup, so keys cannot be
 * guessed at line rate. Per instance, in memory: a guesser spread over N instances gets N × the limit,
 * which is still ~10^50 years per key at 187 bits.
 *
 * The same bounded window as the admin guard's and the share reads' (failure-window.ts): at most
 * MAX_ADDRESSES addresses are remembered, the least recently failing evicted first, and IPv6 addresses
 * count by their /64. (It used rate-limiter-flexible's in-memory limiter before, which keeps every
 * address seen in a window: ~400 B each, unbounded under a spray of source addresses.)
 */
import { createFailureWindow, type FailureWindow } from './failure-window.ts';

/** blockedFor: ms until the address may try again (0: not blocked); fail: counts one, ms to wait once past the limit. */
export type FailedAuthLimiter = FailureWindow;

/** A per-address limiter of `perMinute` failures in a fixed one-minute window. */
export function createFailedAuthLimiter(perMinute: number, o: { now?: () => number; maxAddresses?: number } = {}): FailedAuthLimiter {
  return createFailureWindow({ perWindow: perMinute, windowMs: 60_000, ...o });
}
