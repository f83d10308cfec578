/**
 * Builds the shares capability from config, store, clock and metrics: the snapshot objects (S3 with
 * Redis, memory with the embedded store), the cache of ready bodies (subscribed to invalidations), the
 * S3 URL builder (absent without S3), the service, the background janitor and the body limits that the
 * public and admin routes share.
 */
import type { Config } from '../config/schema.ts';
import type { Logger } from '../obs/logger.ts';
import type { Metrics } from '../obs/metrics.ts';
import type { Store } from '../store/types.ts';
import { createS3Client } from '../s3/client.ts';
import { createFileUrls, filesConfigured } from './file-urls.ts';
import { createShareCache } from './share-cache.ts';
import type { ShareBodyLimits } from './share-body.ts';
import { createShareService, type ShareService } from './service.ts';
import { createFailureWindow } from '../auth/failure-window.ts';
import { createMemorySnapshotObjects, createS3SnapshotObjects, type SnapshotObjects } from './snapshot-objects.ts';
import { createShareJanitor, type ShareJanitor } from './janitor.ts';

export interface Shares {
  service: ShareService;
  limits: ShareBodyLimits;
  /** The orphan sweep and the migration; undefined when there is no object store to work on. */
  janitor: ShareJanitor | undefined;
}

/**
 * Where snapshots go: the embedded store keeps them in memory (lost on restart, like the rest of it);
 * Redis never holds them (SPEC §13), so with Redis they need `shares.s3`, else publishing answers 503.
 */
function snapshotObjects(c: Config['shares'], store: Store): SnapshotObjects | undefined {
  if (store.kind === 'memory') return createMemorySnapshotObjects(store.snapshotTexts);
  if (!filesConfigured(c.s3)) return undefined;
  return createS3SnapshotObjects(createS3Client(c.s3), c.s3.bucket);
}

/** One shares capability per gateway. */
export function createShares(d: {
  config: Config['shares'];
  store: Store;
  now: () => number;
  metrics: Pick<Metrics, 'cache' | 'presign' | 'shareObjects'>;
  logger?: Logger;
}): Shares {
  const c = d.config;
  const lookups = {
    hit: d.metrics.cache.labels({ cache: 'shares', outcome: 'hit' }),
    miss: d.metrics.cache.labels({ cache: 'shares', outcome: 'miss' }),
  };
  const objects = snapshotObjects(c, d.store);
  if (!objects) {
    d.logger?.warn(
      'shares.s3 is not configured: publishing shares is refused (503 store_unavailable), since Redis keeps no snapshots; ' +
        'shares stored by earlier versions stay readable. Set shares.s3 (endpoint or credentials) to publish.',
    );
  }
  const cache = createShareCache({
    store: d.store,
    objects,
    ttlMs: c.cacheTtlMs,
    negativeTtlMs: c.negativeTtlMs,
    onLookup: (o) => lookups[o].inc(),
    onMissing: (slug, reason) => {
      d.metrics.shareObjects.inc({ outcome: reason === 'checksum' ? 'corrupt' : 'missing' });
      // The slug's first characters only: enough to find it in the bucket, not enough to read the share.
      d.logger?.error({ share: `${slug.slice(0, 6)}…`, reason }, 'share record without a readable snapshot object');
    },
  });
  const files = createFileUrls({
    s3: c.s3,
    ttlSeconds: c.urlTtlSeconds,
    now: d.now,
    inlineTypes: c.inlineTypes,
    observe: (method, s) => d.metrics.presign.observe({ method }, s),
  });
  const janitor =
    objects && d.logger
      ? createShareJanitor({
          store: d.store,
          objects,
          logger: d.logger,
          now: d.now,
          intervalMs: c.janitorIntervalMs,
          graceMs: c.orphanGraceSeconds * 1000,
          revokedKeep: { retentionMs: c.revokedRetentionSeconds * 1000, maxPerAccount: c.maxRevokedPerAccount },
          batch: c.migrateBatch,
          onReport: (outcome, n) => d.metrics.shareObjects.inc({ outcome }, n),
        })
      : undefined;
  return {
    service: createShareService({
      store: d.store,
      cache,
      objects,
      files,
      now: d.now,
      quota: { maxCount: c.maxPerAccount, maxBytes: c.maxBytesPerAccount, unfundedMaxCount: c.unfundedMaxPerAccount },
      revokedKeep: { retentionMs: c.revokedRetentionSeconds * 1000, maxPerAccount: c.maxRevokedPerAccount },
      createsPerKey: createFailureWindow({ perWindow: c.createPerMinute, now: d.now }),
      onCleanupFailed: (slug, err) =>
        d.logger?.warn({ err, share: `${slug.slice(0, 6)}…` }, 'a share create or revoke could not clean up; the orphan sweep will'),
    }),
    limits: { maxSnapshotBytes: c.maxSnapshotBytes, maxFiles: c.maxFiles, filesEnabled: files !== undefined },
    janitor,
  };
}
