/**
 * Where exported ledger objects go: an S3 bucket (ledger.export.s3, else shares.s3), through the same
 * client as share presigning (src/s3/client.ts: static credentials or the SDK's default
 * chain, checksums only when required so S3-compatible servers accept the requests).
 */
import { GetObjectCommand, ListObjectsV2Command, PutObjectCommand } from '@aws-sdk/client-s3';
import { createS3Client } from '../s3/client.ts';
import type { S3Config } from '../config/schema.ts';

export interface LedgerSink {
  /** Resolves once the bucket acknowledged the object; rejects on any failure or when `signal` aborts. */
  put(key: string, body: Buffer, signal: AbortSignal): Promise<void>;
  /** Every object key under `prefix`. */
  list(prefix: string): Promise<string[]>;
  get(key: string): Promise<Uint8Array>;
  /**
   * The object's body, or undefined when there is none (the export's check before it writes a name:
   * docs/ledger-export.md "Redis lost writes"). Rejects on any other failure or when `signal` aborts.
   */
  find(key: string, signal: AbortSignal): Promise<Uint8Array | undefined>;
}

function isNotFound(e: unknown): boolean {
  const x = e as { name?: string; $metadata?: { httpStatusCode?: number } };
  return x.name === 'NoSuchKey' || x.name === 'NotFound' || x.$metadata?.httpStatusCode === 404;
}

export function createS3Sink(cfg: S3Config): LedgerSink {
  const s3 = createS3Client(cfg);
  const Bucket = cfg.bucket;
  // A path-style list is sent as `/<bucket>/`; S3 takes `/<bucket>` alike, and S3-compatible servers
  // that canonicalise the path without its slash (s3rver) then agree with the signature.
  s3.middlewareStack.add(
    (next) => async (args) => {
      const req = args.request as { path?: string };
      if (req.path === `/${Bucket}/`) req.path = `/${Bucket}`;
      return next(args);
    },
    { step: 'build', name: 'tollgateBucketPath' },
  );
  return {
    async put(key, body, signal) {
      await s3.send(new PutObjectCommand({ Bucket, Key: key, Body: body, ContentType: 'application/gzip' }), { abortSignal: signal });
    },
    async list(prefix) {
      const keys: string[] = [];
      let token: string | undefined;
      do {
        const r = await s3.send(new ListObjectsV2Command({ Bucket, Prefix: prefix, ...(token && { ContinuationToken: token }) }));
        for (const o of r.Contents ?? []) if (o.Key) keys.push(o.Key);
        token = r.IsTruncated ? r.NextContinuationToken : undefined;
      } while (token);
      return keys;
    },
    async get(key) {
      const r = await s3.send(new GetObjectCommand({ Bucket, Key: key }));
      return r.Body!.transformToByteArray();
    },
    async find(key, signal) {
      try {
        const r = await s3.send(new GetObjectCommand({ Bucket, Key: key }), { abortSignal: signal });
        return await r.Body!.transformToByteArray();
      } catch (e) {
        if (isNotFound(e)) return undefined;
        throw e;
      }
    },
  };
}
