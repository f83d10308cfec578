/**
 * The embedded store: the whole contract in one process's memory, for a single instance and for trying
 * Tollgate out. Every method runs to completion without awaiting, so each is atomic exactly like its
 * Lua counterpart in the Redis store. State is lost on restart (main.ts logs that).
 */
import { EventEmitter } from 'node:events';
import { memorySessions } from './memory-sessions.ts';
import { memoryExportStore } from './memory-export.ts';
import { bucketDue, DEFAULT_BUCKET_MS, settleBucketDue } from './hold-bucket.ts';
import { DEFAULT_REVOKED_KEEP, MAX_BALANCE_MICROS } from './types.ts';
import type {
  AccountState,
  GrantResult,
  HoldResult,
  Invalidation,
  KeyPatch,
  KeyRecord,
  LedgerEntry,
  SettleInput,
  SettleResult,
  PendingShare,
  ShareRecord,
  Store,
} from './types.ts';

/**
 * One request's record, the twin of its field in a Redis hold bucket (lua/settle.lua): open, settled,
 * reaped, or settled after a reap. `keepUntil` bounds a reaped record.
 */
type HoldRecord = { keepUntil: number } & (
  { state: 'open' | 'reaped'; amount: number } | { state: 'settled' | 'settledAfterReap'; entryId: string }
);

interface Account {
  balance: number;
  held: number;
  /** Due time of the last bucket the reaper emptied (the Redis store's `reaped` field). */
  reaped: number | undefined;
  ledger: LedgerEntry[];
  idem: Map<string, string>;
  /** Hold buckets by due time, each by request id (the Redis store's `{acct:<id>}:hb:<due>`). */
  buckets: Map<number, Map<string, HoldRecord>>;
}

export interface MemoryStoreOptions {
  /** For a settle that does not say when its hold expires (as the Redis store's option). Default 660 s. */
  holdTtlMs?: number;
  /** How long a reaped hold is remembered (the Redis store's settledTtlSeconds, in ms). Default 4260 s. */
  reapedKeepMs?: number;
  /** Hold bucket size (hold-bucket.ts bucketMsFor; default 1 s). */
  bucketMs?: number;
}

const clone = <T>(v: T): T => structuredClone(v);

/** A key budget counter: settled spend and open holds by hold bucket due time (lua/hold.lua's `s`, `h<due>`). */
interface BudgetCounter {
  spent: number;
  held: Map<number, number>;
  expireAt: number | null;
}

/** The open holds of a counter: those whose bucket is not due yet (the reaper released the others). */
function openHeld(c: BudgetCounter, nowMs: number): number {
  let held = 0;
  for (const [due, amount] of c.held) if (due > nowMs) held += amount;
  return held;
}

/** Creates an embedded store; `now` is the clock used for ledger entry ids. */
/**
 * The index of the first entry after `id` (or at it, with `inclusive`) in a ledger ordered by id; its
 * length when there is none. A binary search: a page read scanned the ledger from its start, splitting
 * every id, so with a million entries (the embedded store trims nothing without an export) each page took
 * ~300 ms of the event loop, and `credits ledger --all` or the console's CSV, a page at a time, took the
 * square of it.
 */
export function firstPast(list: readonly LedgerEntry[], id: string, inclusive: boolean): number {
  const [ms, seq] = id.split('-').map(Number) as [number, number];
  let lo = 0;
  let hi = list.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    const [m, s] = list[mid]!.id.split('-').map(Number) as [number, number];
    const past = m > ms || (m === ms && (inclusive ? s >= seq : s > seq));
    if (past) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

export function createMemoryStore(now: () => number = Date.now, opts: MemoryStoreOptions = {}): Store {
  const holdTtlMs = opts.holdTtlMs ?? 660_000;
  const reapedKeepMs = opts.reapedKeepMs ?? 4_260_000;
  const bucketMs = opts.bucketMs ?? DEFAULT_BUCKET_MS;
  const keysByHash = new Map<string, KeyRecord>();
  const hashById = new Map<string, string>();
  // Every key id an account has (disabled ones too; a deleted one leaves): the count limits.max_keys_per_account caps.
  const keyIdsByAccount = new Map<string, Set<string>>();
  // Keys made per account per UTC day (deleted ones too): the count limits.max_keys_made_per_day bounds.
  // Days two before the newest are dropped, as Redis expires them (lua/add-key.lua).
  const keysMadeByDay = new Map<string, Map<string, number>>();
  // Rolled keys: old key id → the key it was rolled to (Redis: {acct:A}:rolled, lua/add-key.lua). Ids are unique.
  const rolledTo = new Map<string, string>();
  const accounts = new Map<string, Account>();
  const shares = new Map<string, ShareRecord>();
  // Revoked shares' tombstones: when each expires (shares.revoked_retention_seconds), and per account the
  // remembered ones by revoke time, oldest first (at most shares.max_revoked_per_account), as in Redis.
  const tombstoneExpiry = new Map<string, number>();
  const revokedByAccount = new Map<string, Map<string, number>>();
  /** The per-account counts of keys made on `day` (YYYY-MM-DD); days two or more before it are forgotten. */
  const keysMadeOn = (day: string): Map<string, number> => {
    let made = keysMadeByDay.get(day);
    if (!made) {
      const stale = new Date(Date.parse(`${day}T00:00:00Z`) - 2 * 86_400_000).toISOString().slice(0, 10);
      for (const d of keysMadeByDay.keys()) if (d <= stale) keysMadeByDay.delete(d);
      keysMadeByDay.set(day, (made = new Map()));
    }
    return made;
  };
  /** The share's record, a tombstone past its retention forgotten on the way. */
  const shareOf = (slug: string): ShareRecord | undefined => {
    const until = tombstoneExpiry.get(slug);
    if (until !== undefined && until <= now()) {
      tombstoneExpiry.delete(slug);
      shares.delete(slug);
    }
    return shares.get(slug);
  };
  // Per account: the bytes of each live share counted against its quota.
  const quotas = new Map<string, Map<string, number>>();
  const budgets = new Map<string, BudgetCounter>();
  // Accounts ever granted credit (Redis: the account's ledger stream exists), for unfunded_max_per_account.
  const funded = new Set<string>();
  const pending = new Map<string, { p: PendingShare; at: number }>();
  const bus = new EventEmitter();
  const exported = memoryExportStore({
    now,
    ledgers: () => [...accounts].map(([id, a]) => [id, a.ledger] as [string, LedgerEntry[]]),
    ledgerOf: (acct) => accounts.get(acct)?.ledger,
    holdsKey: (acct, keyId) => keyIdsByAccount.get(acct)?.has(keyId) ?? false,
  });
  let lastMs = 0;
  let seq = 0;

  /** Ids shaped like Redis stream ids (`<ms>-<seq>`), strictly increasing. */
  function nextId(): string {
    const ms = Math.max(now(), lastMs);
    seq = ms === lastMs ? seq + 1 : 0;
    lastMs = ms;
    return `${ms}-${seq}`;
  }

  function account(id: string): Account {
    let a = accounts.get(id);
    if (!a) {
      a = {
        balance: 0,
        held: 0,
        reaped: undefined,
        ledger: [],
        idem: new Map(),
        buckets: new Map(),
      };
      accounts.set(id, a);
    }
    return a;
  }

  function bucketOf(a: Account, due: number): Map<string, HoldRecord> {
    let b = a.buckets.get(due);
    if (!b) a.buckets.set(due, (b = new Map()));
    return b;
  }

  /** A key's budget counter of one period (the Redis store's `{acct:<id>}:kb:<key>:<period>`), dropped once expired. */
  function budgetOf(acct: string, keyId: string, period: string, make: boolean): BudgetCounter | undefined {
    const k = `${acct}|${keyId}|${period}`;
    let c = budgets.get(k);
    if (c && c.expireAt !== null && c.expireAt <= now()) {
      budgets.delete(k);
      c = undefined;
    }
    if (!c && make) budgets.set(k, (c = { spent: 0, held: new Map(), expireAt: null }));
    return c;
  }

  /**
   * `e`'s fields in the Redis store's order (kind, amount_micros, ts, …: its XADD's and redis-records.ts
   * parseEntry's), so an entry is the same bytes from either store in the API and in the export's objects.
   */
  function append(a: Account, e: Omit<LedgerEntry, 'id'>): string {
    const id = nextId();
    a.ledger.push({ id, ...e });
    return id;
  }

  return {
    kind: 'memory',
    redis: undefined,
    snapshotTexts: new Map(),

    async createKey(hash, record, { maxPerAccount = 0, maxMadePerDay = 0 } = {}) {
      // Synchronous to the end, so the checks, the counts and the insert are atomic like lua/add-key.lua.
      const ids = keyIdsByAccount.get(record.account) ?? new Set<string>();
      if (!ids.has(record.id)) {
        const successor = record.rolled_from === undefined ? undefined : rolledTo.get(record.rolled_from);
        if (successor !== undefined) return { rolledTo: successor };
        if (maxPerAccount > 0 && ids.size >= maxPerAccount) return 'held_cap';
        const day = record.created_at.slice(0, 10);
        const made = keysMadeOn(day);
        const n = made.get(record.account) ?? 0;
        if (maxMadePerDay > 0 && n >= maxMadePerDay) return 'daily_cap';
        made.set(record.account, n + 1);
        if (record.rolled_from !== undefined) rolledTo.set(record.rolled_from, record.id);
      }
      keyIdsByAccount.set(record.account, ids.add(record.id));
      keysByHash.set(hash, clone(record));
      hashById.set(record.id, hash);
      return 'created';
    },
    async getKeyByHash(hash) {
      const r = keysByHash.get(hash);
      return r ? clone(r) : null;
    },
    async getKey(id) {
      const hash = hashById.get(id);
      const r = hash && keysByHash.get(hash);
      return hash && r ? { record: clone(r), hash } : null;
    },
    async listKeys(acct) {
      return [...keysByHash.values()].filter((r) => r.account === acct).map(clone);
    },
    async updateKey(id, patch: KeyPatch) {
      const hash = hashById.get(id);
      const r = hash && keysByHash.get(hash);
      if (!hash || !r) return null;
      if (patch.name !== undefined) r.name = patch.name;
      if (patch.active !== undefined) r.active = patch.active;
      if (patch.rate_limits !== undefined) r.rate_limits = patch.rate_limits;
      if (patch.scopes !== undefined) r.scopes = [...patch.scopes];
      if (patch.expires_at !== undefined) r.expires_at = patch.expires_at;
      if (patch.budget !== undefined) r.budget = patch.budget && { ...patch.budget };
      r.version++;
      return { record: clone(r), hash };
    },
    async deleteKey(id) {
      const hash = hashById.get(id);
      const r = hash && keysByHash.get(hash);
      if (!hash || !r) return null;
      keysByHash.delete(hash);
      hashById.delete(id);
      keyIdsByAccount.get(r.account)?.delete(id); // its slot under limits.max_keys_per_account is free again
      budgets.delete(`${r.account}|${id}|t`);
      exported.forgetKey(r.account, id); // its last use: every key list reads the account's whole map
      // Its roll claims (lua/forget-roll.lua): a deleted successor frees its old key to be rolled again.
      rolledTo.delete(id);
      if (r.rolled_from !== undefined && rolledTo.get(r.rolled_from) === id) rolledTo.delete(r.rolled_from);
      return { record: clone(r), hash };
    },
    async keySpend(acct, keyId, period, nowMs) {
      const c = budgetOf(acct, keyId, period, false);
      return { spent_micros: c?.spent ?? 0, held_micros: c ? openHeld(c, nowMs) : 0 };
    },

    async grant(acct, amount, idempotencyKey, note, ts): Promise<GrantResult> {
      const a = account(acct);
      const prev = idempotencyKey === undefined ? undefined : a.idem.get(idempotencyKey);
      if (prev) return { account: acct, balance_micros: a.balance, held_micros: a.held, entry_id: prev, replayed: true };
      if (Math.abs(a.balance + amount) > MAX_BALANCE_MICROS)
        return { account: acct, balance_micros: a.balance, held_micros: a.held, entry_id: '', replayed: false, outOfRange: true };
      a.balance += amount;
      funded.add(acct);
      exported.indexAccount(acct);
      const entryId = append(a, { kind: 'grant', amount_micros: amount, ts, ...(note ? { note } : {}) });
      if (idempotencyKey !== undefined) a.idem.set(idempotencyKey, entryId);
      return { account: acct, balance_micros: a.balance, held_micros: a.held, entry_id: entryId, replayed: false };
    },
    async getAccount(acct): Promise<AccountState> {
      const a = accounts.get(acct);
      return { id: acct, balance_micros: a?.balance ?? 0, held_micros: a?.held ?? 0 };
    },
    async ledger(acct, after, limit) {
      const list = accounts.get(acct)?.ledger ?? [];
      const start = after === undefined ? 0 : firstPast(list, after, false);
      return list.slice(start, start + limit).map(clone);
    },
    async hold(acct, requestId, amount, expiresAt, budget): Promise<HoldResult> {
      const a = account(acct);
      const result = (ok: boolean): HoldResult => ({ ok, balance_micros: a.balance, held_micros: a.held });
      const due = bucketDue(expiresAt, bucketMs);
      if (a.reaped !== undefined && due <= a.reaped) return result(false);
      if (a.buckets.get(due)?.has(requestId)) return result(true);
      if (a.balance - a.held < amount) return result(false);
      let counter: BudgetCounter | undefined;
      if (budget) {
        // The key's period spend plus its open holds plus this one, against the limit (lua/hold.lua).
        counter = budgetOf(acct, budget.keyId, budget.period, true)!;
        counter.expireAt = budget.expireAtMs;
        const nowMs = now();
        for (const d of counter.held.keys()) if (d <= nowMs) counter.held.delete(d);
        const used = counter.spent + openHeld(counter, nowMs);
        if (used + amount > budget.limitMicros) return { ...result(false), budget: { used_micros: used } };
      }
      a.held += amount;
      bucketOf(a, due).set(requestId, { state: 'open', amount, keepUntil: Infinity });
      if (counter) counter.held.set(due, (counter.held.get(due) ?? 0) + amount);
      return result(true);
    },
    holdBucketDue: (expiresAt) => bucketDue(expiresAt, bucketMs),
    async settle(i: SettleInput): Promise<SettleResult> {
      // `0 - cost`, not `-cost`: a free request's entry must read 0, not -0 (which prints as "-0").
      const a = account(i.account);
      const replay = (entryId: string): SettleResult => ({
        entry_id: entryId,
        replayed: true,
        balance_micros: a.balance,
        held_micros: a.held,
      });
      const due = settleBucketDue(i, holdTtlMs, bucketMs);
      const r = a.buckets.get(due)?.get(i.requestId);
      if (r && (r.state === 'settled' || r.state === 'settledAfterReap')) return replay(r.entryId);
      // No record, and its bucket already emptied by the reaper: nothing is recorded there any more.
      const emptied = !r && a.reaped !== undefined && due <= a.reaped;
      if (emptied && i.mayHaveRun) return replay('');
      let holdAmount = 0;
      if (r?.state === 'open') {
        holdAmount = r.amount;
        a.held -= r.amount;
      }
      a.balance -= i.costMicros;
      if (i.budget) {
        // The actual cost joins the period's spend; the hold's part of the key's open holds goes (lua/settle.lua).
        const c = budgetOf(i.account, i.budget.keyId, i.budget.period, true)!;
        c.spent += i.costMicros;
        c.expireAt = i.budget.expireAtMs;
        const left = (c.held.get(due) ?? 0) - holdAmount;
        if (left > 0) c.held.set(due, left);
        else c.held.delete(due);
      }
      const entryId = append(a, {
        kind: 'debit',
        amount_micros: 0 - i.costMicros,
        ts: i.ts,
        request_id: i.requestId,
        key_id: i.keyId,
        model: i.model,
        prompt_tokens: i.promptTokens,
        completion_tokens: i.completionTokens,
        usage_source: i.usageSource,
        hold_micros: holdAmount,
        // As settle.lua writes it: the field only when there are cached tokens.
        ...(i.cachedTokens !== undefined && i.cachedTokens > 0 && { cached_tokens: i.cachedTokens }),
      });
      if (!emptied)
        bucketOf(a, due).set(
          i.requestId,
          r?.state === 'reaped'
            ? { state: 'settledAfterReap', entryId, keepUntil: r.keepUntil }
            : { state: 'settled', entryId, keepUntil: Infinity },
        );
      return { entry_id: entryId, replayed: false, balance_micros: a.balance, held_micros: a.held };
    },
    async reapExpiredHolds(nowMs, ts) {
      let n = 0;
      for (const a of accounts.values()) {
        for (const [due, bucket] of a.buckets) {
          if (due > nowMs) continue;
          if (a.reaped === undefined || due > a.reaped) a.reaped = due;
          for (const [requestId, r] of bucket) {
            if (r.state === 'open') {
              a.held -= r.amount;
              append(a, { kind: 'hold_expired', amount_micros: 0, ts, request_id: requestId, hold_micros: r.amount });
              bucket.set(requestId, { state: 'reaped', amount: r.amount, keepUntil: nowMs + reapedKeepMs });
              n++;
            } else if (r.state === 'settled' || r.keepUntil <= nowMs) {
              bucket.delete(requestId);
            }
          }
          if (bucket.size === 0) a.buckets.delete(due);
        }
      }
      return n;
    },

    async scanKeys(onBatch) {
      onBatch([...keysByHash.values()].map(clone));
    },
    async reserveShareQuota(account, slug, bytes, limits) {
      let q = quotas.get(account);
      if (!q) quotas.set(account, (q = new Map()));
      let total = 0;
      for (const b of q.values()) total += b;
      if (q.size + 1 > limits.maxCount) return 'count';
      if (q.size + 1 > limits.unfundedMaxCount && !funded.has(account)) return 'unfunded';
      if (total + bytes > limits.maxBytes) return 'bytes';
      q.set(slug, bytes);
      return 'ok';
    },
    async releaseShareQuota(account, slug, how = 'revoked', keep = DEFAULT_REVOKED_KEEP) {
      quotas.get(account)?.delete(slug);
      if (how === 'dropped') return;
      let revoked = revokedByAccount.get(account);
      if (!revoked) revokedByAccount.set(account, (revoked = new Map()));
      const at = now();
      if (!revoked.has(slug)) revoked.set(slug, at);
      // Oldest first: past the retention (expired) or past the newest `maxPerAccount`, forgotten with their tombstone.
      for (const [s, revokedAt] of revoked) {
        if (revokedAt > at - keep.retentionMs && revoked.size <= keep.maxPerAccount) break;
        revoked.delete(s);
        if (tombstoneExpiry.delete(s)) shares.delete(s);
      }
      if (revoked.size === 0) revokedByAccount.delete(account);
    },

    async putShare(record) {
      const { snapshot: _never, ...r } = record;
      shares.set(record.slug, clone(r));
    },
    async getShare(slug) {
      const s = shareOf(slug);
      return s ? clone(s) : null;
    },
    async revokeShare(slug, ts, keep = DEFAULT_REVOKED_KEEP) {
      const s = shareOf(slug);
      if (!s) return null;
      if (tombstoneExpiry.has(slug)) return clone(s);
      const revoked_at = s.revoked_at ?? ts;
      shares.set(slug, { slug, account: s.account, created_at: s.created_at, bytes: 0, files: [], revoked_at });
      tombstoneExpiry.set(slug, now() + keep.retentionMs);
      return clone({ ...s, revoked_at });
    },
    async markSharePending(p, at) {
      pending.set(p.slug, { p: { ...p }, at });
    },
    async clearSharePending(p) {
      pending.delete(p.slug);
    },
    async deferSharePending(p, at) {
      const e = pending.get(p.slug);
      if (e && e.p.account === p.account && e.at < at) e.at = at;
    },
    async duePendingShares(before, limit) {
      return [...pending.values()]
        .filter((e) => e.at <= before)
        .sort((x, y) => x.at - y.at)
        .slice(0, limit)
        .map((e) => ({ ...e.p }));
    },
    // The embedded store never held snapshots in records: nothing to migrate.
    async scanLegacyShares() {
      return { cursor: '', records: [] };
    },
    async compactShare() {
      return false;
    },
    async claimShareMigration() {
      return null;
    },
    async saveShareMigration() {},

    async publish(msg: Invalidation) {
      // Delivered on a later tick, like a pub/sub message, so callers never depend on synchronous delivery.
      setImmediate(() => bus.emit('msg', msg));
    },
    onInvalidation(handler) {
      bus.on('msg', handler);
    },

    async ping() {
      return true;
    },
    async close() {
      bus.removeAllListeners();
    },

    ...memorySessions(now),
    async listAccounts(search, limit) {
      const needle = search.toLowerCase();
      const ids = new Set<string>();
      for (const [id, a] of accounts) if (a.ledger.length > 0) ids.add(id);
      for (const r of keysByHash.values()) ids.add(r.account);
      return [...ids]
        .filter((id) => id.toLowerCase().includes(needle))
        .sort()
        .slice(0, limit);
    },
    async ledgerBefore(acct, before, limit) {
      const list = accounts.get(acct)?.ledger ?? [];
      const end = before === undefined ? list.length : firstPast(list, before, true);
      return list
        .slice(Math.max(0, end - limit), end)
        .reverse()
        .map(clone);
    },
    async listShares(acct, limit) {
      return [...shares.keys()]
        .map(shareOf)
        .filter((r): r is ShareRecord => r !== undefined && r.account === acct)
        .sort((a, b) => b.created_at.localeCompare(a.created_at) || b.slug.localeCompare(a.slug))
        .slice(0, limit)
        .map(clone);
    },
    ...exported,
  };
}
