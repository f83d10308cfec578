/**
 * The Redis store (production). Money moves only inside Lua scripts (lua/*.lua, registered once with
 * defineCommand); every key a script touches is passed through KEYS. Any Redis failure surfaces as
 * 503 `store_unavailable`, and the client is set up to fail fast instead of queueing (NOTES §1).
 */
import { readFile } from 'node:fs/promises';
import { Cluster, Redis } from 'ioredis';
import { GatewayError } from '../http/errors.ts';
import * as K from './redis-keys.ts';
import { createRedisCredit } from './redis-credit.ts';
import { limiterClient } from './limiter-client.ts';
import { createScriptPipe, luaScript, type LuaScript, type PipeTarget, type ScriptPipe } from './script-pipe.ts';
import {
  decodeInvalidation,
  encodeInvalidation,
  type AccountState,
  type ConsoleGrant,
  type ConsoleSession,
  type Invalidation,
  type KeyPatch,
  type KeyRecord,
  type LedgerEntry,
  type Scope,
  type ShareRecord,
  type Store,
  type UsageCell,
} from './types.ts';
import { dayEndsAtSeconds, daysBetween, parseUsageHash, usageField } from './usage-fields.ts';

type Client = Redis | Cluster;
type ScriptFn = (...args: (string | number)[]) => Promise<unknown>;

/**
 * Lua scripts by command name: [file, number of keys]. The hold bucket index is global (SPEC §11), so it
 * is never a key of these scripts: redis-credit.ts writes it beside them.
 */
const SCRIPTS = {
  tgGrant: ['grant', 3],
  tgHold: ['hold', 2],
  // Called with 3 keys or 5 (settle.lua): null = the key count is the call's first argument (ioredis).
  tgSettle: ['settle', null],
  // A batch of buckets, 3 keys each (reap-bucket.lua).
  tgReapBucket: ['reap-bucket', null],
  tgLegacyReap: ['legacy-reap', 3],
  tgRevokeShare: ['revoke-share', 1],
  tgShareQuota: ['share-quota', 1],
  tgLedgerExport: ['ledger-export', 3],
} as const;

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
}

/** Builds the ioredis client the way NOTES §1 recommends for a hot path: fail fast, autopipeline. */
export function createRedisClient(o: Pick<RedisStoreOptions, 'url' | 'clusterNodes' | 'commandTimeoutMs'>): Client {
  // ioredis 6's default protocol (RESP3). RESP2 measured the same client CPU per hold + settle when the
  // cases are interleaved (28.9 vs 28.2 µs, bench/micro/redis-client.bench.ts), so nothing is gained by it.
  const common = { lazyConnect: true, maxRetriesPerRequest: 1, commandTimeout: o.commandTimeoutMs, enableAutoPipelining: true } as const;
  if (o.clusterNodes && o.clusterNodes.length > 0) {
    const nodes = o.clusterNodes.map((n) => {
      const u = new URL(n.includes('://') ? n : `redis://${n}`);
      return { host: u.hostname, port: Number(u.port || 6379) };
    });
    return new Cluster(nodes, {
      lazyConnect: true,
      enableAutoPipelining: true,
      redisOptions: { maxRetriesPerRequest: 1, commandTimeout: o.commandTimeoutMs },
    });
  }
  return new Redis(o.url ?? 'redis://127.0.0.1:6379', common);
}

function unavailable(err: unknown): GatewayError {
  return new GatewayError('store_unavailable', 'The credit and key store is unavailable; try again shortly.', { cause: err });
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
): ScriptPipe | undefined {
  if (redis instanceof Cluster) return undefined;
  const opts = redis.options as PipeTarget & { sentinels?: unknown[] | null };
  if (opts.sentinels && opts.sentinels.length > 0) return undefined;
  const { host, port, path, family, tls, username, password, db } = opts;
  return createScriptPipe({ target: { host, port, path, family, tls, username, password, db }, commandTimeoutMs, onError, scripts });
}

/** Wraps a store call so any Redis failure becomes store_unavailable. */
async function guard<T>(p: Promise<T>): Promise<T> {
  try {
    return await p;
  } catch (e) {
    throw e instanceof GatewayError ? e : unavailable(e);
  }
}

function parseKey(h: Record<string, string>): KeyRecord | null {
  if (!h.rec) return null;
  const base = JSON.parse(h.rec) as Omit<KeyRecord, 'name' | 'active' | 'rate_limits' | 'version'>;
  // `sc`: scopes set by a patch after creation (the creation record `rec` is never rewritten).
  return {
    ...base,
    ...(h.sc && { scopes: JSON.parse(h.sc) as Scope[] }),
    name: h.name ?? '',
    active: h.active === '1',
    rate_limits: h.rl ? JSON.parse(h.rl) : null,
    version: Number(h.v ?? 0),
  };
}

const NUMERIC = new Set(['amount_micros', 'prompt_tokens', 'completion_tokens', 'hold_micros']);

function parseEntry([id, fields]: [string, string[]]): LedgerEntry {
  const e: Record<string, unknown> = { id };
  for (let i = 0; i < fields.length; i += 2) e[fields[i]!] = NUMERIC.has(fields[i]!) ? Number(fields[i + 1]) : fields[i + 1];
  return e as unknown as LedgerEntry;
}

function parseShare(h: Record<string, string> | string[]): ShareRecord | null {
  const o: Record<string, string> = {};
  if (Array.isArray(h)) for (let i = 0; i < h.length; i += 2) o[h[i]!] = h[i + 1]!;
  else Object.assign(o, h);
  if (!o.slug) return null;
  return {
    slug: o.slug,
    account: o.account ?? '',
    created_at: o.created_at ?? '',
    snapshot: o.snapshot ?? '{}',
    files: JSON.parse(o.files ?? '[]'),
    revoked_at: o.revoked_at || null,
  };
}

const exportKeys = (acct: string) => [K.exportLease(acct), K.exportState(acct), K.ledger(acct)] as const;

/** The hash fields of a rebuild's cells (absolute values). */
function usageHashFields(cells: readonly UsageCell[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (const c of cells) {
    out[usageField(c.key_id, c.model, 'r')] = String(c.requests);
    out[usageField(c.key_id, c.model, 'p')] = String(c.prompt_tokens);
    out[usageField(c.key_id, c.model, 'c')] = String(c.completion_tokens);
    out[usageField(c.key_id, c.model, '$')] = String(c.cost_micros);
  }
  return out;
}

/** Connects (or keeps retrying in the background) and returns the Redis-backed store. */
export async function createRedisStore(o: RedisStoreOptions & { client?: Client }): Promise<Store> {
  const redis = o.client ?? createRedisClient(o);
  const onError = o.onError ?? (() => {});
  redis.on('error', onError);
  const scripts: Record<string, ScriptFn> = {};
  const lua: Record<string, LuaScript> = {};
  for (const [name, [file, numberOfKeys]] of Object.entries(SCRIPTS)) {
    lua[file] ??= luaScript(await readFile(new URL(`./lua/${file}.lua`, import.meta.url), 'utf8'));
    redis.defineCommand(name, { ...(numberOfKeys === null ? {} : { numberOfKeys }), lua: lua[file]!.lua });
    scripts[name] = (...args) => (redis as unknown as Record<string, ScriptFn>)[name]!(...args);
  }
  // Single node: hold and settle, the two scripts of every live request, take the lean pipe (script-pipe.ts).
  const pipe = o.scriptPipe === false ? undefined : pipeFor(redis, o.commandTimeoutMs, onError, [lua.hold!, lua.settle!]);
  if (pipe) await pipe.ready.catch(onError);
  // Not ioredis' autoResubscribe: it re-subscribes after a reconnect without a handler on the reply, so a
  // close (or another drop) before that reply arrives is an unhandled rejection, "Connection is closed."
  // (CI, limits-outage). The 'ready' listener below does the same with the error handled.
  const cluster = redis instanceof Cluster;
  const sub: Client = cluster ? redis.duplicate() : redis.duplicate({ autoResubscribe: false });
  sub.on('error', onError);
  const handlers: ((m: Invalidation) => void)[] = [];
  sub.on('message', (_channel: string, message: string) => {
    const m = decodeInvalidation(message);
    if (m) for (const h of handlers) h(m);
  });
  if (redis.status === 'wait') await redis.connect().catch(onError);
  if (sub.status === 'wait') await sub.connect().catch(onError);
  await sub.subscribe(K.INVALIDATION_CHANNEL).catch(onError);
  // After a reconnect (or a first connect that failed above); subscribing twice is harmless.
  if (!cluster) sub.on('ready', () => void sub.subscribe(K.INVALIDATION_CHANNEL).catch(onError));

  const s = scripts as Record<keyof typeof SCRIPTS, ScriptFn>;
  const credit = createRedisCredit({
    redis,
    pipe,
    scripts: s,
    lua: { hold: lua.hold!, settle: lua.settle! },
    onError,
    reapedTtlSeconds: o.settledTtlSeconds,
    holdTtlMs: o.holdTtlMs,
    bucketMs: o.bucketMs,
  });
  const readAccount = async (acct: string): Promise<AccountState> => {
    const [bal, held] = await redis.hmget(K.balance(acct), 'balance', 'held');
    return { id: acct, balance_micros: Number(bal ?? 0), held_micros: Number(held ?? 0) };
  };

  return {
    kind: 'redis',
    redis: pipe && redis instanceof Redis ? limiterClient(redis, pipe) : redis,

    createKey: (hash, r) =>
      guard(
        (async () => {
          const { name, active, rate_limits, version, ...rest } = r;
          await redis.hset(K.keyRecord(hash), {
            rec: JSON.stringify(rest),
            name,
            active: active ? '1' : '0',
            rl: rate_limits ? JSON.stringify(rate_limits) : '',
            v: String(version),
          });
          await Promise.all([redis.set(K.keyIdIndex(r.id), hash), redis.sadd(K.accountKeys(r.account), r.id)]);
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
          const key = K.keyRecord(hash);
          const m = redis.multi();
          if (Object.keys(fields).length > 0) m.hset(key, fields);
          const res = await m.hincrby(key, 'v', 1).hgetall(key).exec();
          const all = res?.at(-1);
          if (!all || all[0]) throw all?.[0] ?? new Error('update failed');
          const record = parseKey(all[1] as Record<string, string>);
          return record ? { record, hash } : null;
        })(),
      ),

    grant: (acct, amount, idem, note, ts) =>
      guard(
        (async () => {
          // Indexed for the export (SPEC §10) in the same flush as the grant; a separate key (SPEC §11).
          const [, reply] = await Promise.all([
            redis.sadd(K.LEDGER_ACCOUNTS, acct),
            s.tgGrant(K.balance(acct), K.ledger(acct), K.idempotency(acct), amount, idem ?? '', note ?? '', ts),
          ]);
          const [entryId, replayed, bal, held] = reply as [string, number, number, number];
          return { account: acct, balance_micros: bal, held_micros: held, entry_id: entryId, replayed: replayed === 1 };
        })(),
      ),
    getAccount: (acct) => guard(readAccount(acct)),
    ledger: (acct, after, limit) =>
      guard(
        (async () => {
          const rows = await redis.xrange(K.ledger(acct), after ? `(${after}` : '-', '+', 'COUNT', limit);
          return (rows as [string, string[]][]).map(parseEntry);
        })(),
      ),
    hold: (acct, requestId, amount, expiresAt) => guard(credit.hold(acct, requestId, amount, expiresAt)),
    settle: (i) => guard(credit.settle(i)),
    reapExpiredHolds: (nowMs, ts) => guard(credit.reapExpiredHolds(nowMs, ts)),

    putShare: (r) =>
      guard(
        Promise.all([
          redis.hset(K.share(r.slug), {
            slug: r.slug,
            account: r.account,
            created_at: r.created_at,
            snapshot: r.snapshot,
            files: JSON.stringify(r.files),
            revoked_at: r.revoked_at ?? '',
          }),
          redis.zadd(K.shareList(r.account), Date.parse(r.created_at) || 0, r.slug),
        ]).then(() => undefined),
      ),
    getShare: (slug) => guard(redis.hgetall(K.share(slug)).then(parseShare)),
    reserveShareQuota: (account, slug, bytes, l) =>
      guard(s.tgShareQuota(K.shareQuota(account), 'reserve', slug, bytes, l.maxCount, l.maxBytes) as Promise<'ok' | 'count' | 'bytes'>),
    releaseShareQuota: (account, slug) =>
      guard((s.tgShareQuota(K.shareQuota(account), 'release', slug, 0, 0, 0) as Promise<number>).then(() => undefined)),
    revokeShare: (slug, ts) =>
      guard((s.tgRevokeShare(K.share(slug), ts) as Promise<string[] | null>).then((h) => (h ? parseShare(h) : null))),

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
    putLoginToken: (hash, grant, ttl) => guard(redis.set(K.consoleLogin(hash), JSON.stringify(grant), 'EX', ttl).then(() => undefined)),
    takeLoginToken: (hash) => guard(redis.getdel(K.consoleLogin(hash)).then((v) => (v ? (JSON.parse(v) as ConsoleGrant) : null))),
    putSession: (hash, session, ttl) =>
      guard(
        (async () => {
          await redis.set(K.consoleSession(hash), JSON.stringify(session), 'EX', ttl);
          if (session.account === null) return;
          // The index lives as long as its longest-lived session (NX: a new index; GT: only ever extended,
          // so a short session cannot expire it under a longer one). Members of ended sessions are harmless.
          const index = K.consoleSessions(session.account);
          await Promise.all([redis.sadd(index, hash), redis.expire(index, ttl, 'NX'), redis.expire(index, ttl, 'GT')]);
        })(),
      ),
    getSession: (hash) => guard(redis.get(K.consoleSession(hash)).then((v) => (v ? (JSON.parse(v) as ConsoleSession) : null))),
    deleteSession: (hash) => guard(redis.del(K.consoleSession(hash)).then(() => undefined)),
    deleteAccountSessions: (acct) =>
      guard(
        (async () => {
          const index = K.consoleSessions(acct);
          const hashes = await redis.smembers(index);
          // One key per DEL: session keys live in different Cluster slots.
          const deleted = await Promise.all(hashes.map((h) => redis.del(K.consoleSession(h))));
          await redis.del(index);
          return deleted.reduce((n, d) => n + d, 0);
        })(),
      ),
    listAccounts: (search, limit) =>
      guard(
        (async () => {
          const needle = search.toLowerCase();
          const ids = new Set<string>();
          const nodes = cluster ? (redis as Cluster).nodes('master') : [redis as Redis];
          for (const node of nodes) {
            let cursor = '0';
            do {
              const [next, names] = await node.scan(cursor, 'MATCH', K.ACCOUNT_KEYS_PATTERN, 'COUNT', 1000);
              cursor = next;
              for (const n of names) {
                const id = K.ACCOUNT_OF_KEY.exec(n)?.[1];
                if (id !== undefined && id.toLowerCase().includes(needle)) ids.add(id);
              }
            } while (cursor !== '0');
          }
          return [...ids].sort().slice(0, limit);
        })(),
      ),
    ledgerBefore: (acct, before, limit) =>
      guard(
        (async () => {
          const rows = await redis.xrevrange(K.ledger(acct), before ? `(${before}` : '+', '-', 'COUNT', limit);
          return (rows as [string, string[]][]).map(parseEntry);
        })(),
      ),
    listShares: (acct, limit) =>
      guard(
        (async () => {
          const slugs = await redis.zrevrange(K.shareList(acct), 0, limit - 1);
          const found = await Promise.all(slugs.map((slug) => redis.hgetall(K.share(slug)).then(parseShare)));
          return found.filter((r): r is ShareRecord => r !== null);
        })(),
      ),
    indexLedgerAccounts: (accounts) =>
      guard(accounts.length === 0 ? Promise.resolve() : redis.sadd(K.LEDGER_ACCOUNTS, ...accounts).then(() => undefined)),
    scanLedgerAccounts: (onBatch) =>
      guard(
        (async () => {
          let cursor = '0';
          do {
            const [next, members] = await redis.sscan(K.LEDGER_ACCOUNTS, cursor, 'COUNT', 500);
            cursor = next;
            if (members.length > 0) await onBatch(members);
          } while (cursor !== '0');
        })(),
      ),
    backfillLedgerIndex: () =>
      guard(
        (async () => {
          const nodes = cluster ? (redis as Cluster).nodes('master') : [redis as Redis];
          let found = 0;
          for (const node of nodes) {
            let cursor = '0';
            do {
              const [next, names] = await node.scan(cursor, 'MATCH', K.ledger('*'), 'COUNT', 1000);
              cursor = next;
              const accounts = names.map((n) => n.slice('{acct:'.length, -'}:ledger'.length));
              if (accounts.length > 0) await redis.sadd(K.LEDGER_ACCOUNTS, ...accounts);
              found += accounts.length;
            } while (cursor !== '0');
          }
          return found;
        })(),
      ),
    exportState: (acct) =>
      guard(
        redis
          .hmget(K.exportState(acct), 'cursor', 'archived_before')
          .then(([cursor, archived]) => ({ cursor: cursor || null, archived_before: archived || null })),
      ),
    acquireExportLease: (acct, token, ttlMs) =>
      guard((s.tgLedgerExport(...exportKeys(acct), 'lease', token, ttlMs) as Promise<number>).then((r) => r === 1)),
    releaseExportLease: (acct, token) =>
      guard((s.tgLedgerExport(...exportKeys(acct), 'release', token) as Promise<number>).then(() => undefined)),
    commitExport: (acct, token, from, to) =>
      guard((s.tgLedgerExport(...exportKeys(acct), 'commit', token, from ?? '', to) as Promise<number>).then((r) => r === 1)),
    trimLedger: (acct, beforeId) => guard(s.tgLedgerExport(...exportKeys(acct), 'trim', beforeId) as Promise<number>),

    flushUsage: (f) =>
      guard(
        (async () => {
          // Every command is issued in this one turn: ioredis' autopipelining sends them as one pipeline
          // per node, and each is single-key, so Cluster never sees a cross-slot pipeline (NOTES §1).
          const sent: Promise<unknown>[] = [];
          const expiring = new Set<string>();
          for (const c of f.cells) {
            const key = K.usageDay(c.account, c.day);
            if (c.requests) sent.push(redis.hincrby(key, usageField(c.key_id, c.model, 'r'), c.requests));
            if (c.prompt_tokens) sent.push(redis.hincrby(key, usageField(c.key_id, c.model, 'p'), c.prompt_tokens));
            if (c.completion_tokens) sent.push(redis.hincrby(key, usageField(c.key_id, c.model, 'c'), c.completion_tokens));
            if (c.cost_micros) sent.push(redis.hincrby(key, usageField(c.key_id, c.model, '$'), c.cost_micros));
            if (!expiring.has(key)) {
              expiring.add(key);
              sent.push(redis.expireat(key, dayEndsAtSeconds(c.day, f.retentionDays)));
            }
          }
          for (const u of f.lastUsed) sent.push(redis.hset(K.keysUsed(u.account), u.key_id, u.at));
          if (f.ledgerAccounts.length > 0) sent.push(redis.sadd(K.LEDGER_ACCOUNTS, ...f.ledgerAccounts));
          await Promise.all(sent);
        })(),
      ),
    usageCells: (acct, from, to) =>
      guard(
        (async () => {
          const days = daysBetween(from, to);
          const hashes = await Promise.all(days.map((d) => redis.hgetall(K.usageDay(acct, d))));
          return hashes.flatMap((h, i) => parseUsageHash(days[i]!, h));
        })(),
      ),
    replaceUsage: (acct, day, keyIds, cells, retentionDays) =>
      guard(
        (async () => {
          const key = K.usageDay(acct, day);
          const replaced = new Set(keyIds);
          const stale = Object.keys(await redis.hgetall(key)).filter((f) => replaced.has(f.slice(0, f.indexOf('|'))));
          const fields = usageHashFields(cells);
          const m = redis.multi();
          if (stale.length > 0) m.hdel(key, ...stale);
          if (Object.keys(fields).length > 0) m.hset(key, fields);
          m.expireat(key, dayEndsAtSeconds(day, retentionDays));
          await m.exec();
        })(),
      ),
    lastUsed: (acct) => guard(redis.hgetall(K.keysUsed(acct))),

    async close() {
      handlers.length = 0;
      pipe?.close();
      await Promise.allSettled([sub.quit(), redis.quit()]);
      sub.disconnect();
      redis.disconnect();
    },
  };
}
