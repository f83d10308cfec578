/**
 * The one way Tollgate builds an S3 client (share presigning, ledger export): static credentials when
 * configured, else the SDK's default chain; checksums only when an operation requires them. AWS SDK
 * ≥ 3.729 otherwise signs a CRC32 of an empty body into presigned PUTs (real S3 then refuses any upload)
 * and adds `x-amz-checksum-mode` to GETs (docs/notes.md §4).
 */
import { S3Client, type S3ClientConfig } from '@aws-sdk/client-s3';

export interface S3ClientSettings {
  endpoint?: string | undefined;
  region: string;
  forcePathStyle: boolean;
  accessKeyId?: string | undefined;
  secretAccessKey?: string | undefined;
}

export function createS3Client(cfg: S3ClientSettings): S3Client {
  const options: S3ClientConfig = {
    region: cfg.region,
    forcePathStyle: cfg.forcePathStyle,
    requestChecksumCalculation: 'WHEN_REQUIRED',
    responseChecksumValidation: 'WHEN_REQUIRED',
  };
  if (cfg.endpoint !== undefined) options.endpoint = cfg.endpoint;
  if (cfg.accessKeyId !== undefined && cfg.secretAccessKey !== undefined) {
    options.credentials = { accessKeyId: cfg.accessKeyId, secretAccessKey: cfg.secretAccessKey };
  }
  return new S3Client(options);
}
