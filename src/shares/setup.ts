/**
 * Builds the shares capability from config, store, clock and metrics: the record cache (subscribed
 * to invalidations), the S3 URL builder (absent without S3), the service and the body limits that
 * the public and admin routes share.
 */
import type { Config } from '../config/schema.ts';
import type { Metrics } from '../obs/metrics.ts';
import type { Store } from '../store/types.ts';
import { createFileUrls } from './file-urls.ts';
import { createShareCache } from './share-cache.ts';
import type { ShareBodyLimits } from './share-body.ts';
import { createShareService, type ShareService } from './service.ts';
import { createFailureWindow } from '../auth/failure-window.ts';

export interface Shares {
  service: ShareService;
  limits: ShareBodyLimits;
}

/** One shares capability per gateway. */
export function createShares(d: {
  config: Config['shares'];
  store: Store;
  now: () => number;
  metrics: Pick<Metrics, 'cache' | 'presign'>;
}): Shares {
  const c = d.config;
  const lookups = {
    hit: d.metrics.cache.labels({ cache: 'shares', outcome: 'hit' }),
    miss: d.metrics.cache.labels({ cache: 'shares', outcome: 'miss' }),
  };
  const cache = createShareCache({
    store: d.store,
    ttlMs: c.cacheTtlMs,
    negativeTtlMs: c.negativeTtlMs,
    onLookup: (o) => lookups[o].inc(),
  });
  const files = createFileUrls({
    s3: c.s3,
    ttlSeconds: c.urlTtlSeconds,
    now: d.now,
    inlineTypes: c.inlineTypes,
    observe: (method, s) => d.metrics.presign.observe({ method }, s),
  });
  return {
    service: createShareService({
      store: d.store,
      cache,
      files,
      now: d.now,
      quota: { maxCount: c.maxPerAccount, maxBytes: c.maxBytesPerAccount },
      createsPerKey: createFailureWindow({ perWindow: c.createPerMinute, now: d.now }),
    }),
    limits: { maxSnapshotBytes: c.maxSnapshotBytes, maxFiles: c.maxFiles, filesEnabled: files !== undefined },
  };
}
