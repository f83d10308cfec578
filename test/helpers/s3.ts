/** A real, signature-checking S3 for tests (scripts/local-s3.ts), stopped and emptied on teardown. */
import type { S3Client } from '@aws-sdk/client-s3';
import { startLocalS3, type LocalS3 } from '../../scripts/local-s3.ts';
import { createS3Client } from '../../src/s3/client.ts';

interface Teardown {
  teardown(fn: () => unknown): void;
}

export type TestS3 = LocalS3;

/** Starts a SigV4-checking S3 server with one bucket; stopped and its files deleted on `t` teardown. */
export async function startS3(t: Teardown, bucket = 'shares'): Promise<TestS3> {
  const s3 = await startLocalS3(bucket);
  t.teardown(() => s3.close());
  return s3;
}

/** The `shares.s3` config section that points a gateway at this server. */
export function sharesS3Config(s3: TestS3): Record<string, unknown> {
  return {
    endpoint: s3.endpoint,
    region: 'us-east-1',
    bucket: s3.bucket,
    force_path_style: true,
    access_key_id: s3.accessKeyId,
    secret_access_key: s3.secretAccessKey,
  };
}

/** An S3 client on this server, for a test that looks at the objects the gateway wrote. */
export function testS3Client(s3: TestS3): S3Client {
  return createS3Client({
    endpoint: s3.endpoint,
    region: 'us-east-1',
    forcePathStyle: true,
    accessKeyId: s3.accessKeyId,
    secretAccessKey: s3.secretAccessKey,
  });
}
