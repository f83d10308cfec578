// Waits for a condition that an asynchronous event makes true (a pub/sub delivery, a read reaching a
// gate, a debit landing), bounded, instead of a fixed sleep that a loaded CI box can outrun. The one
// polling helper of the suite: it throws on timeout, naming what it waited for, so a missed event
// cannot pass unseen.
import { setTimeout as sleep } from 'node:timers/promises';

type Truthy<T> = Exclude<T, undefined | null | false | 0 | ''>;

/**
 * Resolves with the probe's first truthy value (`true` for a plain condition); rejects after
 * `timeoutMs` (a bound that proves delivery, not a speed check). The probe may be async.
 */
export async function waitFor<T>(
  probe: () => T | Promise<T>,
  timeoutMs = 1000,
  what = 'the condition',
  everyMs = 5,
): Promise<Truthy<Awaited<T>>> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (v) return v as Truthy<Awaited<T>>;
    if (Date.now() >= deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(everyMs);
  }
}
