// A TCP relay in front of a real redis-server, for fault tests: the store under test connects to `url`,
// and each test decides, per connection, what of the bytes in either direction gets through (a command
// swapped for one Redis refuses, a reply held back for good). Everything else is passed through as is.
import { createConnection, createServer, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';

interface Teardown {
  teardown(fn: () => unknown): void;
}

/** What one relayed connection does with its bytes; a missing hook passes them through unchanged. */
export interface RelayConnection {
  /** Bytes from the client: write what should reach Redis to `redis`. */
  toRedis?(chunk: Buffer, redis: Socket): void;
  /** Bytes from Redis: write what should reach the client to `client`. */
  toClient?(chunk: Buffer, client: Socket): void;
}

export interface RedisRelay {
  /** redis:// URL of the relay (no DB number: DB 0, like a local fixture). */
  readonly url: string;
  /** Drop every open connection, both sides (the clients reconnect through the relay). */
  cut(): void;
}

/**
 * Start a relay to Redis on 127.0.0.1:`port`. `onConnection` is called once per accepted connection and
 * returns that connection's hooks (so each connection can keep its own state). Closed at teardown.
 */
export async function startRedisRelay(t: Teardown, port: number, onConnection: () => RelayConnection = () => ({})): Promise<RedisRelay> {
  const open = new Set<Socket>();
  const server = createServer((client) => {
    const redis = createConnection(port, '127.0.0.1');
    open.add(client).add(redis);
    const hooks = onConnection();
    client.on('data', (chunk: Buffer) => (hooks.toRedis ? hooks.toRedis(chunk, redis) : redis.write(chunk)));
    redis.on('data', (chunk: Buffer) => (hooks.toClient ? hooks.toClient(chunk, client) : client.write(chunk)));
    // One side gone (or failed): the other goes too, as with a real dropped connection.
    for (const [a, b] of [
      [client, redis],
      [redis, client],
    ] as const) {
      a.on('error', () => b.destroy());
      a.on('close', () => {
        open.delete(a);
        b.destroy();
      });
    }
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.teardown(() => {
    server.close();
    for (const s of open) s.destroy();
  });
  return {
    url: `redis://127.0.0.1:${(server.address() as AddressInfo).port}`,
    cut() {
      for (const s of open) s.destroy();
    },
  };
}
