/**
 * A real, signature-checking S3 for tests: @20minutes/s3rver (plain s3rver accepts tampered
 * signatures, NOTES §4) on 127.0.0.1, a free port, and a temp directory removed on teardown.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { createRequire } from 'node:module';
import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

// The package is CommonJS without type declarations; this is the slice of its API used here.
interface S3rverInstance {
  run(): Promise<AddressInfo>;
  close(): Promise<void>;
  httpServer?: Server;
}
type S3rverCtor = new (opts: Record<string, unknown>) => S3rverInstance;
const S3rver = createRequire(import.meta.url)('@20minutes/s3rver') as S3rverCtor;

interface Teardown {
  teardown(fn: () => unknown): void;
}

export interface TestS3 {
  endpoint: string;
  bucket: string;
  accessKeyId: 'S3RVER';
  secretAccessKey: 'S3RVER';
  close(): Promise<void>;
}

/** Starts a SigV4-checking S3 server with one bucket; stopped and its files deleted on `t` teardown. */
export async function startS3(t: Teardown, bucket = 'shares'): Promise<TestS3> {
  const directory = await mkdtemp(join(tmpdir(), 'tollgate-s3-'));
  const server = new S3rver({
    address: '127.0.0.1',
    port: 0,
    silent: true,
    directory,
    vhostBuckets: false,
    configureBuckets: [{ name: bucket }],
  });
  const { port } = await server.run();
  let closed = false;
  const close = async (): Promise<void> => {
    if (closed) return;
    closed = true;
    // fetch keeps sockets alive; drop them so close() does not wait for their idle timeout.
    server.httpServer?.closeAllConnections();
    await server.close();
    await rm(directory, { recursive: true, force: true });
  };
  t.teardown(close);
  return { endpoint: `http://127.0.0.1:${port}`, bucket, accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER', close };
}
