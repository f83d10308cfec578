/** An S3 location as `shares.s3` and `ledger.export.s3` are read; credentials fall back to the AWS_* variables. */
import { at, bool, noUnknown, object, optional, str } from './fields.ts';

export interface S3Config {
  readonly endpoint: string | undefined;
  readonly region: string;
  readonly bucket: string;
  readonly forcePathStyle: boolean;
  readonly accessKeyId: string | undefined;
  readonly secretAccessKey: string | undefined;
}

export const S3_FIELDS = ['endpoint', 'region', 'bucket', 'force_path_style', 'access_key_id', 'secret_access_key'] as const;

/** Compiles an S3 location at `path`; without `defaultBucket` the bucket is required. */
export function s3Section(v: unknown, path: string, env: NodeJS.ProcessEnv, defaultBucket?: string): S3Config {
  const s3 = object(v, path, true);
  noUnknown(s3, path, S3_FIELDS);
  return {
    endpoint: optional(s3.endpoint, at(path, 'endpoint')),
    region: str(s3.region, at(path, 'region'), env.AWS_REGION || 'us-east-1'),
    bucket: str(s3.bucket, at(path, 'bucket'), defaultBucket),
    forcePathStyle: bool(s3.force_path_style, at(path, 'force_path_style'), false),
    accessKeyId: optional(s3.access_key_id, at(path, 'access_key_id')) ?? (env.AWS_ACCESS_KEY_ID || undefined),
    secretAccessKey: optional(s3.secret_access_key, at(path, 'secret_access_key')) ?? (env.AWS_SECRET_ACCESS_KEY || undefined),
  };
}

/** An endpoint or static credentials: the same test as share files (file-urls.ts filesConfigured). */
export function s3Configured(s3: S3Config): boolean {
  return s3.endpoint !== undefined || s3.accessKeyId !== undefined;
}
