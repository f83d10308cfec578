/**
 * The Redis store (production). Money moves only inside Lua scripts (lua/*.lua, registered once with
 * defineCommand); every key a script touches is passed through KEYS. Any Redis failure surfaces as
 * 503 `store_unavailable`, and the client is set up to fail fast instead of queueing (NOTES §1).
 */
import { readFile } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { Cluster, Redis } from 'ioredis';
import * as K from './redis-keys.ts';
import { parseClusterNodes } from './cluster-nodes.ts';
import { guardUnresponsiveNodes } from './cluster-node-guard.ts';
import { settleScriptFor, type DebitLayout } from './debit-layout.ts';
import { createRedisCredit } from './redis-credit.ts';
import { redisConsoleStore } from './redis-console.ts';
import { redisExportStore } from './redis-export.ts';
import { budgetCounter, guard, ledgerAfter, parseKey } from './redis-records.ts';
import { redisShareStore } from './redis-shares.ts';
import { limiterClient } from './limiter-client.ts';
import { createScriptPipe, luaScript, type LuaScript, type PipeTarget, type ScriptPipe } from './script-pipe.ts';
import {
  decodeInvalidation,
  encodeInvalidation,
  MAX_BALANCE_MICROS,
  type AccountState,
  type Invalidation,
  type KeyPatch,
  type KeyRecord,
  type Store,
} from './types.ts';

type Client = Redis | Cluster;
type ScriptFn = (...args: (string | number)[]) => Promise<unknown>;

/**
 * Lua scripts by command name: [file, number of keys]. The hold bucket index is global (SPEC §11), so it
 * is never a key of these scripts: redis-credit.ts writes it beside them.
 */
const SCRIPTS = {
  tgGrant: ['grant', 3],
  tgHold: ['hold', 2],
  // hold.lua and settle.lua of a key with a budget: its period counter is one more key (docs/keys.md).
  tgHold3: ['hold', 3],
  tgSettle4: ['settle', 4],
  tgSettle6: ['settle', 6],
  // settle.lua with 3 keys (the common case) or 5 (the whole script). A fixed key count per command, not
  // ioredis' variable one (numberOfKeys: null): on Cluster, autopipelining groups a command by its first
  // argument, which for a variable count is the number, not a key, so a settle joined a batch bound for
  // another node and the batch failed ("All keys in the pipeline should belong to the same slots
  // allocation group": store_unavailable under load, test/cluster/contract.test.ts).
  tgSettle3: ['settle', 3],
  tgSettle5: ['settle', 5],
  // Group commit (credit-batch.ts): a turn's holds or settles of one slot in one call, any number of keys.
  // Not autopipelined (see the ignore list below): the batch is the pipeline, and on Cluster ioredis then
  // routes it by its keys, not by its first argument.
  tgHoldMany: ['hold-many', null],
  tgSettleMany: ['settle-many', null],
  // A hot account's turn in one pass (docs/ledger.md "Runs"): holds only (2 keys), or settles too (3 keys).
  tgRun2: ['run', 2],
  tgRun3: ['run', 3],
  // A credit lease's settles and give-back (docs/ledger.md "Leases").
  tgLeaseSettle: ['lease-settle', 3],
  tgLeasePass: ['lease-pass', 3],
  // reap-bucket.lua: one bucket (3 keys; every call on Cluster), or a batch of buckets on one node.
  tgReapBucket3: ['reap-bucket', 3],
  tgReapBucket: ['reap-bucket', null],
  tgLegacyReap: ['legacy-reap', 3],
  tgRevokeShare: ['revoke-share', 1],
  tgShareQuota: ['share-quota', 3],
  tgShareCompact: ['share-compact', 1],
  tgLedgerExport: ['ledger-export', 3],
  tgAddKey: ['add-key', 3],
  tgForgetRoll: ['forget-roll', 1],
  tgConfirmRoll: ['confirm-roll', 1],
  tgDropClaim: ['drop-claim', 2],
  tgUsageFlush: ['usage-flush', 1],
  tgLastUsed: ['last-used', 2],
} as const;

/**
 * How long an account's count of keys made on one UTC day lives (lua/add-key.lua): the day, plus a day for
 * instances whose clocks or requests straddle midnight; after that it costs nothing.
 */
const KEYS_MADE_TTL_SECONDS = 2 * 86_400;

export interface RedisStoreOptions {
  url?: string | undefined;
  clusterNodes?: readonly string[];
  commandTimeoutMs: number;
  /**
   * How long a reaped hold is remembered, so a settle arriving after the reaper still debits once
   * (credit.ts settledMarkerTtlSeconds: the hold TTL + the settle retry window). Only reaped holds are
   * kept that long; a settled request's record goes with its hold bucket (docs/ledger.md).
   */
  settledTtlSeconds: number;
  /** The hold TTL (credit.ts holdTtlMs), for a settle that does not say when its hold expires. Default 660 s. */
  holdTtlMs?: number;
  /** Hold bucket size (hold-bucket.ts bucketMsFor; default 1 s). */
  bucketMs?: number;
  onError?: (err: Error) => void;
  /** Hold and settle through the script pipe on a single node (default); false keeps them on ioredis. */
  scriptPipe?: boolean;
  /** How a debit's ledger entry is written (debit-layout.ts; default `compact`). */
  debitEntries?: DebitLayout;
  /** Credit leases for a hot account (credit-lease.ts, `credit.leases`; default off). */
  leases?: boolean;
  /** How long a lease's settles wait to share a call (`credit.lease_linger_ms`; default 0: per turn). */
  leaseLingerMs?: number;
}

/** Builds the ioredis client the way NOTES §1 recommends for a hot path: fail fast, autopipeline. */
export function createRedisClient(o: Pick<RedisStoreOptions, 'url' | 'clusterNodes' | 'commandTimeoutMs'>): Client {
  // ioredis 6's default protocol (RESP3). RESP2 measured the same client CPU per hold + settle when the
  // cases are interleaved (28.9 vs 28.2 µs, bench/micro/redis-client.bench.ts), so nothing is gained by it.
  const common = { lazyConnect: true, maxRetriesPerRequest: 1, commandTimeout: o.commandTimeoutMs, enableAutoPipelining: true } as const;
  if (o.clusterNodes && o.clusterNodes.length > 0) {
    // The nodes' user, password and TLS (checked alike on every node at config load) apply to every node
    // ioredis connects to, the ones it discovers included.
    const { nodes, username, password, tls } = parseClusterNodes(o.clusterNodes);
    return new Cluster(nodes, {
      lazyConnect: true,
      enableAutoPipelining: true,
      // CLUSTERDOWN (a master failed and not replaced yet: with cluster-require-full-coverage, the default,
      // for every slot) answers 503 at once, as a node that is down does. ioredis' default retries it 16
      // times, each after 100 ms and a slot refresh, each with a fresh command timeout: a request waited
      // 8.7–12.7 s for its 503 behind a frozen master no replica replaced (test/cluster/partition.test.ts).
      retryDelayOnClusterDown: 0,
      redisOptions: {
        maxRetriesPerRequest: 1,
        commandTimeout: o.commandTimeoutMs,
        ...(username !== undefined && { username }),
        ...(password !== undefined && { password }),
        ...(tls && { tls: {} }),
      },
    });
  }
  return new Redis(o.url ?? 'redis://127.0.0.1:6379', common);
}

/**
 * The script pipe for a single-node client, connected exactly like it (same options); none for Cluster
 * or Sentinel, which keep ioredis' routing.
 */
function pipeFor(
  redis: Client,
  commandTimeoutMs: number,
  onError: (e: Error) => void,
  scripts: readonly LuaScript[],
  onLost: () => void,
  onReady: (pipe: ScriptPipe) => void,
): ScriptPipe | undefined {
  if (redis instanceof Cluster) return undefined;
  const opts = redis.options as PipeTarget & { sentinels?: unknown[] | null };
  if (opts.sentinels && opts.sentinels.length > 0) return undefined;
  const { host, port, path, family, tls, username, password, db } = opts;
  const pipe: ScriptPipe = createScriptPipe({
    target: { host, port, path, family, tls, username, password, db },
    commandTimeoutMs,
    onError,
    scripts,
    onLost,
    onReady: () => onReady(pipe),
  });
  return pipe;
}

/**
 * ioredis 6 holds a Cluster's autopipelined commands (and pipelines) until it first learns the slots, then
 * runs each in a nextTick callback. When that first slot table is partial (a cluster still being created,
 * as a gateway booted before its cluster sees it), the command's slot has no node and the callback throws
 * a TypeError (autoPipelining.js `client.slots[…].join`) outside any promise: an uncaught exception that
 * killed the process. The callback's own error path rejects the command instead, as store_unavailable.
 */
function guardDelayedCommands(redis: Cluster): void {
  const c = redis as unknown as { delayUntilReady(cb: (err?: Error | null) => void): void };
  const delay = c.delayUntilReady.bind(redis);
  c.delayUntilReady = (cb) =>
    delay((err) => {
      try {
        cb(err);
      } catch (e) {
        cb(e as Error);
      }
    });
}

/**
 * ioredis' Cluster keeps a command in its own offline queue while the cluster is not ready (every node
 * down after boot: it reconnects), and `commandTimeout` starts only when a node's connection takes the
 * command, so a command issued during a whole-cluster outage waited until the cluster came back: live
 * requests hung instead of answering 503 (test/cluster/outage.test.ts). The timeout is started when the
 * Cluster takes the command instead (again at each retry, as the node did), so it bounds the queue too;
 * the node's own setTimeout is then a no-op, still one timer per command.
 *
 * A command that waited in the queue past the timeout has been answered (store_unavailable; may-have-run
 * to the credit layer): it is dropped when the cluster is back, not sent late, or a grant refused with a
 * 503 would still credit the account. By its age, not `isSettled`: a timed-out pipeline (autopipelined
 * commands are one) re-initialises its commands' promises before giving up, so they look unsettled.
 */
interface ClusterCommand {
  setTimeout(ms: number): void;
}
function boundOfflineQueue(redis: Cluster, commandTimeoutMs: number): void {
  const c = redis as unknown as {
    sendCommand(command: ClusterCommand, ...rest: unknown[]): unknown;
    executeOfflineCommands(): void;
    offlineQueue: {
      toArray(): { command: ClusterCommand }[];
      length: number;
      clear(): void;
      push(item: { command: ClusterCommand }): void;
    };
  };
  /** When the Cluster last took each command (a retry too). */
  const takenAt = new WeakMap<ClusterCommand, number>();
  const send = c.sendCommand.bind(redis);
  c.sendCommand = (command, ...rest) => {
    takenAt.set(command, performance.now());
    command.setTimeout(commandTimeoutMs);
    return send(command, ...rest);
  };
  const flush = c.executeOfflineCommands.bind(redis);
  c.executeOfflineCommands = () => {
    if (c.offlineQueue.length > 0) {
      const now = performance.now();
      const live = c.offlineQueue.toArray().filter((item) => now - (takenAt.get(item.command) ?? now) < commandTimeoutMs);
      c.offlineQueue.clear();
      for (const item of live) c.offlineQueue.push(item);
    }
    flush();
  };
}

/** Connects (or keeps retrying in the background) and returns the Redis-backed store. */
export async function createRedisStore(o: RedisStoreOptions & { client?: Client }): Promise<Store> {
  const redis = o.client ?? createRedisClient(o);
  const onError = o.onError ?? (() => {});
  redis.on('error', onError);
  // Writes acknowledged and then maybe lost (Store.onPossibleLoss). Each report carries whether they
  // were: on Cluster, yes at once (the node's slots move to a replica); on a single node, known once a
  // connection is made again: lost only if it reaches another server process (a replica promoted behind
  // the same address, a restart), told by its run_id; a blip back to the same process lost nothing.
  const lossListeners: ((lost: Promise<boolean>) => void)[] = [];
  let closing = false;
  let lossQueued = false;
  const clusterLoss = () => {
    if (lossQueued || closing || lossListeners.length === 0) return;
    lossQueued = true;
    setImmediate(() => {
      lossQueued = false;
      for (const l of lossListeners) l(Promise.resolve(true));
    });
  };
  /** The single node's run_id as last seen, and the reports waiting for the next connection's. */
  let runId: string | undefined;
  let waitingRunId: ((lost: boolean) => void)[] = [];
  const nodeLost = () => {
    if (closing || lossListeners.length === 0 || waitingRunId.length > 0) return;
    const lost = new Promise<boolean>((resolve) => waitingRunId.push(resolve));
    for (const l of lossListeners) l(lost);
  };
  const nodeReady = (info: () => Promise<unknown>) => {
    void info().then(
      (text) => {
        const id = /run_id:(\w+)/.exec(String(text))?.[1];
        const lost = runId === undefined || id === undefined || id !== runId;
        runId = id;
        const w = waitingRunId;
        waitingRunId = [];
        for (const r of w) r(lost);
      },
      (err: Error) => {
        onError(err);
        // Not known: counted as another server (a resend that finds its settle debits nothing).
        runId = undefined;
        const w = waitingRunId;
        waitingRunId = [];
        for (const r of w) r(true);
      },
    );
  };
  if (redis instanceof Cluster) {
    guardDelayedCommands(redis);
    boundOfflineQueue(redis, o.commandTimeoutMs);
    guardUnresponsiveNodes(redis, o.commandTimeoutMs, onError, clusterLoss);
    // A node's connection ended (a master killed, or dropped from the slot table after a failover).
    redis.on('-node', clusterLoss);
  }
  const scripts: Record<string, ScriptFn> = {};
  const lua: Record<string, LuaScript> = {};
  for (const [name, [file, numberOfKeys]] of Object.entries(SCRIPTS)) {
    // Every script that writes a debit in the configured debit layout (debit-layout.ts: each compact XADD
    // rewritten, or startup fails); a script without one comes back as it is.
    lua[file] ??= luaScript(
      settleScriptFor(await readFile(new URL(`./lua/${file}.lua`, import.meta.url), 'utf8'), o.debitEntries ?? 'compact'),
    );
    redis.defineCommand(name, { ...(numberOfKeys === null ? {} : { numberOfKeys }), lua: lua[file]!.lua });
    scripts[name] = (...args) => (redis as unknown as Record<string, ScriptFn>)[name]!(...args);
  }
  // Single node: hold and settle, the two scripts of every live request, take the lean pipe (script-pipe.ts).
  // Autopipelining would group a -many call by its first argument, the key count, not a key (SCRIPTS above).
  // A new array: ioredis' default one is shared by every client.
  const options = redis.options as { autoPipeliningIgnoredCommands?: string[] };
  options.autoPipeliningIgnoredCommands = [...(options.autoPipeliningIgnoredCommands ?? []), 'tgHoldMany', 'tgSettleMany'];
  const pipe =
    o.scriptPipe === false
      ? undefined
      : pipeFor(
          redis,
          o.commandTimeoutMs,
          onError,
          [lua.hold!, lua.settle!, lua['hold-many']!, lua['settle-many']!, lua.run!, lua['lease-settle']!, lua['lease-pass']!],
          nodeLost,
          (p) => nodeReady(() => p.call(['INFO', 'server'])),
        );
  if (pipe) await pipe.ready.catch(onError);
  else if (!(redis instanceof Cluster)) {
    // Single node without the pipe (Sentinel, or `scriptPipe: false`): ioredis' connection.
    const r = redis;
    r.on('close', nodeLost);
    r.on('ready', () => nodeReady(() => r.info('server')));
    if (r.status === 'ready') nodeReady(() => r.info('server'));
  }
  // Not ioredis' autoResubscribe: it re-subscribes after a reconnect without a handler on the reply, so a
  // close (or another drop) before that reply arrives is an unhandled rejection, "Connection is closed."
  // (CI, limits-outage). The 'ready' listener below does the same with the error handled.
  // Cluster: no offline queue on the subscriber, so a subscribe while no node is reachable fails at once
  // instead of waiting in ioredis' queue for ever (the boot awaited it and never listened).
  const cluster = redis instanceof Cluster;
  const sub: Client = cluster ? redis.duplicate([], { enableOfflineQueue: false }) : redis.duplicate({ autoResubscribe: false });
  sub.on('error', onError);
  const handlers: ((m: Invalidation) => void)[] = [];
  sub.on('message', (_channel: string, message: string) => {
    const m = decodeInvalidation(message);
    if (m) for (const h of handlers) h(m);
  });
  if (redis.status === 'wait') await redis.connect().catch(onError);
  if (sub.status === 'wait') await sub.connect().catch(onError);
  // Not awaited when the connection is down: the boot must reach listen() with Redis unreachable (SPEC §5).
  // After a reconnect (or a first connect that failed above) the 'ready' listener subscribes; subscribing
  // twice is harmless. On Cluster, ioredis moves the subscription itself when its subscriber node changes,
  // but only once a subscribe has succeeded.
  sub.on('ready', () => void sub.subscribe(K.INVALIDATION_CHANNEL).catch(onError));
  if (sub.status === 'ready') await sub.subscribe(K.INVALIDATION_CHANNEL).catch(onError);

  const s = scripts as Record<keyof typeof SCRIPTS, ScriptFn>;
  const credit = createRedisCredit({
    redis,
    pipe,
    scripts: s,
    lua: {
      hold: lua.hold!,
      settle: lua.settle!,
      holdMany: lua['hold-many']!,
      settleMany: lua['settle-many']!,
      run: lua.run!,
      leaseSettle: lua['lease-settle']!,
      leasePass: lua['lease-pass']!,
    },
    onError,
    reapedTtlSeconds: o.settledTtlSeconds,
    holdTtlMs: o.holdTtlMs,
    bucketMs: o.bucketMs,
    leases: o.leases,
    leaseLingerMs: o.leaseLingerMs,
    packed: o.debitEntries === 'packed',
  });
  const readAccount = async (acct: string): Promise<AccountState> => {
    const [bal, held] = await redis.hmget(K.balance(acct), 'balance', 'held');
    return { id: acct, balance_micros: Number(bal ?? 0), held_micros: Number(held ?? 0) };
  };

  /** A key made and stored in full: its record and its id index (written last by createKey; deleteKey takes the record first). */
  const keyStored = async (id: string) => {
    const hash = await redis.get(K.keyIdIndex(id));
    return hash !== null && (await redis.exists(K.keyRecord(hash))) === 1;
  };
  /** A roll claim's key id ('~' marks a claim still pending: lua/add-key.lua). */
  const bare = (claim: string) => (claim.startsWith('~') ? claim.slice(1) : claim);
  /**
   * What a roll makes of the claim it met, so that an old key is never left unrollable for good (its
   * successor's DELETE a 404). 'failed': it names a successor that will never be stored — confirmed but
   * gone (deleted, its claim cleanup failed), or still pending, unchanged, after 2 × the command timeout
   * (its roll's writes failed and so did their undo, or its process died). 'changed': pending when met, other
   * after the wait (confirmed, dropped, or freed by its own roll's undo). 'standing': a confirmed claim
   * whose successor is stored. A roll that was merely slow finds its claim dropped when it confirms
   * (confirm-roll.lua) and undoes its key: whichever runs first in the account's slot wins, and a key
   * never has two live successors.
   */
  const claimAfterWait = async (account: string, old: string, claim: string): Promise<'failed' | 'changed' | 'standing'> => {
    if (!claim.startsWith('~')) return (await keyStored(claim)) ? 'standing' : 'failed';
    await sleep(Math.min(3 * o.commandTimeoutMs, 60_000));
    return (await redis.hget(K.keysRolled(account), old)) === claim ? 'failed' : 'changed';
  };

  /**
   * What a deleted key leaves in its account's slot, removed (idempotent): its place in the key set, its last
   * use (that hash has no expiry and every key list reads it whole: last-used.lua), its roll claims
   * (forget-roll.lua: the hash stays bounded by the keys held, and a deleted successor frees its old key to
   * be rolled again), and its lifetime budget counter — emptied, and left to expire once no settle of the key
   * can still come (settledTtlSeconds; deleted outright, a settle in flight made it again with no expiry, a
   * hash in Redis for good: the settle script keeps a TTL it finds). Day and month counters expire on their own.
   */
  const forgetKey = async (account: string, id: string, rolledFrom: string) => {
    const lifetime = K.keyBudget(account, id, 't');
    await Promise.all([
      redis.srem(K.accountKeys(account), id),
      redis.hdel(K.keysUsed(account), id),
      s.tgForgetRoll(K.keysRolled(account), id, rolledFrom),
      redis.del(lifetime),
      redis.hset(lifetime, 's', 0),
      redis.expire(lifetime, o.settledTtlSeconds),
    ]);
  };
  /**
   * The accounts (normally one) that still hold a trace of a key whose record is gone — in their key set,
   * last uses or roll claims — each with the key it was rolled from ('' if none), found by SCAN on every
   * master: the record, which named them, is gone.
   */
  const accountsOfGoneKey = async (id: string): Promise<[string, string][]> => {
    const nodes = cluster ? (redis as import('ioredis').Cluster).nodes('master') : [redis as import('ioredis').Redis];
    const names = new Set<string>();
    for (const node of nodes) {
      let cursor = '0';
      do {
        const [next, batch] = await node.scan(cursor, 'MATCH', K.ACCOUNT_KEYS_PATTERN, 'COUNT', 1000);
        cursor = next;
        for (const n of batch) if (/^\{acct:[^}]+\}:(?:keys|used|rolled)$/.test(n)) names.add(n);
      } while (cursor !== '0');
    }
    const accounts = new Set<string>();
    await Promise.all(
      [...names].map(async (n) => {
        const account = /^\{acct:([^}]+)\}/.exec(n)![1]!;
        const held = n === K.accountKeys(account) ? await redis.sismember(n, id) : await redis.hexists(n, id);
        if (held === 1) accounts.add(account);
      }),
    );
    return Promise.all(
      [...accounts].map(async (account): Promise<[string, string]> => {
        const claims = await redis.hgetall(K.keysRolled(account));
        const from = Object.keys(claims).find((old) => bare(claims[old]!) === id);
        return [account, from ?? ''];
      }),
    );
  };

  return {
    kind: 'redis',
    redis: pipe && redis instanceof Redis ? limiterClient(redis, pipe) : redis,

    createKey: (hash, r, caps = {}) =>
      guard(
        (async () => {
          // Counted first, under the caps (atomic in the account's slot); the record and its id index are
          // other slots, written after. A listed id whose record is not written yet is skipped by listKeys.
          const day = r.created_at.slice(0, 10);
          const addKey = () =>
            s.tgAddKey(
              K.accountKeys(r.account),
              K.keysMade(r.account, day),
              K.keysRolled(r.account),
              r.id,
              caps.maxPerAccount ?? 0,
              caps.maxMadePerDay ?? 0,
              KEYS_MADE_TTL_SECONDS,
              r.rolled_from ?? '',
            );
          let added = await addKey();
          if (typeof added === 'string' && r.rolled_from) {
            const met = await claimAfterWait(r.account, r.rolled_from, added);
            // A successor that will never be stored: its claim is dropped (compare and delete, with its place
            // in the key set; another roll may have dropped it first). Then, as for a claim that changed
            // meanwhile (confirmed, dropped, or freed by its own roll's undo), the claim is asked again, once:
            // the answer names the claim as it is now, or this roll takes it.
            if (met === 'failed') {
              const dropped = bare(added);
              if ((await s.tgDropClaim(K.keysRolled(r.account), K.accountKeys(r.account), r.rolled_from, added, dropped)) === 1) {
                // What that roll stored of its successor goes too: never confirmed (or gone), its key was never
                // shown, and its record would authenticate for good (a roll that died between its writes).
                const h = await redis.get(K.keyIdIndex(dropped));
                if (h) await redis.del(K.keyRecord(h));
                await redis.del(K.keyIdIndex(dropped));
              }
            }
            if (met !== 'standing') added = await addKey();
          }
          if (typeof added === 'string') return { rolledTo: bare(added) };
          if (added !== 1) return added === 0 ? 'held_cap' : 'daily_cap';
          const { name, active, rate_limits, version, ...rest } = r;
          // A create whose writes failed, undone as far as Redis lets: the record first (it is what
          // authenticates; a write that timed out may still have landed), then the index. Give the slot back:
          // a key that was never stored must not count against the account's held keys. The day's count keeps
          // it (a failed create costs a unit of the daily bound, nothing more). A roll's claim on its old key
          // goes too, so the old key may be rolled again. Before, a failed roll left the record behind: a key
          // nobody was ever shown that authenticated for good.
          const undo = async () => {
            await redis.del(K.keyRecord(hash)).catch(() => {});
            await Promise.all([
              redis.del(K.keyIdIndex(r.id)).catch(() => {}),
              redis.srem(K.accountKeys(r.account), r.id).catch(() => {}),
              r.rolled_from ? s.tgForgetRoll(K.keysRolled(r.account), r.id, r.rolled_from).catch(() => {}) : undefined,
            ]);
          };
          try {
            await redis.hset(K.keyRecord(hash), {
              rec: JSON.stringify(rest),
              name,
              active: active ? '1' : '0',
              rl: rate_limits ? JSON.stringify(rate_limits) : '',
              v: String(version),
            });
            await redis.set(K.keyIdIndex(r.id), hash);
          } catch (e) {
            await undo();
            throw e;
          }
          let confirmed = 1;
          try {
            if (r.rolled_from) confirmed = (await s.tgConfirmRoll(K.keysRolled(r.account), r.rolled_from, r.id)) as number;
          } catch (e) {
            // The claim may be confirmed or still pending (a timeout does not say): either way the key was
            // never shown, so it is undone, and its claim with it (forget-roll.lua compares first).
            await undo();
            throw e;
          }
          if (r.rolled_from && confirmed !== 1) {
            // Too slow: another roll found this claim still pending after its wait and dropped it (with this
            // key's place in the key set), so it may have made a successor of its own. This key is undone
            // (it was never shown) and the roll answers as a second one would.
            await undo(); // forget-roll.lua leaves the claim alone: it no longer names this key
            const claim = await redis.hget(K.keysRolled(r.account), r.rolled_from);
            return { rolledTo: claim ? bare(claim) : '' };
          }
          return 'created';
        })(),
      ),
    getKeyByHash: (hash) => guard(redis.hgetall(K.keyRecord(hash)).then(parseKey)),
    async scanKeys(onBatch) {
      const nodes = cluster ? (redis as import('ioredis').Cluster).nodes('master') : [redis as import('ioredis').Redis];
      for (const node of nodes) {
        let cursor = '0';
        do {
          const [next, names] = await node.scan(cursor, 'MATCH', K.keyRecord('*'), 'COUNT', 500);
          cursor = next;
          const records = await Promise.all(names.map((n) => node.hgetall(n).then(parseKey)));
          onBatch(records.filter((r): r is KeyRecord => r !== null));
        } while (cursor !== '0');
      }
    },
    getKey: (id) =>
      guard(
        (async () => {
          const hash = await redis.get(K.keyIdIndex(id));
          const record = hash ? parseKey(await redis.hgetall(K.keyRecord(hash))) : null;
          return hash && record ? { record, hash } : null;
        })(),
      ),
    listKeys: (acct) =>
      guard(
        (async () => {
          const ids = await redis.smembers(K.accountKeys(acct));
          const found = await Promise.all(
            ids.map(async (id) => {
              const hash = await redis.get(K.keyIdIndex(id));
              return hash ? parseKey(await redis.hgetall(K.keyRecord(hash))) : null;
            }),
          );
          return found
            .filter((r): r is KeyRecord => r !== null)
            .sort((a, b) => a.created_at.localeCompare(b.created_at) || a.id.localeCompare(b.id));
        })(),
      ),
    updateKey: (id, patch: KeyPatch) =>
      guard(
        (async () => {
          const hash = await redis.get(K.keyIdIndex(id));
          if (!hash) return null;
          const fields: Record<string, string> = {};
          if (patch.name !== undefined) fields.name = patch.name;
          if (patch.active !== undefined) fields.active = patch.active ? '1' : '0';
          if (patch.rate_limits !== undefined) fields.rl = patch.rate_limits ? JSON.stringify(patch.rate_limits) : '';
          if (patch.scopes !== undefined) fields.sc = JSON.stringify(patch.scopes);
          if (patch.expires_at !== undefined) fields.exp = patch.expires_at ?? '';
          if (patch.budget !== undefined) fields.bud = patch.budget ? JSON.stringify(patch.budget) : '';
          const key = K.keyRecord(hash);
          const m = redis.multi();
          if (Object.keys(fields).length > 0) m.hset(key, fields);
          const res = await m.hincrby(key, 'v', 1).hgetall(key).exec();
          const all = res?.at(-1);
          if (!all || all[0]) throw all?.[0] ?? new Error('update failed');
          const record = parseKey(all[1] as Record<string, string>);
          // A delete landed between the index read and the MULTI: the patch made a partial hash; drop it.
          if (!record) await redis.del(key);
          return record ? { record, hash } : null;
        })(),
      ),
    deleteKey: (id) =>
      guard(
        (async () => {
          const hash = await redis.get(K.keyIdIndex(id));
          if (!hash) return null;
          const record = parseKey(await redis.hgetall(K.keyRecord(hash)));
          if (!record) {
            // Half-deleted: the record is gone but the index is not (a delete whose other writes failed, by
            // this version or an older one that sent them all at once). Its account and old key were in the
            // record, so they are looked up (a SCAN, as the console's account list does: this path is rare),
            // the cleanup is finished, and the delete answers as one (docs/keys.md "Deletion"). Before, this
            // was a 404 that left the key's place under the held cap, its claims and its last use for good.
            for (const [account, rolledFrom] of await accountsOfGoneKey(id)) await forgetKey(account, id, rolledFrom);
            await redis.del(K.keyIdIndex(id));
            return { record: null, hash };
          }
          // The record first, on its own: it is what authenticates. Were it to fail while the rest landed
          // (another node on Cluster), the key would still work with its index gone — a retried DELETE a 404 —
          // and its claim freed for a second successor. Failed here, nothing else is done and a retry finds it.
          await redis.del(K.keyRecord(hash));
          await forgetKey(record.account, id, record.rolled_from ?? '');
          // The id index last: should anything above fail, a retried DELETE still finds the key (above).
          await redis.del(K.keyIdIndex(id));
          return { record, hash };
        })(),
      ),
    keySpend: (acct, keyId, period, nowMs) => guard(redis.hgetall(K.keyBudget(acct, keyId, period)).then((h) => budgetCounter(h, nowMs))),

    grant: (acct, amount, idem, note, ts) =>
      guard(
        (async () => {
          // Indexed for the export (SPEC §10) in the same flush as the grant; a separate key (SPEC §11).
          const [, reply] = await Promise.all([
            redis.sadd(K.LEDGER_ACCOUNTS, acct),
            s.tgGrant(K.balance(acct), K.ledger(acct), K.idempotency(acct), amount, idem ?? '', note ?? '', ts, MAX_BALANCE_MICROS),
          ]);
          const [entryId, outcome, bal, held] = reply as [string, number, number, number];
          return {
            account: acct,
            balance_micros: bal,
            held_micros: held,
            entry_id: entryId,
            replayed: outcome === 1,
            ...(outcome === 2 && { outOfRange: true }),
          };
        })(),
      ),
    getAccount: (acct) => guard(readAccount(acct)),
    ledger: (acct, after, limit) =>
      guard(
        (async () => {
          const stream = K.ledger(acct);
          return ledgerAfter(
            (start, count) => redis.xrange(stream, start, '+', 'COUNT', count) as Promise<[string, string[]][]>,
            after || undefined,
            limit,
          );
        })(),
      ),
    hold: (acct, requestId, amount, expiresAt, budget) => guard(credit.hold(acct, requestId, amount, expiresAt, budget)),
    settle: (i) => guard(credit.settle(i)),
    holdBucketDue: credit.holdBucketDue,
    reapExpiredHolds: (nowMs, ts) => guard(credit.reapExpiredHolds(nowMs, ts)),
    ...(credit.leaseStats && { leaseStats: credit.leaseStats }),
    hurry: credit.hurry,

    ...redisShareStore(redis, s),

    publish: (msg) => guard(redis.publish(K.INVALIDATION_CHANNEL, encodeInvalidation(msg)).then(() => undefined)),
    onInvalidation(handler) {
      handlers.push(handler);
    },

    async ping() {
      try {
        // Ready means a live request can be served: the pipe carries its hold and settle.
        return (await redis.ping()) === 'PONG' && (!pipe || pipe.connected);
      } catch {
        return false;
      }
    },
    ...redisConsoleStore(redis),
    ...redisExportStore(redis, s.tgLedgerExport, s.tgUsageFlush, s.tgLastUsed),
    onPossibleLoss(listener) {
      lossListeners.push(listener);
    },
    async close() {
      closing = true;
      for (const r of waitingRunId) r(false);
      waitingRunId = [];
      handlers.length = 0;
      await credit.closeLeases();
      pipe?.close();
      await Promise.allSettled([sub.quit(), redis.quit()]);
      sub.disconnect();
      redis.disconnect();
    },
  };
}
