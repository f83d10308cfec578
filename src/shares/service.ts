/**
 * Publishing, reading and revoking shares (SPEC §1.4, §2a), independent of HTTP routing: the public
 * and admin routes call the same three operations.
 *
 * - create: presign the uploads first (a signing failure stores nothing), then write the record and
 *   prime this instance's cache.
 * - read: cache, then store (coalesced); the response body is assembled as text around the snapshot
 *   exactly as published, so a cache hit parses nothing and makes no store call.
 * - revoke: owner check against the store (another account gets the same 404 as an unknown slug),
 *   mark revoked in the store, here at once, then everywhere through pub/sub (≤ 1 s).
 */
import { GatewayError } from '../http/errors.ts';
import type { ShareRecord, Store } from '../store/types.ts';
import { newSlug } from './slug.ts';
import type { ShareCache } from './share-cache.ts';
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
}

export interface ShareServiceDeps {
  store: Store;
  cache: ShareCache;
  /** Undefined when no S3 is configured. */
  files: FileUrls | undefined;
  now: () => number;
  /** Slug source; a seam for tests. */
  slug?: () => string;
  /** Per account: live shares and their bytes (SPEC §12). Absent: unlimited (unit tests). */
  quota?: { maxCount: number; maxBytes: number };
  /** Creations per key in a fixed minute (a counter per key id; the operator's creates are not counted). */
  createsPerKey?: FailureWindow;
}

function quotaExceeded(message: string, headers?: Record<string, string>): GatewayError {
  return new GatewayError('share_quota_exceeded', message, { ...(headers && { headers: { ...headers, 'x-should-retry': 'false' } }) });
}

function notFound(): GatewayError {
  return new GatewayError('share_not_found', 'No share exists with this slug.');
}

/** The read body: `{"slug","created_at","snapshot","files"}` with the stored snapshot text spliced in. */
export function renderShare(r: ShareRecord, files: unknown[]): string {
  return `{"slug":${JSON.stringify(r.slug)},"created_at":${JSON.stringify(r.created_at)},"snapshot":${r.snapshot},"files":${JSON.stringify(files)}}`;
}

/** Builds the service over a store, its cache and the (optional) S3 URL builder. */
export function createShareService(d: ShareServiceDeps): ShareService {
  const slugOf = d.slug ?? newSlug;
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
      const slug = slugOf();
      const created_at = new Date(d.now()).toISOString();
      const files = body.files.map((f) => ({ name: f.name, content_type: f.content_type, size: f.size }));
      // What the share costs its account: the stored snapshot plus the bytes its uploads may put in S3.
      const bytes = Buffer.byteLength(body.snapshotText) + files.reduce((n, f) => n + f.size, 0);
      if (d.quota) {
        const r = await d.store.reserveShareQuota(account, slug, bytes, d.quota);
        if (r === 'count') throw quotaExceeded(`This account has ${d.quota.maxCount} live shares, its limit; revoke some first.`);
        if (r === 'bytes')
          throw quotaExceeded(
            `This share (${bytes} bytes) would take the account past its ${d.quota.maxBytes} bytes of shares; revoke some first.`,
          );
      }
      try {
        const uploads = files.length > 0 && d.files ? await d.files.uploads(slug, files) : [];
        const record: ShareRecord = { slug, account, created_at, snapshot: body.snapshotText, files, revoked_at: null };
        await d.store.putShare(record);
        d.cache.remember(record);
        return { slug, created_at, uploads };
      } catch (e) {
        // Not stored: give the quota back (best effort; a store that is down now keeps the count until revoke).
        if (d.quota) await d.store.releaseShareQuota(account, slug).catch(() => {});
        throw e;
      }
    },

    async read(slug) {
      const state = d.cache.peek(slug) ?? (await d.cache.lookup(slug));
      if (state.status === 'unknown') throw notFound();
      if (state.status === 'revoked') throw new GatewayError('share_revoked', 'This share has been revoked.');
      const r = state.record;
      const links = r.files.length === 0 ? [] : d.files ? await d.files.downloads(r.slug, r.files) : unsignedLinks(r.files);
      return renderShare(r, links);
    },

    async revoke(slug, account) {
      const r = await d.store.getShare(slug);
      if (!r || (account !== undefined && r.account !== account)) throw notFound();
      if (r.revoked_at === null) await d.store.revokeShare(slug, new Date(d.now()).toISOString());
      // Idempotent per share: a repeated or concurrent revoke gives the quota back once.
      await d.store.releaseShareQuota(r.account, slug);
      d.cache.revoke(slug);
      d.files?.forget(slug, r.files);
      // Published again on a repeated revoke too: a retry after a failed publish still reaches everyone.
      await d.store.publish({ kind: 'share', slug });
    },
  };
}
