// Real Redis for tests: one throwaway redis-server per fixture, or a claimed DB on REDIS_URL.
//
// Usage at the top level of a test file (ESM has no top-level `return`, so guard with `if`):
//
//   import t from 'tap';
//   import { startRedis } from '../helpers/redis.ts';
//   const redis = await startRedis(t);          // null when Redis is missing (skipped, or failed in CI)
//   if (redis) {
//     t.test('holds credit', async t => { await redis.client.set('k', '1'); ... });
//   }
//
// or inside one subtest: `const redis = await startRedis(t); if (!redis) return;`.
// Outage tests: `await startRedis(t, { restartable: true })`, then `await redis.stop()` /
// `await redis.start()` (same port, empty data: the server runs with --save '' --appendonly no).
//
// Where the server comes from (redisSource):
//  1. `redis-server` on PATH: spawned per fixture on a free 127.0.0.1 port, so files running in
//     parallel (tap jobs: 2) never share state, and stop()/start() can simulate an outage.
//  2. else REDIS_URL: a shared server. Each fixture claims one of DBs 1-15 with a lock key in DB 0
//     (SET NX, so two parallel fixtures never pick the same DB), FLUSHDBs it before and after use,
//     and releases the lock at teardown. DB 0 is never flushed. Point REDIS_URL at a disposable
//     server: DBs 1-15 on it are wiped. Cluster URLs are not supported (no SELECT in cluster mode).
//  3. neither: the test is skipped with a loud message on stderr, except with CI=true, where a
//     missing Redis is a failure (CI must never go green by skipping the Redis tests).
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { accessSync, constants } from 'node:fs';
import { connect } from 'node:net';
import { delimiter, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import type { RedisOptions } from 'ioredis';
import { RespReader } from '../../src/store/resp-reader.ts';
import { freePort } from './ports.ts';

/** What a test gets back from startRedis. */
export interface RedisFixture {
  /** redis:// URL with the DB number, for code under test that makes its own clients. */
  readonly url: string;
  readonly port: number;
  /** Connected client; survives stop()/start() by reconnecting (retry every <= 500 ms). */
  readonly client: Redis;
  /** The spawned server, or null when stopped or when using REDIS_URL. */
  readonly child: ChildProcess | null;
  /** Kill the server (outage). Only for local servers. */
  stop(): Promise<void>;
  /** Start the server again on the same port, then wait until `client` is ready again. */
  start(): Promise<void>;
}

/** The part of a tap Test the fixture uses (a structural type so the policy can be tested with a fake). */
export interface FixtureHost {
  teardown(fn: () => unknown): void;
  fail(message: string): unknown;
  plan(n: number, comment?: string): void;
}

// ioredis 6's constructor types `replyMapping` differently from the exported RedisOptions, so passing a
// RedisOptions-typed value fails with TS2769; without that one key it type-checks.
export type ClientOptions = Omit<RedisOptions, 'replyMapping'>;

export interface StartRedisOptions {
  /** The test calls stop()/start(): needs a local redis-server, REDIS_URL does not qualify. */
  restartable?: boolean;
  /** Extra ioredis options for `client` (e.g. the production hot-path options). */
  clientOptions?: ClientOptions;
  /** Defaults to process.env; injectable for the policy tests. */
  env?: NodeJS.ProcessEnv;
}

export type RedisSource = { kind: 'local' } | { kind: 'external'; url: string } | { kind: 'missing'; reason: string };

const INSTALL_HINT = 'install redis-server (apt-get install -y redis-server) to run the Redis-backed tests';
export const MISSING_REDIS = `redis-server not found on PATH and REDIS_URL unset — ${INSTALL_HINT}`;
const NOT_RESTARTABLE = `this test stops and restarts Redis, which needs redis-server on PATH (a REDIS_URL server is shared) — ${INSTALL_HINT}`;

// Redis 7 logs "Ready to accept connections tcp"; 6.x logs it without the suffix.
const READY = 'Ready to accept connections';
const IN_USE = 'Address already in use';
// A cold redis-server is ready in ~5-20 ms here; 10 s only matters on a starved CI box.
const READY_TIMEOUT_MS = 10_000;
const PORT_ATTEMPTS = 5;
// Lock TTL for a claimed REDIS_URL DB: longer than tap's 120 s file timeout, so a crashed run frees it.
const DB_LOCK_MS = 300_000;
const LOCK_PREFIX = 'tollgate:test-db-lock:';

/** Whether `name` is an executable file in one of the PATH directories. */
export function onPath(name: string, pathVar: string | undefined): boolean {
  for (const dir of (pathVar ?? '').split(delimiter)) {
    if (dir === '') continue;
    try {
      accessSync(join(dir, name), constants.X_OK);
      return true;
    } catch {
      // not in this directory
    }
  }
  return false;
}

/** Decide where a Redis-backed test gets its server (see the header comment for the order). */
export function redisSource(env: NodeJS.ProcessEnv = process.env, restartable = false): RedisSource {
  if (onPath('redis-server', env['PATH'])) return { kind: 'local' };
  const url = env['REDIS_URL'];
  if (url === undefined || url === '') return { kind: 'missing', reason: MISSING_REDIS };
  if (restartable) return { kind: 'missing', reason: NOT_RESTARTABLE };
  return { kind: 'external', url };
}

/** True when Redis-backed tests can run here (redis-server on PATH, or REDIS_URL set). */
export function redisAvailable(env: NodeJS.ProcessEnv = process.env): boolean {
  return redisSource(env).kind !== 'missing';
}

/**
 * Apply the skip policy: returns true when Redis is available; otherwise plans 0 (skip) and warns on
 * stderr, or fails the test when CI=true. Callers stop when it returns false.
 */
export function requireRedis(t: FixtureHost, env: NodeJS.ProcessEnv = process.env, restartable = false): boolean {
  const source = redisSource(env, restartable);
  if (source.kind !== 'missing') return true;
  if (env['CI'] === 'true') {
    const message = `FAILED (CI=true, Redis tests may not be skipped): ${source.reason}`;
    process.stderr.write(`\n*** ${message}\n\n`);
    t.fail(message);
    return false;
  }
  const message = `SKIPPED: ${source.reason}`;
  process.stderr.write(`\n*** ${message}\n\n`);
  t.plan(0, message);
  return false;
}

/** Start (or claim) a Redis for this test; null when unavailable, after skipping or failing `t`. */
export async function startRedis(t: FixtureHost, options: StartRedisOptions = {}): Promise<RedisFixture | null> {
  const env = options.env ?? process.env;
  const restartable = options.restartable ?? false;
  if (!requireRedis(t, env, restartable)) return null;
  const source = redisSource(env, restartable);
  if (source.kind === 'external') return claimExternal(t, source.url, options.clientOptions);
  return startLocal(t, options.clientOptions);
}

function makeClient(url: string, extra: ClientOptions | undefined): Redis {
  const options: ClientOptions = {
    lazyConnect: true,
    // Fail fast during an outage (the default is 20 retries, ~74 s) and reconnect quickly after it,
    // so start() returns within ~0.5 s of the server being back.
    maxRetriesPerRequest: 1,
    retryStrategy: (times: number) => Math.min(times * 50, 500),
    ...extra,
  };
  const client = new Redis(url, options);
  // While the server is stopped the client emits ECONNREFUSED errors; without a listener an 'error'
  // event would crash the test process.
  client.on('error', () => {});
  return client;
}

class AddressInUse extends Error {}

/** Spawn redis-server on `port`; resolves once it accepts connections. */
async function spawnServer(port: number): Promise<ChildProcess> {
  const child = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let log = '';
  // Keep draining both pipes for the server's whole life: a full 64 KiB pipe would block redis.
  const collect = (chunk: Buffer) => {
    log = (log + chunk.toString('utf8')).slice(-8192);
  };
  child.stdout?.on('data', collect);
  child.stderr?.on('data', collect);
  try {
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        child.kill('SIGKILL');
        reject(new Error(`redis-server on port ${port} not ready after ${READY_TIMEOUT_MS} ms:\n${log}`));
      }, READY_TIMEOUT_MS);
      const onData = () => {
        if (log.includes(READY)) done(resolve);
      };
      const onExit = (code: number | null, signal: NodeJS.Signals | null) =>
        done(() =>
          reject(
            log.includes(IN_USE)
              ? new AddressInUse(`port ${port} in use`)
              : new Error(`redis-server exited (code ${code}, signal ${signal}) before ready:\n${log}`),
          ),
        );
      const onError = (err: Error) => done(() => reject(err));
      const done = (settle: () => void) => {
        clearTimeout(timer);
        child.stdout?.off('data', onData);
        child.off('exit', onExit);
        child.off('error', onError);
        settle();
      };
      child.stdout?.on('data', onData);
      child.once('exit', onExit);
      child.once('error', onError);
    });
  } catch (err) {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    throw err;
  }
  return child;
}

/** SIGTERM the server and wait for it to exit (SIGKILL after 5 s). */
async function killServer(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = once(child, 'exit');
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 5_000);
  await exited;
  clearTimeout(timer);
}

async function startLocal(t: FixtureHost, clientOptions: ClientOptions | undefined): Promise<RedisFixture> {
  let port = 0;
  let child: ChildProcess | null = null;
  for (let attempt = 1; child === null; attempt++) {
    port = await freePort();
    try {
      child = await spawnServer(port);
    } catch (err) {
      // Another process took the port between freePort() and the bind: pick a new one.
      if (!(err instanceof AddressInUse) || attempt >= PORT_ATTEMPTS) throw err;
    }
  }
  let current: ChildProcess | null = child;
  // Last resort if the test process exits without teardown (uncaught error, process.exit).
  const killOnExit = () => current?.kill('SIGKILL');
  process.once('exit', killOnExit);

  const url = `redis://127.0.0.1:${port}/0`;
  const client = makeClient(url, clientOptions);
  t.teardown(async () => {
    client.disconnect();
    if (current) await killServer(current);
    current = null;
    process.off('exit', killOnExit);
  });
  await client.connect();

  return {
    url,
    port,
    client,
    get child() {
      return current;
    },
    async stop() {
      if (!current) return;
      await killServer(current);
      current = null;
    },
    async start() {
      if (current) return;
      // Same port on purpose (clients reconnect to it); retry briefly in case the old socket lingers.
      for (let attempt = 1; current === null; attempt++) {
        try {
          current = await spawnServer(port);
        } catch (err) {
          if (!(err instanceof AddressInUse) || attempt >= PORT_ATTEMPTS) throw err;
          await sleep(100);
        }
      }
      await waitReady(client);
    },
  };
}

/** Wait until a reconnecting client is ready again (it retries every <= 500 ms). */
async function waitReady(client: Redis): Promise<void> {
  if (client.status === 'ready' || client.status === 'end') return;
  const ac = new AbortController();
  const timer = setTimeout(() => ac.abort(), 5_000);
  try {
    await once(client, 'ready', { signal: ac.signal });
  } catch {
    throw new Error(`redis client not ready 5 s after restart (status ${client.status})`);
  } finally {
    clearTimeout(timer);
  }
}

/** URL of the same server with another DB number in the path. */
function withDb(url: string, db: number): string {
  const u = new URL(url);
  u.pathname = `/${db}`;
  return u.toString();
}

async function claimExternal(t: FixtureHost, baseUrl: string, clientOptions: ClientOptions | undefined): Promise<RedisFixture> {
  const admin = makeClient(withDb(baseUrl, 0), undefined);
  await admin.connect();
  const token = `${process.pid}:${Math.random().toString(36).slice(2)}`;
  // Start at a random DB so parallel processes rarely contend for the same lock.
  const offset = Math.floor(Math.random() * 15);
  let db = 0;
  for (let i = 0; i < 15; i++) {
    const candidate = ((offset + i) % 15) + 1;
    if ((await admin.set(`${LOCK_PREFIX}${candidate}`, token, 'PX', DB_LOCK_MS, 'NX')) === 'OK') {
      db = candidate;
      break;
    }
  }
  if (db === 0) {
    admin.disconnect();
    throw new Error(`REDIS_URL: all 15 test DBs (1-15) are locked by other test processes`);
  }
  const url = withDb(baseUrl, db);
  const client = makeClient(url, clientOptions);
  t.teardown(async () => {
    try {
      await client.flushdb();
      // Release only our own lock (another run may own it if ours expired).
      if ((await admin.get(`${LOCK_PREFIX}${db}`)) === token) await admin.del(`${LOCK_PREFIX}${db}`);
    } finally {
      client.disconnect();
      admin.disconnect();
    }
  });
  await client.connect();
  // A crashed earlier run may have left data behind in this DB.
  await client.flushdb();
  const cannotRestart = () => Promise.reject(new Error(`REDIS_URL servers cannot be stopped; use startRedis(t, { restartable: true })`));
  return {
    url,
    port: Number(new URL(baseUrl).port || 6379),
    client,
    child: null,
    stop: cannotRestart,
    start: cannotRestart,
  };
}

/** A MONITOR connection: every command the server runs, as `name arg arg …` lines, in order. */
export interface Monitor {
  readonly seen: string[];
  close(): void;
}

/**
 * Open a MONITOR connection to the server behind `url` and resolve once the server has said OK, so
 * every command after that is in `seen`.
 *
 * Not ioredis' `monitor()`: it switches its status to "monitoring" in a microtask after MONITOR's OK,
 * so when OK and the first monitored command arrive in one socket read (a gateway's background sweep
 * makes that likely) the second reply finds an empty command queue and ioredis fails the connection
 * with "Command queue state error" (seen in CI on shares-revoke).
 */
export async function monitorRedis(url: string): Promise<Monitor> {
  const u = new URL(url);
  const socket = connect({ host: u.hostname, port: Number(u.port || 6379) });
  const seen: string[] = [];
  const auth = u.password ? `AUTH ${u.username ? `${decodeURIComponent(u.username)} ` : ''}${decodeURIComponent(u.password)}\r\n` : '';
  let ready!: () => void;
  let failed!: (e: Error) => void;
  const okPromise = new Promise<void>((res, rej) => {
    ready = res;
    failed = rej;
  });
  let oks = 0;
  const wantOks = auth ? 2 : 1;
  const reader = new RespReader((r) => {
    if (r instanceof Error) return failed(r);
    if (typeof r !== 'string') return;
    if (oks < wantOks && r === 'OK') {
      if (++oks === wantOks) ready();
      return;
    }
    seen.push(monitorArgs(r).join(' '));
  });
  socket.on('data', (chunk: Buffer) => reader.feed(chunk));
  socket.on('error', (e) => failed(e));
  await once(socket, 'connect');
  socket.write(`${auth}MONITOR\r\n`);
  await okPromise;
  return { seen, close: () => socket.destroy() };
}

/** The command of one MONITOR line: `1700000000.123456 [0 127.0.0.1:5000] "get" "k"` → ['get', 'k']. */
export function monitorArgs(line: string): string[] {
  const out: string[] = [];
  // Redis quotes each argument with sdscatrepr: \" \\ \n \r \t \a \b and \xHH for other bytes.
  const esc: Record<string, string> = { n: '\n', r: '\r', t: '\t', a: '\x07', b: '\b' };
  for (const m of line.matchAll(/"((?:[^"\\]|\\.)*)"/g)) {
    out.push(
      m[1]!.replace(/\\x([0-9a-f]{2})|\\(.)/g, (_, hex: string | undefined, c: string) =>
        hex ? String.fromCharCode(parseInt(hex, 16)) : (esc[c] ?? c),
      ),
    );
  }
  return out;
}
