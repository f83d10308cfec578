// How long /healthz takes to answer, probed back to back: the measured victim of the stall tests. A
// shared 2-core box steals the CPU for 100 ms and more at times, so a stall test compares the worst probe
// during the attack with the worst over a quiet baseline taken the same way, never with a bare constant.
import { setTimeout as sleep } from 'node:timers/promises';

/** Wall time of one GET /healthz on a fresh connection. */
export async function healthMs(adminUrl: string): Promise<number> {
  const t0 = performance.now();
  const res = await fetch(`${adminUrl}/healthz`, { headers: { connection: 'close' } });
  await res.arrayBuffer();
  return performance.now() - t0;
}

/** /healthz probed back to back until `until` settles (at most 2,000 probes): the slowest answer. */
export async function worstHealth(adminUrl: string, until: Promise<unknown>): Promise<{ worst: number; probes: number }> {
  let done = false;
  void until.finally(() => (done = true));
  let worst = 0;
  let probes = 0;
  while (!done && probes < 2_000) {
    worst = Math.max(worst, await healthMs(adminUrl));
    probes++;
    await sleep(2);
  }
  return { worst, probes };
}
