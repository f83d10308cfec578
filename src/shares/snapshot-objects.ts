/**
 * Where snapshot bytes live (SPEC §1.4, §13 "Redis holds no user content"): one object per share,
 * `shares/<slug>/snapshot.json` in the `shares.s3` bucket, written before the 201 and read on a cache
 * miss; the embedded store's twin keeps them in memory. Redis only ever holds the share's record.
 * A share with files has a second object, its file list (names, content types, sizes as JSON):
 * `shares/<slug>.files.json`, beside the share's folder rather than in it, so no file name can ever be
 * its key (names cannot contain `/`, and every upload key is `shares/<slug>/<name>`).
 *
 * Integrity: the PUT carries `Content-MD5` (S3 refuses a body that arrived altered) and the SHA-256 of
 * the text as metadata (`x-amz-meta-sha256`); a read recomputes it and refuses an object whose bytes or
 * length disagree (an object overwritten out of band, a truncated copy). Both failures are reported as
 * `SnapshotMissing` (never a 500, docs/shares.md).
 */
import { createHash } from 'node:crypto';
import { DeleteObjectCommand, GetObjectCommand, HeadObjectCommand, PutObjectCommand, type S3Client } from '@aws-sdk/client-s3';
import { GatewayError } from '../http/errors.ts';
import type { ShareFile } from '../store/types.ts';
import { SNAPSHOT_OBJECT_TIMEOUT_MS } from './config.ts';

/** The object key of a share's snapshot; file names may not be `snapshot.json` (validate.ts). */
export function snapshotKey(slug: string): string {
  return `shares/${slug}/snapshot.json`;
}

export const SNAPSHOT_FILE_NAME = 'snapshot.json';

/** The object key of a share's file list: outside `shares/<slug>/`, where uploads go (see above). */
export function filesKey(slug: string): string {
  return `shares/${slug}.files.json`;
}

/** The stored text of a file list: name, content type and size of each, in order. */
export function filesText(files: readonly ShareFile[]): string {
  return JSON.stringify(files.map((f) => ({ name: f.name, content_type: f.content_type, size: f.size })));
}
const CONTENT_TYPE = 'application/json';

/** Why a stored snapshot could not be served: absent, or its bytes do not match its checksum. */
export class SnapshotMissing extends Error {
  readonly reason: 'missing' | 'checksum';
  constructor(slug: string, reason: 'missing' | 'checksum') {
    super(
      reason === 'missing'
        ? `share ${slug.slice(0, 4)}…: snapshot object missing`
        : `share ${slug.slice(0, 4)}…: snapshot checksum mismatch`,
    );
    this.reason = reason;
  }
}

export interface SnapshotObjects {
  /** 's3' (the bucket) or 'memory' (the embedded store's twin). */
  readonly kind: 's3' | 'memory';
  /** Stores the text; resolves once the store confirmed it. S3 failures → 503 store_unavailable. */
  put(slug: string, text: string): Promise<void>;
  /** The text; SnapshotMissing when absent or corrupt; S3 failures → 503 store_unavailable. */
  get(slug: string): Promise<string>;
  /** Whether the stored object has exactly these bytes (by length and SHA-256), without reading it. */
  confirm(slug: string, text: string): Promise<boolean>;
  /** Stores a share's file list (filesKey); as `put`. */
  putFiles(slug: string, files: readonly ShareFile[]): Promise<void>;
  /** A share's file list; SnapshotMissing when absent or corrupt; S3 failures → 503 store_unavailable. */
  getFiles(slug: string): Promise<ShareFile[]>;
  /** Whether the stored file list is exactly `files` (by length and SHA-256 of filesText), without reading it. */
  confirmFiles(slug: string, files: readonly ShareFile[]): Promise<boolean>;
  /** Removes the share's objects, snapshot and file list (idempotent: deleting an absent object succeeds). */
  delete(slug: string): Promise<void>;
}

export function sha256Hex(text: string): string {
  return createHash('sha256').update(text).digest('hex');
}

function unavailable(err: unknown): GatewayError {
  return new GatewayError('store_unavailable', 'The share object store is unavailable; try again shortly.', { cause: err });
}

function isNotFound(e: unknown): boolean {
  const x = e as { name?: string; $metadata?: { httpStatusCode?: number } };
  return x.name === 'NoSuchKey' || x.name === 'NotFound' || x.$metadata?.httpStatusCode === 404;
}

/**
 * Snapshots in S3. Every call is bounded by `timeoutMs` (an S3 that accepts the connection and never
 * answers must not hold a publish or a read open); the client is shared with nothing else.
 */
export function createS3SnapshotObjects(s3: S3Client, bucket: string, timeoutMs = SNAPSHOT_OBJECT_TIMEOUT_MS): SnapshotObjects {
  const opts = () => ({ abortSignal: AbortSignal.timeout(timeoutMs) });
  async function putText(key: string, text: string): Promise<void> {
    const body = Buffer.from(text, 'utf8');
    try {
      await s3.send(
        new PutObjectCommand({
          Bucket: bucket,
          Key: key,
          Body: body,
          ContentType: CONTENT_TYPE,
          ContentLength: body.length,
          ContentMD5: createHash('md5').update(body).digest('base64'),
          Metadata: { sha256: createHash('sha256').update(body).digest('hex') },
        }),
        opts(),
      );
    } catch (e) {
      throw unavailable(e);
    }
  }
  async function getText(slug: string, key: string): Promise<string> {
    let bytes: Uint8Array;
    let sha: string | undefined;
    try {
      const r = await s3.send(new GetObjectCommand({ Bucket: bucket, Key: key }), opts());
      sha = r.Metadata?.sha256;
      bytes = await r.Body!.transformToByteArray();
    } catch (e) {
      if (isNotFound(e)) throw new SnapshotMissing(slug, 'missing');
      throw unavailable(e);
    }
    if (!sha || createHash('sha256').update(bytes).digest('hex') !== sha) throw new SnapshotMissing(slug, 'checksum');
    return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('utf8');
  }
  async function confirmText(key: string, text: string): Promise<boolean> {
    try {
      const h = await s3.send(new HeadObjectCommand({ Bucket: bucket, Key: key }), opts());
      return h.ContentLength === Buffer.byteLength(text) && h.Metadata?.sha256 === sha256Hex(text);
    } catch (e) {
      if (isNotFound(e)) return false;
      throw unavailable(e);
    }
  }
  async function deleteKey(key: string): Promise<void> {
    try {
      await s3.send(new DeleteObjectCommand({ Bucket: bucket, Key: key }), opts());
    } catch (e) {
      if (!isNotFound(e)) throw unavailable(e);
    }
  }
  return {
    kind: 's3',
    put: (slug, text) => putText(snapshotKey(slug), text),
    get: (slug) => getText(slug, snapshotKey(slug)),
    confirm: (slug, text) => confirmText(snapshotKey(slug), text),
    putFiles: (slug, files) => putText(filesKey(slug), filesText(files)),
    getFiles: async (slug) => parseFiles(slug, await getText(slug, filesKey(slug))),
    confirmFiles: (slug, files) => confirmText(filesKey(slug), filesText(files)),
    // Both, whether or not the share had files (the sweep does not know): a DELETE of an absent key succeeds.
    async delete(slug) {
      await Promise.all([deleteKey(snapshotKey(slug)), deleteKey(filesKey(slug))]);
    },
  };
}

/** A stored file list's text as files; one that is not a list (written out of band) counts as corrupt. */
function parseFiles(slug: string, text: string): ShareFile[] {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    throw new SnapshotMissing(slug, 'checksum');
  }
  if (!Array.isArray(v)) throw new SnapshotMissing(slug, 'checksum');
  return v as ShareFile[];
}

/** The embedded store's twin: snapshots in this process's memory, lost on restart like the rest of it. */
export function createMemorySnapshotObjects(texts = new Map<string, string>()): SnapshotObjects & { readonly size: number } {
  const lists = new Map<string, string>();
  return {
    kind: 'memory',
    get size() {
      return texts.size;
    },
    async put(slug, text) {
      texts.set(slug, text);
    },
    async get(slug) {
      const t = texts.get(slug);
      if (t === undefined) throw new SnapshotMissing(slug, 'missing');
      return t;
    },
    async confirm(slug, text) {
      return texts.get(slug) === text;
    },
    async putFiles(slug, files) {
      lists.set(slug, filesText(files));
    },
    async getFiles(slug) {
      const t = lists.get(slug);
      if (t === undefined) throw new SnapshotMissing(slug, 'missing');
      return parseFiles(slug, t);
    },
    async confirmFiles(slug, files) {
      return lists.get(slug) === filesText(files);
    },
    async delete(slug) {
      texts.delete(slug);
      lists.delete(slug);
    },
  };
}
