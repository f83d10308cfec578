/**
 * Presigned URLs for the files of a share (SPEC §1.4): PUT instructions on create, GET links on read,
 * built from `shares.s3`, timed into `tollgate_presign_seconds`, GET links reused until half their
 * lifetime (createGetUrlCache). Signing failures (only possible when credentials come from the SDK's
 * default chain and it finds none) become 503 `store_unavailable`: the file store is unavailable.
 */
import type { S3Config } from '../config/schema.ts';
import { GatewayError } from '../http/errors.ts';
import type { ShareFile } from '../store/types.ts';
import { createGetUrlCache, createPresigner, objectKey, type PresignedPut, type Presigner } from './presign.ts';

/** One upload instruction of the create response. */
export type Upload = { name: string } & PresignedPut;

/** One file of the read response. */
export interface FileLink {
  name: string;
  content_type: string;
  size: number;
  url: string | null;
  expires_at: string | null;
}

export interface FileUrls {
  /** PUT instructions, one per declared file, in order. */
  uploads(slug: string, files: readonly ShareFile[]): Promise<Upload[]>;
  /** GET links, one per file, in order (cached URLs when at least half their lifetime is left). */
  downloads(slug: string, files: readonly ShareFile[]): Promise<FileLink[]>;
  /** Stops handing out cached GET links of a revoked share. */
  forget(slug: string, files: readonly ShareFile[]): void;
}

export interface FileUrlsOptions {
  s3: S3Config;
  ttlSeconds: number;
  now: () => number;
  /** Seconds one signing took, by method. */
  observe?: (method: 'PUT' | 'GET', seconds: number) => void;
  /** Content types S3 may serve inline; every other file is served as an attachment (SPEC §12). */
  inlineTypes?: readonly string[];
}

/**
 * `attachment` with the file's name, for every type not allowed inline: the S3 origin must not render a
 * share's HTML or SVG (stored XSS on a shared origin). The name is reduced to printable ASCII without
 * quotes, backslashes, `%`, `;` or `*` (each becomes `_`): RFC 6266's `filename*=` form carries `'` and
 * `*`, which S3-compatible servers canonicalise differently in a signed query (the signature-checking
 * test server refused it), and a download name needs no more than this.
 */
export function attachmentDisposition(name: string): string {
  return `attachment; filename="${name.replace(/[^\x20-\x7e]|["\\%;*']/g, '_')}"`;
}

/**
 * Whether shares may declare files. An S3 endpoint or static credentials must be configured: with
 * neither (the sample config run on a laptop) there is nowhere to put bytes, and the SDK's default
 * credential chain would probe instance metadata on the first create. Deployments that rely on that
 * chain (instance roles, IRSA) set `shares.s3.endpoint` (e.g. https://s3.us-east-1.amazonaws.com).
 */
export function filesConfigured(s3: S3Config): boolean {
  return s3.endpoint !== undefined || s3.accessKeyId !== undefined;
}

function timed(p: Presigner, observe: FileUrlsOptions['observe']): Presigner {
  if (!observe) return p;
  const time = async <T>(method: 'PUT' | 'GET', run: () => Promise<T>): Promise<T> => {
    const t0 = process.hrtime.bigint();
    try {
      return await run();
    } finally {
      observe(method, Number(process.hrtime.bigint() - t0) / 1e9);
    }
  };
  return {
    presignPut: (key, type, size, ttl) => time('PUT', () => p.presignPut(key, type, size, ttl)),
    presignGet: (key, ttl, disposition) => time('GET', () => p.presignGet(key, ttl, disposition)),
  };
}

function unavailable(err: unknown): GatewayError {
  return new GatewayError('store_unavailable', 'File storage is unavailable: S3 URLs could not be signed; try again shortly.', {
    cause: err,
  });
}

/** The file URL builder for `shares.s3`, or undefined when no S3 is configured (see filesConfigured). */
export function createFileUrls(o: FileUrlsOptions): FileUrls | undefined {
  if (!filesConfigured(o.s3)) return undefined;
  const s3 = o.s3;
  const presigner = timed(
    createPresigner(
      {
        region: s3.region,
        bucket: s3.bucket,
        forcePathStyle: s3.forcePathStyle,
        ...(s3.endpoint !== undefined && { endpoint: s3.endpoint }),
        ...(s3.accessKeyId !== undefined && { accessKeyId: s3.accessKeyId }),
        ...(s3.secretAccessKey !== undefined && { secretAccessKey: s3.secretAccessKey }),
      },
      o.now,
    ),
    o.observe,
  );
  const gets = createGetUrlCache(presigner, o.now, o.ttlSeconds);
  const inline = new Set((o.inlineTypes ?? []).map((t) => t.toLowerCase()));
  const dispositionOf = (f: ShareFile) =>
    inline.has(f.content_type.split(';', 1)[0]!.trim().toLowerCase()) ? undefined : attachmentDisposition(f.name);

  return {
    async uploads(slug, files) {
      try {
        return await Promise.all(
          files.map(async (f) => ({
            name: f.name,
            ...(await presigner.presignPut(objectKey(slug, f.name), f.content_type, f.size, o.ttlSeconds)),
          })),
        );
      } catch (e) {
        throw unavailable(e);
      }
    },
    async downloads(slug, files) {
      try {
        return await Promise.all(
          files.map(async (f) => {
            const g = await gets.get(objectKey(slug, f.name), dispositionOf(f));
            return { name: f.name, content_type: f.content_type, size: f.size, url: g.url, expires_at: g.expires_at };
          }),
        );
      } catch (e) {
        throw unavailable(e);
      }
    },
    forget(slug, files) {
      for (const f of files) gets.delete(objectKey(slug, f.name));
    },
  };
}

/** Read links for a share whose files cannot be signed here (S3 no longer configured): null URLs. */
export function unsignedLinks(files: readonly ShareFile[]): FileLink[] {
  return files.map((f) => ({ name: f.name, content_type: f.content_type, size: f.size, url: null, expires_at: null }));
}
