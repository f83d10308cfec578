/**
 * Presigned S3 URLs for share files (SPEC §1.4): uploaders PUT bytes straight to S3 and readers GET
 * them from S3, so Tollgate never carries file bytes. Signing is local (HMAC, no network) once
 * credentials are known.
 */
import { GetObjectCommand, PutObjectCommand } from '@aws-sdk/client-s3';
import { createS3Client } from '../s3/client.ts';
import { getSignedUrl, S3RequestPresigner } from '@aws-sdk/s3-request-presigner';
import type { S3Client } from '@aws-sdk/client-s3';
import { LRUCache } from 'lru-cache';

/** Where share files live; credentials are optional (see createPresigner). */
export interface PresignerConfig {
  endpoint?: string;
  region: string;
  bucket: string;
  forcePathStyle: boolean;
  accessKeyId?: string;
  secretAccessKey?: string;
}

/** An upload instruction: PUT the bytes to `url` sending exactly `headers`, before `expires_at`. */
export interface PresignedPut {
  url: string;
  method: 'PUT';
  headers: Record<string, string>;
  expires_at: string;
}

/** A download link valid until `expires_at`. */
export interface PresignedGet {
  url: string;
  expires_at: string;
}

export interface Presigner {
  /** A presigned PUT for one object of exactly `size` bytes of `contentType`. */
  presignPut(key: string, contentType: string, size: number, ttlSeconds: number): Promise<PresignedPut>;
  /**
   * A presigned GET for one object. `disposition` is signed into the URL as
   * `response-content-disposition`, so S3 serves the object with that header (e.g. `attachment`).
   */
  presignGet(key: string, ttlSeconds: number, disposition?: string): Promise<PresignedGet>;
}

/** SigV4 refuses presigned URLs valid for more than 7 days (604800 s). */
export const MAX_PRESIGN_TTL_SECONDS = 604_800;

// Sign content-type so the object is stored with the type the share announced (and served back with
// it), and content-length so S3 refuses an upload of any other size (SignatureDoesNotMatch): the size
// recorded in the share is then true, and nobody uploads 5 GiB under a declared 10 bytes. The SDK
// signs content-length by itself; content-type is on its unsignable list unless named here.
const SIGNABLE_PUT_HEADERS = new Set(['content-type', 'content-length']);

function checkTtl(ttlSeconds: number): void {
  if (!Number.isInteger(ttlSeconds) || ttlSeconds < 1 || ttlSeconds > MAX_PRESIGN_TTL_SECONDS) {
    throw new RangeError(`presign ttl must be an integer in 1..${MAX_PRESIGN_TTL_SECONDS} seconds, got ${ttlSeconds}`);
  }
}

/** The SDK's URI escape (RFC 3986 unreserved kept; `!'()*` escaped too), per path segment for S3 keys. */
function escapeUri(s: string): string {
  return encodeURIComponent(s).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
}

/** Where GET URLs of the bucket go and what signs them: resolved once through the SDK (see getSigner). */
interface GetTarget {
  protocol: string;
  hostname: string;
  port: number | undefined;
  /** The path before the key: `/<bucket>` path-style, empty for virtual-hosted buckets. */
  basePath: string;
  region: string;
  service: string;
  presigner: S3RequestPresigner;
}

const PROBE_KEY = 'shares/probe';

/**
 * GET URLs without the SDK's per-command pipeline. getSignedUrl resolves the endpoint rules, clones the
 * middleware stack and serialises a command for every URL (~5–6 × the cost of signing alone,
 * bench/results/share-miss-flood.md "Signing"), so a read of a share
 * with 20 files whose URLs were not cached held the event loop for milliseconds, and one account reading
 * its many such shares round-robin (no key needed) slowed every other tenant's reads (docs/shares.md). Here the endpoint, path prefix and signing region come once from one getSignedUrl of a
 * probe key; each URL is then the SDK's own S3RequestPresigner over a request built like the SDK's
 * (`GET /<prefix>/<escaped key>?x-id=GetObject`), byte-identical URLs (test/shares/presign.test.ts).
 */
async function resolveGetTarget(s3: S3Client, bucket: string): Promise<GetTarget> {
  const probe = new URL(await getSignedUrl(s3, new GetObjectCommand({ Bucket: bucket, Key: PROBE_KEY }), { expiresIn: 60 }));
  const suffix = `/${PROBE_KEY}`;
  if (!probe.pathname.endsWith(suffix)) throw new Error(`shares.s3: unexpected presigned URL path ${probe.pathname}`);
  // X-Amz-Credential = <key id>/<date>/<region>/<service>/aws4_request
  const scope = (probe.searchParams.get('X-Amz-Credential') ?? '').split('/');
  const [region, service] = [scope.at(-3), scope.at(-2)];
  if (!region || !service) throw new Error('shares.s3: presigned URL without a credential scope');
  return {
    protocol: probe.protocol,
    hostname: probe.hostname,
    port: probe.port === '' ? undefined : Number(probe.port),
    basePath: probe.pathname.slice(0, -suffix.length),
    region,
    service,
    presigner: new S3RequestPresigner({ ...s3.config, signingName: service, region: async () => region }),
  };
}

/** A presigned request as a URL, as the SDK's formatUrl writes it (query keys sorted, values escaped). */
function formatGetUrl(r: {
  protocol: string;
  hostname: string;
  port?: number | undefined;
  path: string;
  query?: Record<string, unknown>;
}): string {
  const q = r.query ?? {};
  const query = Object.keys(q)
    .sort()
    .map((k) => `${escapeUri(k)}=${escapeUri(String(q[k]))}`)
    .join('&');
  return `${r.protocol}//${r.hostname}${r.port ? `:${r.port}` : ''}${r.path}?${query}`;
}

/** The signing instant: X-Amz-Date has one-second resolution, so expiry counts from the whole second. */
function signingSecond(clock: () => number): number {
  return Math.floor(clock() / 1000) * 1000;
}

/**
 * A presigner for one bucket. With `accessKeyId` and `secretAccessKey` the credentials are static and
 * signing never touches the network; without both, the SDK's default chain is used (environment, shared
 * config/SSO, web identity, ECS/EC2 instance metadata), resolved on the first presign and then cached
 * by the SDK, so the first call may wait on that lookup. Giving only one of the two is a config error.
 * Checksums are WHEN_REQUIRED: SDK ≥ 3.729 would otherwise sign the CRC32 of an empty body into every
 * PUT URL (real S3 then rejects any real upload) and add x-amz-checksum-mode to GET URLs.
 * `clock` (ms since epoch) sets X-Amz-Date and `expires_at`.
 */
export function createPresigner(cfg: PresignerConfig, clock: () => number): Presigner {
  if ((cfg.accessKeyId === undefined) !== (cfg.secretAccessKey === undefined)) {
    throw new Error('shares.s3: set both accessKeyId and secretAccessKey, or neither (SDK default credential chain)');
  }
  const s3 = createS3Client(cfg);
  const bucket = cfg.bucket;
  // Resolved on the first GET; a failure (no credentials from the default chain yet) is retried next time.
  let target: Promise<GetTarget> | undefined;
  const getTarget = (): Promise<GetTarget> =>
    (target ??= resolveGetTarget(s3, bucket).catch((e: unknown) => {
      target = undefined;
      throw e;
    }));

  return {
    async presignPut(key, contentType, size, ttlSeconds) {
      checkTtl(ttlSeconds);
      const at = signingSecond(clock);
      const cmd = new PutObjectCommand({ Bucket: bucket, Key: key, ContentType: contentType, ContentLength: size });
      const url = await getSignedUrl(s3, cmd, { expiresIn: ttlSeconds, signingDate: new Date(at), signableHeaders: SIGNABLE_PUT_HEADERS });
      return {
        url,
        method: 'PUT',
        headers: { 'content-type': contentType, 'content-length': String(size) },
        expires_at: new Date(at + ttlSeconds * 1000).toISOString(),
      };
    },
    async presignGet(key, ttlSeconds, disposition) {
      checkTtl(ttlSeconds);
      const at = signingSecond(clock);
      const g = await getTarget();
      const signed = await g.presigner.presign(
        {
          method: 'GET',
          protocol: g.protocol,
          hostname: g.hostname,
          ...(g.port !== undefined && { port: g.port }),
          path: `${g.basePath}/${key.split('/').map(escapeUri).join('/')}`,
          query: { 'x-id': 'GetObject', ...(disposition !== undefined && { 'response-content-disposition': disposition }) },
          headers: {},
        },
        { expiresIn: ttlSeconds, signingDate: new Date(at), signingRegion: g.region, signingService: g.service },
      );
      return { url: formatGetUrl(signed), expires_at: new Date(at + ttlSeconds * 1000).toISOString() };
    },
  };
}

/**
 * The S3 key of one share file: `shares/<slug>/<name>`. The name goes in as is (validate.ts keeps it to
 * ≤ 255 UTF-8 bytes without '/', '\', control characters, '.' or '..'), so the key stays under S3's
 * 1024-byte limit, one file per name, and the URL's last segment is the file's name; the SDK
 * percent-encodes it in the URL.
 */
export function objectKey(slug: string, fileName: string): string {
  return `shares/${slug}/${fileName}`;
}

/** Presigned GET URLs reused across reads of the same object. */
export interface GetUrlCache {
  /** A GET URL for `key` with at least half of `ttlSeconds` left: cached when still fresh, else newly signed. */
  get(key: string, disposition?: string): Promise<PresignedGet>;
  /** Forgets `key` (e.g. when its share is revoked). */
  delete(key: string): void;
  /** Number of cached URLs. */
  readonly size: number;
}

interface CachedGet {
  value: PresignedGet;
  /** Milliseconds since epoch after which the URL is no longer handed out. */
  staleAt: number;
}

/**
 * A GET-URL reuse cache (SPEC §1.4: presigned URLs may be reused until half their lifetime has passed).
 * A signing costs tens of µs (bench/results/share-miss-flood.md) against ~40 ns for an LRU hit, and a popular share is read far
 * more often than every ttl/2 (450 s by default). A URL served from the cache still has more than
 * ttl/2 to run. Bounded by entry count (`max`, default 10,000 ≈ 10k × ~0.5 KB = ~5 MB); concurrent
 * misses for one key share a single signing.
 */
export function createGetUrlCache(presigner: Presigner, clock: () => number, ttlSeconds: number, max = 10_000): GetUrlCache {
  checkTtl(ttlSeconds);
  const lru = new LRUCache<string, CachedGet>({ max });
  const inflight = new Map<string, Promise<PresignedGet>>();
  const halfLifeMs = (ttlSeconds * 1000) / 2;

  // A delete() during a signing drops that signing's result: the in-flight entry no longer matches.
  function sign(key: string, disposition: string | undefined): Promise<PresignedGet> {
    const p: Promise<PresignedGet> = presigner
      .presignGet(key, ttlSeconds, disposition)
      .then((value) => {
        // Count from the signing second (expires_at - ttl), not from now: X-Amz-Date is truncated.
        const signedAt = Date.parse(value.expires_at) - ttlSeconds * 1000;
        if (inflight.get(key) === p) lru.set(key, { value, staleAt: signedAt + halfLifeMs });
        return value;
      })
      .finally(() => {
        if (inflight.get(key) === p) inflight.delete(key);
      });
    inflight.set(key, p);
    return p;
  }

  return {
    // A file's disposition follows from its stored content type, which never changes: the key alone
    // identifies the URL.
    get(key, disposition) {
      const hit = lru.get(key);
      if (hit && clock() < hit.staleAt) return Promise.resolve(hit.value);
      return inflight.get(key) ?? sign(key, disposition);
    },
    delete(key) {
      lru.delete(key);
      inflight.delete(key);
    },
    get size() {
      return lru.size;
    },
  };
}
