/**
 * Hold buckets (docs/ledger.md): every hold of an account whose expiry falls in the same bucket of time
 * shares one Redis hash, and the reaper finds buckets, not requests. A bucket is due when its last
 * possible expiry has passed, so a hold is released at the first reaper run at or after
 * ⌈expiry / bucket⌉ · bucket: at most one bucket later than its exact expiry.
 */

/** The bucket size of tests and of a store built without one: 1 s. */
export const DEFAULT_BUCKET_MS = 1000;

/**
 * The bucket size for a hold TTL: a 60th of it in whole seconds, from 1 s to 10 s (10 s with the default
 * 660 s TTL). Larger buckets mean fewer index members and reaper runs for accounts with few requests a
 * second (one bucket serves every request of its span); the release of a dead process's hold comes at
 * most 1/60 of its TTL later. The size follows the config (`upstream.total_timeout_ms`,
 * `credit.hold_margin_seconds`), so instances and restarts may differ: the reaper reads due times from the
 * index, and a settle carries the due time of its hold's bucket (`SettleInput.holdBucketDue`, spool lines
 * included), so a settle applied by another process — the next start replaying the spool, `tollgate spool
 * replay`, another pod — looks in the bucket the hold was taken in, not in one of its own size.
 */
export function bucketMsFor(holdTtlMs: number): number {
  return Math.min(10_000, Math.max(1000, Math.floor(holdTtlMs / 60_000) * 1000));
}

/** The due time of the bucket a hold expiring at `expiresAtMs` belongs to: ⌈expiresAtMs / bucketMs⌉ · bucketMs. */
export function bucketDue(expiresAtMs: number, bucketMs: number): number {
  return Math.ceil(expiresAtMs / bucketMs) * bucketMs;
}

/**
 * Where a settle looks for its hold: the bucket its hold was taken in, as the holding process named it
 * (`holdBucketDue`; a spool line read back is not type-checked, so only a positive whole number counts);
 * else the bucket of the expiry the hold was taken with, at this process's size (a settle spooled by an
 * older version). A caller that says neither (no hold, or an older caller) gets a bucket fixed by the
 * settle's own `ts`, so repeats of the same settle still meet in one place.
 */
export function settleBucketDue(
  i: { holdBucketDue?: number | undefined; holdExpiresAtMs?: number | undefined; ts: string },
  holdTtlMs: number,
  bucketMs: number,
): number {
  const carried = i.holdBucketDue;
  if (carried !== undefined && Number.isSafeInteger(carried) && carried > 0) return carried;
  return bucketDue(i.holdExpiresAtMs ?? Date.parse(i.ts) + holdTtlMs, bucketMs);
}
