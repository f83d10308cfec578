// A free loopback port for test servers (Redis, fake upstreams, s3rver).
import { createServer } from 'node:net';

/** Ask the kernel for an unused port on 127.0.0.1, then release it for the caller to bind. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      // listen() on a TCP host always yields an AddressInfo; a string would mean a pipe.
      if (address === null || typeof address === 'string') {
        server.close();
        reject(new Error(`freePort: unexpected address ${String(address)}`));
        return;
      }
      // The port is free again once close() calls back. Another process may still take it before the
      // caller binds, so callers that spawn servers retry on EADDRINUSE (see redis.ts).
      server.close((err) => (err ? reject(err) : resolve(address.port)));
    });
  });
}
