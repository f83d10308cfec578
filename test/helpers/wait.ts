// Waits for a condition that an asynchronous event makes true (a pub/sub delivery, a read reaching a
// gate), bounded, instead of a fixed sleep that a loaded CI box can outrun. Returns whether it held.
import { setTimeout as sleep } from 'node:timers/promises';

export async function waitFor(cond: () => boolean, timeoutMs = 1000, stepMs = 5): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() >= deadline) return false;
    await sleep(stepMs);
  }
  return true;
}
