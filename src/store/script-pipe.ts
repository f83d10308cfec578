/**
 * The credit scripts' own Redis connection (single node only): every live request runs two scripts,
 * hold and settle, and on ioredis each costs a Command, a Script and an autopipeline Pipeline object, a
 * timer and promise chains. This pipe does the same with one string per command, one write per
 * event-loop turn, one reply reader and one timer for the whole connection; what each costs per hold +
 * settle is measured by `bench/micro/redis-client.bench.ts` (results: `bench/results/micro.md`). Everything else
 * (admin, keys, shares, limits, pub/sub, Cluster) stays on ioredis.
 *
 * Semantics, kept equal to the ioredis client it stands beside:
 * - fail fast: while disconnected a call rejects at once (503 upstream of here), and the pipe
 *   reconnects in the background (50 ms doubling to 500 ms); `ping()` of the store is false meanwhile;
 * - a command unanswered after `commandTimeoutMs` fails; replies come in order, so every command
 *   behind it is stuck too: the connection is dropped (all in flight fail) and a new one is made.
 *   A failed command may still have run: callers treat it like an ioredis timeout (holds are
 *   settled at 0, settles retried; both scripts are idempotent);
 * - EVALSHA, and on NOSCRIPT (scripts flushed) the same call once as EVAL, which also caches the
 *   script again. `scripts` are loaded (SCRIPT LOAD) in every connection's handshake, so after a Redis
 *   restart the first burst of calls does not each fall back to EVAL with the script's body; a load
 *   the server refuses (an ACL user without SCRIPT) is not fatal, the fallback still covers it;
 * - the connection settings (host/port or socket path, TLS, user, password, db) are the ioredis
 *   client's own options, so both reach the same server and database.
 */
import { createHash } from 'node:crypto';
import { connect as netConnect, type Socket } from 'node:net';
import { connect as tlsConnect, type ConnectionOptions } from 'node:tls';
import { encodeCommand, RespReader, type Reply } from './resp-reader.ts';

export interface LuaScript {
  readonly lua: string;
  readonly sha: string;
}

export function luaScript(lua: string): LuaScript {
  return { lua, sha: createHash('sha1').update(lua).digest('hex') };
}

/** The subset of ioredis' options the pipe connects with. */
export interface PipeTarget {
  host?: string | undefined;
  port?: number | undefined;
  path?: string | undefined;
  family?: number | undefined;
  tls?: ConnectionOptions | undefined;
  username?: string | undefined;
  password?: string | undefined;
  db?: number | undefined;
}

export interface ScriptPipeOptions {
  target: PipeTarget;
  commandTimeoutMs: number;
  onError?: (err: Error) => void;
  /** Loaded on every connection, before any call is answered. */
  scripts?: readonly LuaScript[];
  /**
   * A connection whose handshake had succeeded ended (dropped by the watchdog, closed or reset by the
   * server): what that server acknowledged may not be on the one the next connection reaches (a replica
   * promoted meanwhile). Not called for close().
   */
  onLost?: () => void;
  /** A connection completed its handshake (the first one and each after a loss). */
  onReady?: () => void;
}

export interface ScriptPipe {
  /**
   * Runs the script; rejects on any Redis error, a timeout, or while disconnected. It is written in the
   * loop turn it was made in, with every other call of that turn.
   */
  run(script: LuaScript, keys: readonly string[], args: readonly (string | number)[]): Promise<Reply>;
  /** Sends one plain command, in order with the scripts of the same turn (they share a write). */
  call(args: readonly (string | number)[]): Promise<Reply>;
  /**
   * Runs `fn` once just before this turn's write (and makes sure there is one): a caller that collects the
   * turn's calls (credit-batch.ts) issues them from there, so they share that write instead of the next.
   */
  beforeWrite(fn: () => void): void;
  /**
   * Counts the connections made so far (bumped by each successful handshake): what a caller learnt
   * about the server on one connection (e.g. "this index entry exists") may not hold on the next.
   */
  readonly generation: number;
  /** Resolves once connected and authenticated (rejects on the first failed attempt; retries continue). */
  readonly ready: Promise<void>;
  /** Connected now (a call would be sent, not refused). */
  readonly connected: boolean;
  close(): void;
}

interface Waiter {
  resolve(r: Reply): void;
  reject(e: Error): void;
  /** When the command was queued (ms, monotonic). */
  at: number;
}

const FIRST_RECONNECT_MS = 50;
const MAX_RECONNECT_MS = 500;
const CONNECT_TIMEOUT_MS = 10_000;

export class PipeError extends Error {
  override name = 'PipeError';
  /** False only when the command was refused before it was written: it certainly did not run. */
  readonly sent: boolean;
  constructor(message: string, sent = true) {
    super(message);
    this.sent = sent;
  }
}

export function createScriptPipe(o: ScriptPipeOptions): ScriptPipe {
  const onError = o.onError ?? (() => {});
  let socket: Socket | undefined;
  let connected = false;
  let closed = false;
  let backoff = FIRST_RECONNECT_MS;
  let reconnectTimer: NodeJS.Timeout | undefined;
  /** In-flight commands, oldest first (Redis answers in order). */
  let waiting: Waiter[] = [];
  /** Prelude replies still to come on the current connection, not the callers': must it succeed (AUTH, SELECT) or not (SCRIPT LOAD)? */
  let prelude: boolean[] = [];
  let out: string[] = [];
  let flushScheduled = false;
  /** beforeWrite callbacks of this turn, run by the flush before it writes. */
  let deferred: (() => void)[] = [];
  let generation = 0;
  /** The current connection completed its handshake (its loss is reported to onLost). */
  let handshook = false;

  const reader = new RespReader((r) => {
    if (prelude.length > 0) {
      const required = prelude.shift();
      if (r instanceof Error && required) {
        const err = new PipeError(`redis handshake failed: ${r.message}`);
        onError(err);
        settleFirst(err);
        drop(err);
        return;
      }
      if (r instanceof Error) onError(new PipeError(`redis refused SCRIPT LOAD (EVAL will be used on NOSCRIPT): ${r.message}`));
      if (prelude.length === 0) handshaken();
      return;
    }
    const w = waiting.shift();
    if (!w) return drop(new PipeError('redis sent a reply nobody asked for'));
    if (r instanceof Error) w.reject(r);
    else w.resolve(r);
  });

  function flush(): void {
    // Their calls join `out` while flushScheduled is still set, so they schedule no second write.
    if (deferred.length > 0) {
      const fns = deferred;
      deferred = [];
      for (const fn of fns) fn();
    }
    flushScheduled = false;
    if (!socket || out.length === 0) return;
    socket.write(out.length === 1 ? out[0]! : out.join(''));
    out = [];
  }

  /** Ends the current connection: everything in flight fails; a new connection follows. */
  function drop(err: Error): void {
    const s = socket;
    const lost = handshook;
    socket = undefined;
    connected = false;
    handshook = false;
    prelude = [];
    out = [];
    reader.reset();
    const failed = waiting;
    waiting = [];
    for (const w of failed) w.reject(err);
    if (s) {
      s.removeAllListeners();
      s.on('error', () => {});
      s.destroy();
    }
    if (!closed) scheduleReconnect();
    if (lost && !closed) o.onLost?.();
  }

  function scheduleReconnect(): void {
    if (reconnectTimer) return;
    reconnectTimer = setTimeout(() => {
      reconnectTimer = undefined;
      open();
    }, backoff);
    reconnectTimer.unref();
    backoff = Math.min(backoff * 2, MAX_RECONNECT_MS);
  }

  let firstAttempt: { resolve(): void; reject(e: Error): void } | undefined;
  const ready = new Promise<void>((resolve, reject) => (firstAttempt = { resolve, reject }));
  ready.catch(() => {});
  /** Settles `ready` once: resolved by the first good handshake, rejected by the first failure. */
  function settleFirst(err?: Error): void {
    if (err) firstAttempt?.reject(err);
    else firstAttempt?.resolve();
    firstAttempt = undefined;
  }
  /** The handshake succeeded: the connection counts as good (backoff restarts from its minimum). */
  function handshaken(): void {
    generation++;
    handshook = true;
    backoff = FIRST_RECONNECT_MS;
    settleFirst();
    o.onReady?.();
  }

  function open(): void {
    const t = o.target;
    const s: Socket = t.tls
      ? tlsConnect({ ...t.tls, ...(t.path ? { path: t.path } : { host: t.host ?? 'localhost', port: t.port ?? 6379 }) })
      : t.path
        ? netConnect(t.path)
        : netConnect({ host: t.host ?? 'localhost', port: t.port ?? 6379, ...(t.family ? { family: t.family } : {}) });
    socket = s;
    s.setNoDelay(true);
    // A host that never answers (dropped SYNs) would otherwise hold the attempt for the OS's ~2 min.
    s.setTimeout(CONNECT_TIMEOUT_MS, () => s.destroy(new PipeError(`redis connect timed out after ${CONNECT_TIMEOUT_MS} ms`)));
    s.on(t.tls ? 'secureConnect' : 'connect', () => {
      if (socket !== s) return;
      s.setTimeout(0);
      connected = true;
      // Handshake commands go first on the wire; the server answers them before anything queued behind.
      let hello = '';
      if (t.password) {
        hello += encodeCommand(t.username ? ['AUTH', t.username, t.password] : ['AUTH', t.password]);
        prelude.push(true);
      }
      if (t.db) {
        hello += encodeCommand(['SELECT', t.db]);
        prelude.push(true);
      }
      for (const script of o.scripts ?? []) {
        hello += encodeCommand(['SCRIPT', 'LOAD', script.lua]);
        prelude.push(false);
      }
      if (hello) s.write(hello);
      else handshaken();
    });
    s.on('data', (chunk: Buffer) => {
      try {
        reader.feed(chunk);
      } catch (err) {
        drop(err as Error);
      }
    });
    s.on('error', (err) => {
      onError(err);
      settleFirst(err);
      if (socket === s) drop(err);
    });
    s.on('close', () => {
      if (socket === s) drop(new PipeError('redis connection closed'));
    });
  }

  // One timer for the connection: the oldest command in flight decides.
  const watchdog = setInterval(
    () => {
      const oldest = waiting[0];
      if (oldest && performance.now() - oldest.at > o.commandTimeoutMs) {
        const err = new PipeError(`redis command timed out after ${o.commandTimeoutMs} ms`);
        onError(err);
        drop(err);
      }
    },
    Math.max(5, Math.min(100, Math.floor(o.commandTimeoutMs / 5))),
  );
  watchdog.unref();

  function scheduleFlush(): void {
    if (!flushScheduled) {
      flushScheduled = true;
      // setImmediate, not nextTick: commands queued by every I/O callback of this loop turn share one write.
      // Settles go out like holds, in their own turn: a settle waiting for a later hold's write runs in
      // Redis just before that hold and delays its reply. Under load they share writes anyway (every
      // turn has holds too).
      setImmediate(flush);
    }
  }

  function send(args: readonly (string | number)[]): Promise<Reply> {
    if (!connected || !socket) return Promise.reject(new PipeError('redis not connected', false));
    out.push(encodeCommand(args));
    scheduleFlush();
    return new Promise<Reply>((resolve, reject) => waiting.push({ resolve, reject, at: performance.now() }));
  }

  open();

  return {
    ready,
    get connected() {
      return connected;
    },
    get generation() {
      return generation;
    },
    call: send,
    beforeWrite(fn) {
      deferred.push(fn);
      scheduleFlush();
    },
    run(script, keys, args) {
      // A derived promise rather than an async function: one promise less per script call.
      return send(['EVALSHA', script.sha, keys.length, ...keys, ...args]).catch((err: unknown) => {
        if (!(err instanceof Error) || !err.message.startsWith('NOSCRIPT')) throw err;
        // Not run (the server does not know the script): send the body once, which caches it again.
        return send(['EVAL', script.lua, keys.length, ...keys, ...args]);
      });
    },
    close() {
      closed = true;
      clearInterval(watchdog);
      if (reconnectTimer) clearTimeout(reconnectTimer);
      const err = new PipeError('redis pipe closed');
      settleFirst(err);
      drop(err);
    },
  };
}
