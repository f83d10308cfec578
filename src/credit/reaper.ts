/**
 * The hold reaper (SPEC §4): every instance periodically releases holds whose expiry has passed (a
 * process that died mid-request leaves its hold), each with a `hold_expired` ledger entry. Running on
 * every instance is safe: the per-hold Lua script is atomic and idempotent.
 */
import type { Logger } from '../obs/logger.ts';
import type { Store } from '../store/types.ts';

export function startReaper(d: {
  store: Store;
  now: () => number;
  intervalMs: number;
  logger: Logger;
  onReaped?: (n: number) => void;
  /** Each pass's outcome: whether the store answered (the `tollgate_store_up` gauge). */
  onStoreUp?: (up: boolean) => void;
}): {
  stop(): void;
  runOnce(): Promise<number>;
} {
  let running = false;
  // Logged on a change only (issue 27: a stack trace every 5 s while Redis was down): one line when a
  // pass fails, one when passes succeed again.
  let failing = false;
  async function runOnce(): Promise<number> {
    if (running) return 0;
    running = true;
    try {
      const t = d.now();
      const n = await d.store.reapExpiredHolds(t, new Date(t).toISOString());
      d.onStoreUp?.(true);
      if (failing) d.logger.info('hold reaper: the store answers again');
      failing = false;
      if (n > 0) {
        d.onReaped?.(n);
        d.logger.warn({ reaped: n }, 'released expired credit holds');
      }
      return n;
    } catch (err) {
      d.onStoreUp?.(false);
      if (!failing)
        d.logger.warn(
          { err: (err as Error).message },
          `hold reaper failed; retrying every ${d.intervalMs} ms (logged again once it succeeds)`,
        );
      failing = true;
      return 0;
    } finally {
      running = false;
    }
  }
  const timer = setInterval(() => void runOnce(), d.intervalMs);
  timer.unref();
  // A first pass at once, so tollgate_store_up says something from boot on.
  void runOnce();
  return { stop: () => clearInterval(timer), runOnce };
}
