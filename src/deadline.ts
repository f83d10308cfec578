/** Waiting on work with a bound, as the shutdown does at each step (gateway.ts, credit.ts, usage.ts). */

/** Resolves true when `p` settled (fulfilled or rejected) within `ms`, false otherwise (`p` keeps running). */
export async function within(p: Promise<unknown> | undefined, ms: number): Promise<boolean> {
  if (!p) return true;
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<boolean>((r) => (timer = setTimeout(r, Math.max(0, ms), false)));
  try {
    return await Promise.race([
      p.then(
        () => true,
        () => true,
      ),
      late,
    ]);
  } finally {
    clearTimeout(timer);
  }
}
