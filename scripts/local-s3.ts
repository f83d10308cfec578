/**
 * A local, signature-checking S3 server (@20minutes/s3rver, a devDependency: plain s3rver accepts
 * tampered signatures) on 127.0.0.1, a free port and a temp directory removed on close. The demo runs
 * one so every README example (file uploads included) works against it; the tests use it as their S3.
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

export interface LocalS3 {
  endpoint: string;
  bucket: string;
  accessKeyId: 'S3RVER';
  secretAccessKey: 'S3RVER';
  close(): Promise<void>;
}

/** Starts the server with one bucket; `close()` stops it and deletes its files. */
export async function startLocalS3(bucket = 'shares', port = 0): Promise<LocalS3> {
  const S3rver = createRequire(import.meta.url)('@20minutes/s3rver') as S3rverCtor;
  const directory = await mkdtemp(join(tmpdir(), 'tollgate-s3-'));
  const server = new S3rver({
    address: '127.0.0.1',
    port,
    silent: true,
    directory,
    vhostBuckets: false,
    configureBuckets: [{ name: bucket }],
  });
  const { port: bound } = await server.run();
  let closed = false;
  const close = async (): Promise<void> => {
    if (closed) return;
    closed = true;
    // fetch keeps sockets alive; drop them so close() does not wait for their idle timeout.
    server.httpServer?.closeAllConnections();
    await server.close();
    await rm(directory, { recursive: true, force: true });
  };
  return { endpoint: `http://127.0.0.1:${bound}`, bucket, accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER', close };
}
