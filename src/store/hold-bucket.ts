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
 * most 1/60 of its TTL later. Only the process that holds and settles a request computes its bucket (the
 * reaper reads due times from the index), so instances may differ.
 */
export function bucketMsFor(holdTtlMs: number): number {
  return Math.min(10_000, Math.max(1000, Math.floor(holdTtlMs / 60_000) * 1000));
}

/** The due time of the bucket a hold expiring at `expiresAtMs` belongs to: ⌈expiresAtMs / bucketMs⌉ · bucketMs. */
export function bucketDue(expiresAtMs: number, bucketMs: number): number {
  return Math.ceil(expiresAtMs / bucketMs) * bucketMs;
}

/**
 * Where a settle looks for its hold: the bucket of the expiry the hold was taken with. A caller that
 * does not say (no hold, or an older caller) gets a bucket fixed by the settle's own `ts`, so repeats of
 * the same settle still meet in one place.
 */
export function settleBucketDue(holdExpiresAtMs: number | undefined, ts: string, holdTtlMs: number, bucketMs: number): number {
  return bucketDue(holdExpiresAtMs ?? Date.parse(ts) + holdTtlMs, bucketMs);
}
