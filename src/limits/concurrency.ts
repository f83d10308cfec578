/**
 * Requests in flight per key and per account (SPEC §12, §13: limits.max_concurrent_per_key, default 64,
 * and limits.max_concurrent_per_account, default 256 → 429 concurrency_limit_exceeded, with
 * `x-ratelimit-scope: key | account`). Without them one key — or one account's many keys — can hold
 * every socket, stream and upstream slot the process has. Per process, in memory: a count per key id
 * and per account, entered after authentication and before the body is read, left when the response
 * closes (normal end, error or client abort alike), so no path can leak a slot. A request whose upstream
 * attempt was abandoned in the pool's queue passes its slot on to that attempt (`hold`) until undici lets
 * go of it: otherwise a key could pile up any number of abandoned requests in the queue.
 */
import type { ServerResponse } from 'node:http';
import { GatewayError } from '../http/errors.ts';

export interface Concurrency {
  /** Counts one request of `keyId` (of `account`) until `res` closes; throws 429 past either limit. */
  enter(keyId: string, account: string, res: ServerResponse): void;
  /**
   * Counts one more of `keyId` (of `account`) until `until` settles, past the limits: the work of an ended
   * request that still occupies the upstream's queue (routes/metered.ts). Never throws.
   */
  hold(keyId: string, account: string, until: Promise<unknown>): void;
  /** Requests in flight for a key (tests, metrics). */
  inFlight(keyId: string): number;
  /** Requests in flight for an account. */
  inFlightAccount(account: string): number;
}

function full(scope: 'key' | 'account', max: number): GatewayError {
  const who = scope === 'key' ? 'This API key' : "This API key's account";
  return new GatewayError('concurrency_limit_exceeded', `${who} already has ${max} requests in flight; wait for one to finish.`, {
    headers: { 'retry-after': '1', 'retry-after-ms': '1000', 'x-ratelimit-scope': scope },
  });
}

function leave(counts: Map<string, number>, id: string): void {
  const left = (counts.get(id) ?? 1) - 1;
  if (left <= 0) counts.delete(id);
  else counts.set(id, left);
}

export function createConcurrency(max: number, maxPerAccount = Infinity): Concurrency {
  const keys = new Map<string, number>();
  const accounts = new Map<string, number>();
  return {
    enter(keyId, account, res) {
      const n = keys.get(keyId) ?? 0;
      if (n >= max) throw full('key', max);
      const a = accounts.get(account) ?? 0;
      if (a >= maxPerAccount) throw full('account', maxPerAccount);
      keys.set(keyId, n + 1);
      accounts.set(account, a + 1);
      let left = false;
      const release = () => {
        if (left) return;
        left = true;
        leave(keys, keyId);
        leave(accounts, account);
      };
      res.once('close', release);
      // A client gone while it was authenticated: its 'close' was emitted already and would never come again.
      if (res.destroyed) release();
    },
    hold(keyId, account, until) {
      keys.set(keyId, (keys.get(keyId) ?? 0) + 1);
      accounts.set(account, (accounts.get(account) ?? 0) + 1);
      const release = () => {
        leave(keys, keyId);
        leave(accounts, account);
      };
      until.then(release, release);
    },
    inFlight: (keyId) => keys.get(keyId) ?? 0,
    inFlightAccount: (account) => accounts.get(account) ?? 0,
  };
}
