/**
 * Publishing, reading and revoking shares (SPEC §1.4, §2a), independent of HTTP routing: the public
 * and admin routes call the same three operations.
 *
 * - create: intent (the orphan sweep's index), quota, upload URLs, snapshot object and file list object
 *   (the Redis record keeps only the number of files: no user content in Redis, SPEC §13), then the record;
 *   a failure at any step stores nothing (the object of a record that could not be written is deleted,
 *   here or by the sweep, shares/janitor.ts) and gives the quota back. Then prime this instance's cache.
 * - read: cache of ready bodies, then record + object (coalesced); a cache hit parses nothing, signs
 *   only file links whose cached URL is past half its life, and makes no store call.
 * - revoke: owner check against the store (another account gets the same 404 as an unknown slug),
 *   mark revoked in the store, here at once, then everywhere through pub/sub (≤ 1 s).
 */
import { GatewayError } from '../http/errors.ts';
import { DEFAULT_REVOKED_KEEP, type RevokedShareKeep, type ShareQuotaLimits, type ShareRecord, type Store } from '../store/types.ts';
import { newSlug } from './slug.ts';
import { missingObject, type ShareCache } from './share-cache.ts';
import type { SnapshotObjects } from './snapshot-objects.ts';
import { unsignedLinks, type FileUrls, type Upload } from './file-urls.ts';
import type { ShareBody } from './share-body.ts';
import type { FailureWindow } from '../auth/failure-window.ts';

/** The 201 body of a create. */
export interface CreatedShare {
  slug: string;
  created_at: string;
  uploads: Upload[];
}

export interface ShareService {
  /**
   * Stores a new share for `account`; returns its slug and one upload instruction per file. `keyId` (a
   * key's create, not the operator's) counts against shares.create_per_minute.
   */
  create(account: string, body: Pick<ShareBody, 'snapshotText' | 'files'>, keyId?: string): Promise<CreatedShare>;
  /** The 200 body (JSON text) of a live share; throws 404 share_not_found / 410 share_revoked. */
  read(slug: string): Promise<string>;
  /** Revokes (idempotent). `account` set = only that account's shares (else 404); undefined = admin. */
  revoke(slug: string, account: string | undefined): Promise<void>;
  /** The snapshot text of a listed share (the console's titles); null when it cannot be read now. */
  snapshotOf(record: ShareRecord): Promise<string | null>;
}

export interface ShareServiceDeps {
  store: Store;
  cache: ShareCache;
  /** Where snapshots go; undefined (Redis without shares.s3): publishing answers 503. */
  objects: SnapshotObjects | undefined;
  /** Undefined when no S3 is configured. */
  files: FileUrls | undefined;
  now: () => number;
  /** Slug source; a seam for tests. */
  slug?: () => string;
  /** Per account: live shares and their bytes (SPEC §12). Absent: unlimited (unit tests). */
  quota?: ShareQuotaLimits;
  /** How long and how many revoked shares answer 410 (shares.revoked_retention_seconds, max_revoked_per_account). */
  revokedKeep?: RevokedShareKeep;
  /** A cleanup that failed (left to the orphan sweep); for the log. */
  onCleanupFailed?: (slug: string, err: unknown) => void;
  /** Creations per key in a fixed minute (a counter per key id; the operator's creates are not counted). */
  createsPerKey?: FailureWindow;
}

function quotaExceeded(message: string, headers?: Record<string, string>): GatewayError {
  return new GatewayError('share_quota_exceeded', message, { ...(headers && { headers: { ...headers, 'x-should-retry': 'false' } }) });
}

function notFound(): GatewayError {
  return new GatewayError('share_not_found', 'No share exists with this slug.');
}

function unconfigured(): GatewayError {
  return new GatewayError(
    'store_unavailable',
    'Publishing shares is not available on this gateway: it needs an object store for snapshots (shares.s3).',
  );
}

/** Builds the service over a store, its cache and the (optional) S3 URL builder. */
export function createShareService(d: ShareServiceDeps): ShareService {
  const slugOf = d.slug ?? newSlug;

  /**
   * Takes back what a failed create stored. Before the record write nothing is ambiguous: delete the
   * object, give the quota back, clear the intent. After a failed record write the record may still
   * have landed (a reply lost on a timeout): the object is deleted only once the store answers that no
   * record exists; otherwise (the store is down) the intent stays and the sweep decides later. Any
   * step that fails here is left to the sweep, which repeats all of them (each is idempotent).
   */
  async function undo(slug: string, account: string, stage: 'intent' | 'record'): Promise<void> {
    try {
      if (stage === 'record' && (await d.store.getShare(slug)) !== null) {
        await d.store.clearSharePending({ slug, account });
        return;
      }
      // The quota first: a share that was never stored must not count, whatever happens to its object
      // (giving back is idempotent per share, so the sweep doing it again changes nothing).
      if (d.quota) await d.store.releaseShareQuota(account, slug, 'dropped');
      await d.objects?.delete(slug);
      await d.store.clearSharePending({ slug, account });
    } catch (err) {
      d.onCleanupFailed?.(slug, err);
    }
  }
  const keep = d.revokedKeep ?? DEFAULT_REVOKED_KEEP;

  /**
   * A revoked share's snapshot object and file list object are deleted: nothing reads them any more. The
   * revoke wrote its intent before anything else, so a delete that fails (S3 down) or never runs (a crash)
   * is repeated by the orphan sweep, which deletes the objects of any intent whose record is gone or
   * revoked (and gives its quota back). Uploaded files are not deleted (docs/shares.md).
   */
  async function dropSnapshot(slug: string, account: string): Promise<void> {
    const objects = d.objects;
    if (!objects) return;
    try {
      await objects.delete(slug);
      await d.store.clearSharePending({ slug, account });
    } catch (err) {
      d.onCleanupFailed?.(slug, err);
    }
  }

  return {
    async create(account, body, keyId) {
      if (keyId !== undefined && d.createsPerKey) {
        const wait = d.createsPerKey.fail(keyId);
        if (wait > 0) {
          const s = Math.max(1, Math.ceil(wait / 1000));
          throw new GatewayError('share_quota_exceeded', `This API key has created its shares for this minute; retry in ${s}s.`, {
            headers: { 'retry-after': String(s), 'retry-after-ms': String(Math.ceil(wait)) },
          });
        }
      }
      const objects = d.objects;
      if (!objects) throw unconfigured();
      const slug = slugOf();
      const nowMs = d.now();
      const created_at = new Date(nowMs).toISOString();
      const files = body.files.map((f) => ({ name: f.name, content_type: f.content_type, size: f.size }));
      const snapshotBytes = Buffer.byteLength(body.snapshotText);
      // What the share costs its account: the stored snapshot plus the bytes its uploads may put in S3.
      const bytes = snapshotBytes + files.reduce((n, f) => n + f.size, 0);
      const pending = { slug, account };
      // The intent before the quota: whatever fails after the reserve (Redis lost mid-request, the cleanup
      // included), the orphan sweep finds the intent and gives the quota back. Reserved first, a create that
      // lost Redis right after its reserve kept the account's count and bytes for good, with nothing to tell
      // the sweep.
      await d.store.markSharePending(pending, nowMs);
      if (d.quota) {
        let r: Awaited<ReturnType<Store['reserveShareQuota']>>;
        try {
          r = await d.store.reserveShareQuota(account, slug, bytes, d.quota, nowMs);
        } catch (e) {
          await undo(slug, account, 'intent');
          throw e;
        }
        if (r !== 'ok') {
          // Nothing was reserved or written: only the intent goes (left to the sweep if this fails).
          await d.store.clearSharePending(pending).catch(() => {});
          if (r === 'count') throw quotaExceeded(`This account has ${d.quota.maxCount} live shares, its limit; revoke some first.`);
          if (r === 'unfunded')
            throw quotaExceeded(
              `This account has ${d.quota.unfundedMaxCount} live shares, the limit for an account that was never granted credit; revoke some first.`,
            );
          throw quotaExceeded(
            `This share (${bytes} bytes) would take the account past its ${d.quota.maxBytes} bytes of shares; revoke some first.`,
          );
        }
      }
      let stage: 'intent' | 'record' = 'intent';
      try {
        // Signing is local (no network): done before the upload so a signing failure leaves no object.
        const uploads = files.length > 0 && d.files ? await d.files.uploads(slug, files) : [];
        // The file list is an object too (Redis keeps only its count); the embedded store keeps it in its record.
        // Both writes are waited for even when one fails: a cleanup started while the other is still in flight
        // would delete before it lands, leaving an object with no share and no intent.
        const written = await Promise.allSettled([
          objects.put(slug, body.snapshotText),
          files.length > 0 && d.store.kind !== 'memory' ? objects.putFiles(slug, files) : undefined,
        ]);
        for (const w of written) if (w.status === 'rejected') throw w.reason;
        const record: ShareRecord = { slug, account, created_at, bytes: snapshotBytes, files, revoked_at: null };
        stage = 'record';
        await d.store.putShare(record);
        // Best effort: an intent left behind is cleared by the sweep once it sees the record.
        await d.store.clearSharePending(pending).catch(() => {});
        d.cache.remember(record, body.snapshotText);
        return { slug, created_at, uploads };
      } catch (e) {
        await undo(slug, account, stage);
        throw e;
      }
    },

    async read(slug) {
      const state = d.cache.peek(slug) ?? (await d.cache.lookup(slug));
      if (state.status === 'live') {
        const files = state.files;
        if (files.length === 0) return state.text;
        const links = d.files ? await d.files.downloads(slug, files) : unsignedLinks(files);
        return `${state.text}${JSON.stringify(links)}}`;
      }
      if (state.status === 'unknown') throw notFound();
      if (state.status === 'revoked') throw new GatewayError('share_revoked', 'This share has been revoked.');
      throw missingObject();
    },

    async snapshotOf(r) {
      if (r.snapshot !== undefined) return r.snapshot;
      try {
        return d.objects ? await d.objects.get(r.slug) : null;
      } catch {
        return null;
      }
    },

    async revoke(slug, account) {
      const r = await d.store.getShare(slug);
      if (!r || (account !== undefined && r.account !== account)) throw notFound();
      // The intent first: whichever later step fails (the quota, the objects; Redis or S3 down, a crash),
      // the orphan sweep finishes it. Before, a revoke whose quota release failed left the share counted
      // against the quota and its snapshot in the bucket for good, unless the caller happened to retry.
      if (d.objects) await d.store.markSharePending({ slug, account: r.account }, d.now());
      // The record becomes a tombstone (no files, no sizes) that answers 410 for the retention, then expires.
      if (r.revoked_at === null) await d.store.revokeShare(slug, new Date(d.now()).toISOString(), keep);
      // Then the caches, here and everywhere, before anything else can fail: the store says revoked, so no
      // instance may serve the share as live past the pub/sub hop (before, a failed quota release skipped
      // both and every instance served it until its cache TTL).
      // A Redis record holds only the number of files: their cached links are found from this instance's
      // cached body (an instance that never read the share has no links to forget).
      const cached = d.cache.revoke(slug);
      d.files?.forget(slug, r.files ?? cached ?? []);
      // Published again on a repeated revoke too: a retry after a failed publish still reaches everyone.
      await d.store.publish({ kind: 'share', slug });
      // Idempotent per share: a repeated or concurrent revoke (or the sweep) gives the quota back once. The
      // share leaves the account's index; the account remembers at most keep.maxPerAccount revoked shares.
      await d.store.releaseShareQuota(r.account, slug, 'revoked', keep);
      await dropSnapshot(slug, r.account);
    },
  };
}
