/**
 * The shares' part of the Redis store (SPEC §1.4, §12, §13). Redis holds records, never snapshots:
 *
 * - `tg:share:<slug>`: a small hash `a` (account), `c` (created_at), `b` (snapshot bytes), `n` (how many
 *   files, only when there are files), `r` (revoked_at, once revoked). The snapshot and the file list are
 *   objects in S3 (no user content in Redis, SPEC §13). Records of earlier layouts (`slug`, `account`,
 *   `created_at`, `snapshot`, `files`, `revoked_at`; or the compact one with the file list in `f`) are
 *   read as they are until the migration rewrites them (share-compact.lua).
 *   A revoked share's record is a tombstone `a`, `c`, `r` that expires after shares.revoked_retention_seconds
 *   (revoke-share.lua).
 * - `{acct:<id>}:shares`: the account's quota totals and one field per live share (share-quota.lua), which
 *   is also the console's list (the previous layout's `{acct:<id>}:share-list` is still read).
 * - `{acct:<id>}:shares-revoked`: the account's remembered revoked shares (score: revoke ms), at most
 *   shares.max_revoked_per_account; the tombstones of those pushed out are deleted, so Redis per account is
 *   bounded whatever the create/revoke churn.
 * - `tg:share-pending`: creates in progress (score: when), so an object whose record was never written
 *   is found and deleted (the orphan sweep, shares/janitor.ts).
 * - `tg:share-migration` + `:lease`: the migration's saved cursor, whether it is over (`done`, and `files`
 *   since file lists moved out too), and which instance runs it now.
 *
 * Measured (bench/results/shares-soak.md): MEMORY USAGE ~150 B per record (≤ ~160 B with 20 files: only
 * their count) + ~85 B per index field; 10,000
 * shares of 500 KB grew used_memory by 2.74 MiB (287 B per share, the keyspace's own overhead included).
 */
import { Cluster, Redis } from 'ioredis';
import * as K from './redis-keys.ts';
import { guard, parseShare } from './redis-records.ts';
import { DEFAULT_REVOKED_KEEP, shareFileCount, type Store, type ShareRecord } from './types.ts';

type ScriptFn = (...args: (string | number)[]) => Promise<unknown>;

export type ShareStore = Pick<
  Store,
  | 'putShare'
  | 'getShare'
  | 'reserveShareQuota'
  | 'releaseShareQuota'
  | 'revokeShare'
  | 'markSharePending'
  | 'clearSharePending'
  | 'deferSharePending'
  | 'duePendingShares'
  | 'scanLegacyShares'
  | 'compactShare'
  | 'claimShareMigration'
  | 'saveShareMigration'
  | 'listShares'
>;

const SLUG_LEN = 22;

/**
 * The compact record's fields (no slug: it is the key; no snapshot and no file list: they are objects,
 * written before the record; only the number of files, so a read knows whether to fetch the list).
 */
export function compactShareFields(r: ShareRecord): Record<string, string> {
  const n = shareFileCount(r);
  return {
    a: r.account,
    c: r.created_at,
    b: String(r.bytes),
    ...(n > 0 && { n: String(n) }),
    ...(r.revoked_at !== null && { r: r.revoked_at }),
  };
}

/** The account's share-index field value for a live share: `<created ms>:<bytes>`, base 36 (fewer bytes). */
function indexValue(createdMs: number, bytes: number): string {
  return `${Math.max(0, Math.floor(createdMs)).toString(36)}:${bytes.toString(36)}`;
}

/** The masters to walk, in a stable order (the migration's cursor names one by its index). */
function scanNodes(redis: Redis | Cluster): Redis[] {
  if (!(redis instanceof Cluster)) return [redis];
  return redis.nodes('master').sort((x, y) => `${x.options.host}:${x.options.port}`.localeCompare(`${y.options.host}:${y.options.port}`));
}

export function redisShareStore(
  redis: Redis | Cluster,
  s: { tgRevokeShare: ScriptFn; tgShareQuota: ScriptFn; tgShareCompact: ScriptFn },
): ShareStore {
  const readShare = (slug: string) => redis.hgetall(K.share(slug)).then((h) => parseShare(h, slug));
  return {
    putShare: (r) => guard(redis.hset(K.share(r.slug), compactShareFields(r)).then(() => undefined)),
    getShare: (slug) => guard(readShare(slug)),
    reserveShareQuota: (account, slug, bytes, l, createdMs) =>
      guard(
        s.tgShareQuota(
          K.shareQuota(account),
          K.ledger(account),
          K.shareRevoked(account),
          'reserve',
          slug,
          bytes,
          l.maxCount,
          l.maxBytes,
          l.unfundedMaxCount,
          indexValue(createdMs, bytes),
        ) as Promise<'ok' | 'count' | 'bytes' | 'unfunded'>,
      ),
    releaseShareQuota: (account, slug, how = 'revoked', keep = DEFAULT_REVOKED_KEEP) =>
      guard(
        (async () => {
          const out = (await s.tgShareQuota(
            K.shareQuota(account),
            K.ledger(account),
            K.shareRevoked(account),
            how === 'dropped' ? 'drop' : 'release',
            slug,
            Date.now(),
            keep.maxPerAccount,
            Math.max(1, Math.floor(keep.retentionMs)),
          )) as (number | string)[];
          // Tombstones pushed out of the account's revoked set: each its own key (another slot on a Cluster).
          // One that is not deleted (a failed call) still expires with its retention.
          const pushedOut = out.slice(1) as string[];
          if (pushedOut.length > 0) await Promise.all(pushedOut.map((g) => redis.del(K.share(g))));
        })(),
      ),
    revokeShare: (slug, ts, keep = DEFAULT_REVOKED_KEEP) =>
      guard(
        (s.tgRevokeShare(K.share(slug), ts, Math.max(1, Math.floor(keep.retentionMs))) as Promise<string[] | null>).then((h) =>
          h ? parseShare(h, slug) : null,
        ),
      ),

    markSharePending: (p, atMs) => guard(redis.zadd(K.SHARES_PENDING, atMs, p.slug + p.account).then(() => undefined)),
    clearSharePending: (p) => guard(redis.zrem(K.SHARES_PENDING, p.slug + p.account).then(() => undefined)),
    // XX: an intent cleared meanwhile stays cleared; GT: one marked again meanwhile (newer) keeps its time.
    deferSharePending: (p, atMs) => guard(redis.zadd(K.SHARES_PENDING, 'XX', 'GT', atMs, p.slug + p.account).then(() => undefined)),
    duePendingShares: (beforeMs, limit) =>
      guard(
        redis
          .zrangebyscore(K.SHARES_PENDING, '-inf', beforeMs, 'LIMIT', 0, limit)
          .then((ms) => ms.map((m) => ({ slug: m.slice(0, SLUG_LEN), account: m.slice(SLUG_LEN) }))),
      ),

    scanLegacyShares: (cursor, count) =>
      guard(
        (async () => {
          // Cursor `<node index>:<SCAN cursor>`: on Cluster each master is walked in turn.
          const nodes = scanNodes(redis);
          const [i0, c0] = cursor === '' ? [0, '0'] : [Number(cursor.slice(0, cursor.indexOf(':'))), cursor.slice(cursor.indexOf(':') + 1)];
          let i = i0;
          if (i >= nodes.length) return { cursor: '', records: [] };
          const node = nodes[i]!;
          const [next, names] = await node.scan(c0, 'MATCH', K.share('*'), 'COUNT', count);
          // Only the records that still hold a snapshot or a file list (`f`) are read whole: HEXISTS first.
          const legacy = await Promise.all(
            names.map(async (n) => (await node.hexists(n, 'snapshot')) === 1 || (await node.hexists(n, 'f')) === 1),
          );
          const slugs = names.filter((_, j) => legacy[j]).map((n) => n.slice(K.share('').length));
          const records = (await Promise.all(slugs.map((slug) => node.hgetall(K.share(slug)).then((h) => parseShare(h, slug))))).filter(
            (r): r is ShareRecord => r !== null,
          );
          if (next !== '0') return { cursor: `${i}:${next}`, records };
          i += 1;
          return { cursor: i < nodes.length ? `${i}:0` : '', records };
        })(),
      ),
    compactShare: (slug, bytes, fileCount = 0) =>
      guard((s.tgShareCompact(K.share(slug), bytes, fileCount) as Promise<number>).then((n) => n === 1)),
    claimShareMigration: (owner, ttlMs) =>
      guard(
        (async () => {
          const got = await redis.set(K.SHARES_MIGRATION_LEASE, owner, 'PX', ttlMs, 'NX');
          if (got !== 'OK') {
            if ((await redis.get(K.SHARES_MIGRATION_LEASE)) !== owner) return undefined;
            await redis.pexpire(K.SHARES_MIGRATION_LEASE, ttlMs);
          }
          // `done` was the snapshots' walk; `files` the walk that also moved file lists out (`f`): a deployment
          // whose snapshot migration was over walks once more for the file lists.
          const [cursor, moved, done, files] = await redis.hmget(K.SHARES_MIGRATION, 'cursor', 'moved', 'done', 'files');
          return done === '1' && files === '1' ? null : { cursor: cursor ?? '', moved: Number(moved ?? 0) };
        })(),
      ),
    saveShareMigration: (owner, walk) =>
      guard(
        (async () => {
          if ((await redis.get(K.SHARES_MIGRATION_LEASE)) !== owner) return;
          await redis.hset(K.SHARES_MIGRATION, walk === null ? { cursor: '', moved: 0, done: '1', files: '1' } : { ...walk, done: '0' });
        })(),
      ),

    listShares: (acct, limit) =>
      guard(
        (async () => {
          // This layout's index (field per live share, created ms in base 36), the account's revoked shares
          // still remembered (newest revoked first) and the previous layout's list.
          const [index, legacy, revoked] = await Promise.all([
            redis.hgetall(K.shareQuota(acct)),
            redis.zrevrange(K.shareList(acct), 0, limit - 1, 'WITHSCORES'),
            redis.zrevrange(K.shareRevoked(acct), 0, limit - 1),
          ]);
          const when = new Map<string, number>();
          for (const [f, v] of Object.entries(index)) {
            if (f.length === SLUG_LEN) when.set(f, parseInt(v.slice(0, v.indexOf(':')), 36));
          }
          for (let j = 0; j < legacy.length; j += 2) when.set(legacy[j]!, Number(legacy[j + 1]));
          const live = [...when].sort((x, y) => y[1] - x[1] || (x[0] < y[0] ? -1 : 1)).slice(0, limit);
          const slugs = new Set([...live.map(([slug]) => slug), ...revoked]);
          const found = (await Promise.all([...slugs].map((slug) => readShare(slug)))).filter((r): r is ShareRecord => r !== null);
          return found.sort((x, y) => Date.parse(y.created_at) - Date.parse(x.created_at) || (x.slug < y.slug ? -1 : 1)).slice(0, limit);
        })(),
      ),
  };
}
