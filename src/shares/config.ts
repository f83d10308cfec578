/** The `shares` section (SPEC §12): links, quotas, the read caches, the S3 bucket and the janitor. */
import { at, list, MAX_TIMER_SECONDS, noUnknown, num, object, str } from '../config/fields.ts';
import { s3Section, type S3Config } from '../config/s3.ts';
import { ConfigError } from '../config/errors.ts';

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

/** Every snapshot and file list object call (put, get, delete, HEAD) is bounded by this (snapshot-objects.ts). */
export const SNAPSHOT_OBJECT_TIMEOUT_MS = 5_000;

/**
 * shares.orphan_grace_seconds' floor, from store.command_timeout_ms. The sweep takes an intent older than
 * the grace whose record does not exist for a create that failed, and deletes its objects and gives its
 * quota back: a create still in flight must never look like that. From the time its intent is stamped to
 * its record landing, a create makes 3 Redis calls (the intent, the quota, the record), each bounded by
 * the command timeout and retried at most once on a Cluster (its timeout started again), and writes its
 * objects (both at once, bounded by SNAPSHOT_OBJECT_TIMEOUT_MS): 5 s + 6 × the command timeout. Plus
 * 10 s for the rest: the clocks of the instance that stamped the intent and the one that sweeps (NTP keeps
 * them well under a second apart), event-loop stalls of a loaded instance, credentials the SDK fetches for
 * signing. A revoke is covered too: the sweep only clears an intent whose record is live, and a revoke
 * stamps its intent 2 calls before its tombstone. Before, the grace could be 0: with it a sweep deleted
 * the objects of creates in flight and gave their quota back while their records landed anyway (a
 * review's run: 35 of 40 live shares never counted against their account).
 */
export function minOrphanGraceSeconds(commandTimeoutMs: number): number {
  return Math.min(MAX_TIMER_SECONDS, Math.ceil((SNAPSHOT_OBJECT_TIMEOUT_MS + 6 * commandTimeoutMs + 10_000) / 1000));
}

/** Share file types a browser may render inline from the S3 origin: raster images only, never HTML or SVG. */
const DEFAULT_INLINE_TYPES = ['image/png', 'image/jpeg', 'image/gif', 'image/webp'];

/**
 * Compiles `shares`; `env` supplies the AWS_* fallbacks of `shares.s3`, `commandTimeoutMs`
 * (store.command_timeout_ms) the floor of `orphan_grace_seconds`.
 */
export function sharesSection(v: unknown, env: NodeJS.ProcessEnv, commandTimeoutMs: number): SharesConfig {
  const minGrace = minOrphanGraceSeconds(commandTimeoutMs);
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
    orphanGraceSeconds: orphanGrace(shares.orphan_grace_seconds, minGrace),
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

function orphanGrace(v: unknown, min: number): number {
  const n = num(v, 'shares.orphan_grace_seconds', { fallback: Math.max(300, min), max: MAX_TIMER_SECONDS, integer: true });
  if (n < min) {
    throw new ConfigError(
      'shares.orphan_grace_seconds',
      `must be >= ${min}: a create may take S3's 5 s timeout plus 6 × store.command_timeout_ms, and 10 s more for clocks and stalls (docs/shares.md "Storage"); a sweep that saw a create still in flight would delete its objects under it`,
    );
  }
  return n;
}
