/** A real, signature-checking S3 for tests (scripts/local-s3.ts), stopped and emptied on teardown. */
import { startLocalS3, type LocalS3 } from '../../scripts/local-s3.ts';

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
