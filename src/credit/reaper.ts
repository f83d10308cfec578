/**
 * The hold reaper (SPEC §4): every instance periodically releases holds whose expiry has passed (a
 * process that died mid-request leaves its hold), each with a `hold_expired` ledger entry. Running on
 * every instance is safe: the per-hold Lua script is atomic and idempotent.
 */
import type { Logger } from '../obs/logger.ts';
import type { Store } from '../store/types.ts';

export function startReaper(d: { store: Store; now: () => number; intervalMs: number; logger: Logger; onReaped?: (n: number) => void }): {
  stop(): void;
  runOnce(): Promise<number>;
} {
  let running = false;
  async function runOnce(): Promise<number> {
    if (running) return 0;
    running = true;
    try {
      const t = d.now();
      const n = await d.store.reapExpiredHolds(t, new Date(t).toISOString());
      if (n > 0) {
        d.onReaped?.(n);
        d.logger.warn({ reaped: n }, 'released expired credit holds');
      }
      return n;
    } catch (err) {
      d.logger.warn({ err }, 'hold reaper failed; will retry');
      return 0;
    } finally {
      running = false;
    }
  }
  const timer = setInterval(() => void runOnce(), d.intervalMs);
  timer.unref();
  return { stop: () => clearInterval(timer), runOnce };
}
