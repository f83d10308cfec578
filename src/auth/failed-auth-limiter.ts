/**
 * Failed authentications per client address (SPEC §2a): missing and invalid attempts count; past the
 * limit (default 30 a minute) such attempts answer 429 without a store lookup, so keys cannot be
 * guessed at line rate. Per instance, in memory: a guesser spread over N instances gets N × the limit,
 * which is still ~10^50 years per key at 187 bits.
 */
import { RateLimiterMemory, RateLimiterRes } from 'rate-limiter-flexible';

export interface FailedAuthLimiter {
  /** Milliseconds until the address may try again, or 0 when it is not blocked. */
  blockedFor(address: string): Promise<number>;
  /** Counts one failure; returns the wait in ms when this failure crossed the limit, else 0. */
  fail(address: string): Promise<number>;
}

/** A per-address limiter of `perMinute` failures in a fixed one-minute window. */
export function createFailedAuthLimiter(perMinute: number): FailedAuthLimiter {
  const limiter = new RateLimiterMemory({ points: perMinute, duration: 60 });
  return {
    async blockedFor(address) {
      const res = await limiter.get(address);
      return res && res.consumedPoints >= perMinute ? res.msBeforeNext : 0;
    },
    async fail(address) {
      try {
        await limiter.consume(address);
        return 0;
      } catch (e) {
        if (e instanceof RateLimiterRes) return e.msBeforeNext;
        throw e;
      }
    },
  };
}
