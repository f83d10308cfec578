/** The `shares` section (SPEC §12): links, quotas, the read caches, the S3 bucket and the janitor. */
import { at, list, MAX_TIMER_SECONDS, noUnknown, num, object, str } from '../config/fields.ts';
import { s3Section, type S3Config } from '../config/s3.ts';

export interface SharesConfig {
  readonly urlTtlSeconds: number;
  readonly maxSnapshotBytes: number;
  readonly maxFiles: number;
  readonly cacheTtlMs: number;
  readonly negativeTtlMs: number;
  /** Quotas (SPEC §12): live shares and their snapshot + file bytes per account, creations per key a minute. */
  readonly maxPerAccount: number;
  readonly maxBytesPerAccount: number;
  readonly createPerMinute: number;
  /** File types served inline; every other type gets `content-disposition: attachment`. */
  readonly inlineTypes: readonly string[];
  /** Failed share reads (404/410/422) per client address a minute; past it → 429. */
  readonly failedReadsPerMinute: number;
  readonly s3: S3Config;
  /** Live shares of an account never granted credit (SPEC §13) → 429 share_quota_exceeded. */
  readonly unfundedMaxPerAccount: number;
  /** The orphan sweep and the snapshot migration (docs/shares.md "Storage"): tick, grace, batch. */
  readonly janitorIntervalMs: number;
  readonly orphanGraceSeconds: number;
  readonly migrateBatch: number;
  /** A revoked share answers 410 this long, then 404 (its tombstone expires); seconds. */
  readonly revokedRetentionSeconds: number;
  /** Revoked shares remembered per account (their tombstones); past it the oldest answer 404 early. */
  readonly maxRevokedPerAccount: number;
}

export const SHARES_FIELDS = [
  'url_ttl_seconds',
  'max_snapshot_bytes',
  'max_files',
  'cache_ttl_ms',
  'negative_ttl_ms',
  'max_per_account',
  'max_bytes_per_account',
  'create_per_minute',
  'inline_types',
  'failed_reads_per_minute',
  's3',
  'unfunded_max_per_account',
  'janitor_interval_ms',
  'orphan_grace_seconds',
  'migrate_batch',
  'revoked_retention_seconds',
  'max_revoked_per_account',
] as const;

/**
 * shares.max_files' bound. Every uncached read of a share signs a GET URL per file (~40 µs each on the
 * event loop, more on a loaded box), the create signs a PUT per file, and a share body may carry 4 KiB
 * per file (share-body.ts): 100 files keep a read's signing to a few ms and the body bound at the
 * snapshot + 464 KiB. Unbounded, 10^9 was accepted and made the body bound ~4 TB.
 */
export const MAX_FILES = 100;

/**
 * shares.max_per_account's bound. The console's shares page reads the account's whole share index (one
 * field per live share, sorted by creation to list the newest 200): on real Redis 10,000 live shares held
 * the event loop ~40 ms per page load, 100,000 ~280 ms (and Redis ~25–50 ms per HGETALL). A member
 * publishes up to the quota, so its bound is the bound of that read.
 */
export const MAX_SHARES_PER_ACCOUNT = 100_000;

/** Share file types a browser may render inline from the S3 origin: raster images only, never HTML or SVG. */
const DEFAULT_INLINE_TYPES = ['image/png', 'image/jpeg', 'image/gif', 'image/webp'];

/** Compiles `shares`; `env` supplies the AWS_* fallbacks of `shares.s3`. */
export function sharesSection(v: unknown, env: NodeJS.ProcessEnv): SharesConfig {
  const shares = object(v, 'shares', true);
  noUnknown(shares, 'shares', SHARES_FIELDS);
  return {
    urlTtlSeconds: num(shares.url_ttl_seconds, 'shares.url_ttl_seconds', { fallback: 900, min: 2, max: 604_800, integer: true }),
    maxSnapshotBytes: num(shares.max_snapshot_bytes, 'shares.max_snapshot_bytes', { fallback: 1024 * 1024, min: 1024, integer: true }),
    maxFiles: num(shares.max_files, 'shares.max_files', { fallback: 20, min: 0, max: MAX_FILES, integer: true }),
    cacheTtlMs: num(shares.cache_ttl_ms, 'shares.cache_ttl_ms', { fallback: 10_000, min: 1, max: 60_000 }),
    negativeTtlMs: num(shares.negative_ttl_ms, 'shares.negative_ttl_ms', { fallback: 2_000, min: 1, max: 60_000 }),
    maxPerAccount: num(shares.max_per_account, 'shares.max_per_account', {
      fallback: 10_000,
      min: 1,
      max: MAX_SHARES_PER_ACCOUNT,
      integer: true,
    }),
    maxBytesPerAccount: num(shares.max_bytes_per_account, 'shares.max_bytes_per_account', {
      fallback: 1024 ** 3,
      min: 1024,
      integer: true,
    }),
    createPerMinute: num(shares.create_per_minute, 'shares.create_per_minute', { fallback: 60, min: 1, integer: true }),
    inlineTypes: list(shares.inline_types ?? DEFAULT_INLINE_TYPES, 'shares.inline_types').map((v, i) =>
      str(v, at('shares.inline_types', i)).toLowerCase(),
    ),
    failedReadsPerMinute: num(shares.failed_reads_per_minute, 'shares.failed_reads_per_minute', { fallback: 120, min: 1, integer: true }),
    s3: s3Section(shares.s3, 'shares.s3', env, 'shares'),
    unfundedMaxPerAccount: num(shares.unfunded_max_per_account, 'shares.unfunded_max_per_account', {
      fallback: 100,
      min: 0,
      integer: true,
    }),
    janitorIntervalMs: num(shares.janitor_interval_ms, 'shares.janitor_interval_ms', {
      fallback: 10_000,
      min: 10,
      max: 3_600_000,
      integer: true,
    }),
    orphanGraceSeconds: num(shares.orphan_grace_seconds, 'shares.orphan_grace_seconds', {
      fallback: 300,
      min: 0,
      max: MAX_TIMER_SECONDS,
      integer: true,
    }),
    migrateBatch: num(shares.migrate_batch, 'shares.migrate_batch', { fallback: 100, min: 1, max: 10_000, integer: true }),
    revokedRetentionSeconds: num(shares.revoked_retention_seconds, 'shares.revoked_retention_seconds', {
      fallback: 7 * 24 * 3600,
      min: 1,
      max: 366 * 24 * 3600,
      integer: true,
    }),
    maxRevokedPerAccount: num(shares.max_revoked_per_account, 'shares.max_revoked_per_account', {
      fallback: 1000,
      min: 0,
      max: 1_000_000,
      integer: true,
    }),
  };
}
