/**
 * Hold buckets (docs/ledger.md): every hold of an account whose expiry falls in the same second shares
 * one Redis hash, and the reaper finds buckets, not requests. A bucket is due when its last possible
 * expiry has passed, so a hold is released at the first reaper run at or after ⌈expiry / 1 s⌉ — at most
 * one second later than its exact expiry, against a hold TTL of minutes (upstream.total_timeout_ms +
 * credit.hold_margin_seconds).
 */
export const BUCKET_MS = 1000;

/** The due time of the bucket a hold expiring at `expiresAtMs` belongs to: ⌈expiresAtMs / BUCKET_MS⌉ · BUCKET_MS. */
export function bucketDue(expiresAtMs: number): number {
  return Math.ceil(expiresAtMs / BUCKET_MS) * BUCKET_MS;
}

/**
 * Where a settle looks for its hold: the bucket of the expiry the hold was taken with. A caller that
 * does not say (no hold, or an older caller) gets a bucket fixed by the settle's own `ts`, so repeats of
 * the same settle still meet in one place.
 */
export function settleBucketDue(holdExpiresAtMs: number | undefined, ts: string, holdTtlMs: number): number {
  return bucketDue(holdExpiresAtMs ?? Date.parse(ts) + holdTtlMs);
}
