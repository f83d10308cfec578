/**
 * Requests in flight per key (SPEC §12: limits.max_concurrent_per_key, default 64 → 429
 * concurrency_limit_exceeded). Without it one key can hold every socket, stream and upstream slot the
 * process has. Per process, in memory: a count per key id, entered after authentication and left when
 * the response closes (normal end, error or client abort alike), so no path can leak a slot.
 */
import type { ServerResponse } from 'node:http';
import { GatewayError } from '../http/errors.ts';

export interface Concurrency {
  /** Counts one request of `keyId` until `res` closes; throws 429 past the limit. */
  enter(keyId: string, res: ServerResponse): void;
  /** Requests in flight for a key (tests, metrics). */
  inFlight(keyId: string): number;
}

export function createConcurrency(max: number): Concurrency {
  const counts = new Map<string, number>();
  return {
    enter(keyId, res) {
      const n = counts.get(keyId) ?? 0;
      if (n >= max) {
        throw new GatewayError(
          'concurrency_limit_exceeded',
          `This API key already has ${max} requests in flight; wait for one to finish.`,
          {
            headers: { 'retry-after': '1', 'retry-after-ms': '1000' },
          },
        );
      }
      counts.set(keyId, n + 1);
      res.once('close', () => {
        const left = (counts.get(keyId) ?? 1) - 1;
        if (left <= 0) counts.delete(keyId);
        else counts.set(keyId, left);
      });
    },
    inFlight: (keyId) => counts.get(keyId) ?? 0,
  };
}
