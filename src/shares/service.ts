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

/** The 201 body of a create. */
export interface CreatedShare {
  slug: string;
  created_at: string;
  uploads: Upload[];
}

export interface ShareService {
  /** Stores a new share for `account`; returns its slug and one upload instruction per file. */
  create(account: string, body: Pick<ShareBody, 'snapshotText' | 'files'>): Promise<CreatedShare>;
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
    async create(account, body) {
      const slug = slugOf();
      const created_at = new Date(d.now()).toISOString();
      const files = body.files.map((f) => ({ name: f.name, content_type: f.content_type, size: f.size }));
      const uploads = files.length > 0 && d.files ? await d.files.uploads(slug, files) : [];
      const record: ShareRecord = { slug, account, created_at, snapshot: body.snapshotText, files, revoked_at: null };
      await d.store.putShare(record);
      d.cache.remember(record);
      return { slug, created_at, uploads };
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
      d.cache.revoke(slug);
      d.files?.forget(slug, r.files);
      // Published again on a repeated revoke too: a retry after a failed publish still reaches everyone.
      await d.store.publish({ kind: 'share', slug });
    },
  };
}
