/**
 * Holds, settles and the reaper on Redis (SPEC §4), in the hold bucket layout of docs/ledger.md: every
 * hold of an account expiring in the same bucket of time is one field of one hash, which is also the
 * request's idempotency record, so no key is made per request. The global bucket index is written with
 * its own command, never from a script with an account's keys (SPEC §11). redis-store.ts wraps these
 * calls so any Redis failure becomes 503 `store_unavailable`.
 */
import { Cluster, type Redis } from 'ioredis';
import calculateSlot from 'cluster-key-slot';
import { randomBytes } from 'node:crypto';
import { createTurnBatcher, MAX_BATCH } from './credit-batch.ts';
import { createLeaseBook } from './credit-lease.ts';
import { debitEntryData, PACKED_DEBITS_MAX } from './debit-layout.ts';
import { bucketDue, DEFAULT_BUCKET_MS, settleBucketDue } from './hold-bucket.ts';
import * as K from './redis-keys.ts';
import type { LuaScript, ScriptPipe } from './script-pipe.ts';
import type { Store } from './types.ts';

type ScriptFn = (...args: (string | number)[]) => Promise<unknown>;

const REAP_BATCH = 200;
/** credit.ts holdTtlMs of the default config (600 s total upstream timeout + 60 s margin). */
const DEFAULT_HOLD_TTL_MS = 660_000;
/** Clock skew between instances the bucket index cache allows for. */
const INDEX_MARGIN_MS = 5_000;
/** Buckets the index cache remembers (~100 bytes each). */
const INDEX_CACHE_MAX = 10_000;

export interface RedisCreditDeps {
  redis: Redis | Cluster;
  /** The script pipe on a single node; undefined on Cluster or Sentinel (ioredis carries everything). */
  pipe: ScriptPipe | undefined;
  /** The store's defineCommand scripts by name (redis-store.ts SCRIPTS). */
  scripts: Record<
    | 'tgHold'
    | 'tgHold3'
    | 'tgHoldMany'
    | 'tgSettle3'
    | 'tgSettle4'
    | 'tgSettle5'
    | 'tgSettle6'
    | 'tgSettleMany'
    | 'tgRun2'
    | 'tgRun3'
    | 'tgLeaseSettle'
    | 'tgLeasePass'
    | 'tgReapBucket3'
    | 'tgReapBucket'
    | 'tgLegacyReap',
    ScriptFn
  >;
  /** hold.lua and settle.lua, their group-commit forms (credit-batch.ts) and runs, for the pipe. */
  lua: {
    hold: LuaScript;
    settle: LuaScript;
    holdMany: LuaScript;
    settleMany: LuaScript;
    run: LuaScript;
    leaseSettle: LuaScript;
    leasePass: LuaScript;
  };
  onError: (err: Error) => void;
  /** How long a reaped hold is remembered (RedisStoreOptions.settledTtlSeconds). */
  reapedTtlSeconds: number;
  holdTtlMs?: number | undefined;
  bucketMs?: number | undefined;
  /** Credit leases for an account this process holds for often (credit-lease.ts, `credit.leases`). */
  leases?: boolean | undefined;
  /**
   * A lease pass's debits in one ledger entry (`store.debit_entries: packed`, lease-pass.lua; docs/ledger.md
   * "Packed passes"). Off: one entry per debit, as every version before it reads.
   */
  packed?: boolean | undefined;
  /**
   * How long a lease's settles wait for others to share their call (`credit.lease_linger_ms`; docs/ledger.md
   * "Lingering passes"); 0 or unset: the turn's, as every other call.
   */
  leaseLingerMs?: number | undefined;
}

/** Splits a -many script's flat reply (4 values per call) into one result per call: an Error, or its values. */
function perCall(flat: unknown[]): unknown[] {
  const out: unknown[] = [];
  for (let i = 0; i < flat.length; i += 4) {
    const first = flat[i];
    out.push(first instanceof Error ? first : first === '?' ? ['?'] : [first, flat[i + 1], flat[i + 2], flat[i + 3]]);
  }
  return out;
}

const NO_KEYS: readonly string[] = [];

/** Accounts whose key names redis-credit keeps made (namesOf). */
const NAMES_MAX = 10_000;

const errorOf = (err: unknown) => (err instanceof Error ? err : new Error(String(err)));

/**
 * Whether one account's calls of one kind in a batch can go in a run (run.lua): the same keys
 * for all (one bucket) and `plain` of them (no budget counter), each request id once, for a settle the
 * hold it expects to find, and for a hold a whole, non-negative amount (run.lua checks the holds' total
 * once, which stands for each hold only when no amount is negative; hold-many.lua checks each).
 */
function isRun(
  calls: readonly { keys: readonly string[]; args: readonly (string | number)[]; hold?: number | undefined }[],
  plain: number,
): boolean {
  const first = calls[0]!.keys;
  if (first.length !== plain) return false;
  for (const c of calls) {
    if (c.keys.length !== plain || c.keys[1] !== first[1]) return false;
    if (plain === 3 && (c.hold === undefined || c.keys[2] !== first[2])) return false;
    if (plain === 2 && !(Number.isSafeInteger(c.args[1]) && (c.args[1] as number) >= 0)) return false;
  }
  return distinctIds(calls);
}

/**
 * Whether no request id occurs twice among the calls. Not with a Set of the ids: it internalizes each
 * fresh id string, which showed in the profile at c=64 (bench/results/instructions-vs-bare.md, "Beyond
 * instructions"). The ids are bucketed by length and last character (random in a request id) and
 * compared whole only within a bucket.
 */
function distinctIds(calls: readonly { args: readonly (string | number)[] }[]): boolean {
  const n = calls.length;
  if (n < 2) return true;
  const buckets = new Map<number, string[]>();
  for (let i = 0; i < n; i++) {
    const id = calls[i]!.args[0];
    // Ids the gateway makes are strings; anything else (a store caller's) takes the plain way.
    if (typeof id !== 'string') return new Set(calls.map((c) => c.args[0])).size === n;
    const k = id.length * 65_536 + (id.length > 0 ? id.charCodeAt(id.length - 1) : 0);
    const same = buckets.get(k);
    if (!same) buckets.set(k, [id]);
    else if (same.includes(id)) return false;
    else same.push(id);
  }
  return true;
}

export function createRedisCredit(d: RedisCreditDeps): Pick<Store, 'hold' | 'settle' | 'reapExpiredHolds' | 'leaseStats'> & {
  hurry(): void;
  holdBucketDue(expiresAtMs: number): number;
  closeLeases(): Promise<void>;
} {
  const { redis, pipe, scripts: s, lua, onError } = d;
  const cluster = redis instanceof Cluster;
  const holdTtlMs = d.holdTtlMs ?? DEFAULT_HOLD_TTL_MS;
  const bucketMs = d.bucketMs ?? DEFAULT_BUCKET_MS;
  /**
   * Buckets this process indexed (by `<due> <account>`), with the pipe connection they were indexed on: a hold into a
   * bucket already indexed sends no ZADD (one per account and bucket instead of one per request,
   * bench/results/ledger.md). Only on the pipe, which never resends a command; a new connection (maybe a
   * restarted, empty server) starts over. Entries go once their bucket is due (the reaper removes the
   * member then), and a bucket due within INDEX_MARGIN_MS is always re-indexed, in case a reaper whose
   * clock runs ahead removed it already.
   */
  const indexed = new Map<string, { due: number; generation: number }>();

  /**
   * An account's key names, made once per account (the bucket's once per bucket): every call of an account
   * then carries the same string objects, so a batch's Map lookups and key comparisons are pointer-fast.
   * A name built per request is a cons string V8 flattens and internalizes at each such use (~1k
   * instructions each, bench/results/instructions-vs-bare.md). Bounded: forgotten past NAMES_MAX accounts.
   */
  const names = new Map<string, { balance: string; ledger: string; due: number; bucket: string; indexKey: string }>();
  function namesOf(acct: string, due: number) {
    let n = names.get(acct);
    if (n === undefined) {
      if (names.size >= NAMES_MAX) names.clear();
      names.set(acct, (n = { balance: K.balance(acct), ledger: K.ledger(acct), due: -1, bucket: '', indexKey: '' }));
    }
    if (n.due !== due) {
      n.due = due;
      n.bucket = K.holdBucket(acct, due);
      n.indexKey = `${due} ${acct}`;
    }
    return n;
  }

  /** Puts the bucket in the global index (SPEC §11: its own command), before the script that writes it. */
  function index(acct: string, due: number): void {
    if (pipe) {
      const cacheKey = namesOf(acct, due).indexKey;
      const known = indexed.get(cacheKey);
      if (known && known.generation === pipe.generation) return;
      const member = JSON.stringify([acct, due]);
      // Same connection, same write, before the script: the hold is never in Redis unindexed. Refused (say
      // OOM), it is forgotten, so the next hold into the bucket sends it again.
      pipe.call(['ZADD', K.HOLD_BUCKETS, due, member]).catch((err: Error) => {
        indexed.delete(cacheKey);
        onError(err);
      });
      if (due > Date.now() + INDEX_MARGIN_MS) {
        indexed.set(cacheKey, { due, generation: pipe.generation });
        // Bounded: many accounts with a request now and then would otherwise keep one entry per request for
        // the hold TTL. The oldest entry goes; forgetting one costs a ZADD that was not needed.
        if (indexed.size > INDEX_CACHE_MAX) indexed.delete(indexed.keys().next().value!);
      }
      return;
    }
    // ioredis: queued ahead of the script in the same flush (Cluster: another node, maybe); an index entry
    // without a hold is harmless, and a resent hold is resent after its ZADD.
    const member = JSON.stringify([acct, due]);
    redis.zadd(K.HOLD_BUCKETS, due, member).catch((err: Error) => {
      // The hold may be taken all the same (Cluster: the index is on another node, maybe one that does not
      // answer): the next reaper pass sends the entry again, or the bucket would never be reaped.
      if (unindexed.size < INDEX_CACHE_MAX) unindexed.set(member, due);
      onError(err);
    });
  }
  /** Index entries (member → due) whose ZADD failed, sent again by the next reaper pass (ZADD is idempotent). */
  const unindexed = new Map<string, number>();
  /** Sends the index entries that failed again, before a pass reads the index. */
  async function reindex(): Promise<void> {
    if (unindexed.size === 0) return;
    const entries = [...unindexed];
    for (let i = 0; i < entries.length; i += REAP_BATCH) {
      const batch = entries.slice(i, i + REAP_BATCH);
      await redis.zadd(K.HOLD_BUCKETS, ...batch.flatMap(([member, due]) => [due, member]));
      for (const [member] of batch) unindexed.delete(member);
    }
  }

  /** One hold or settle as its script takes it: its keys (3 or 4) and its arguments. */
  interface Call {
    keys: string[];
    args: (string | number)[];
    /** A settle's hold as the store expects to find it (SettleInput.holdMicros); a run needs it. */
    hold?: number | undefined;
    /** A settle (else a hold). */
    settle?: true;
    /** A settle of a request drawn from this lease, or (with `giveBack`) the lease's undrawn part given back. */
    lease?: string;
    giveBack?: number;
  }
  // Group commit (credit-batch.ts): per slot, so on Cluster each batch is one node's call.
  const slotOf = cluster ? (c: Call) => calculateSlot(c.keys[0]!) : () => 0;
  const schedule = pipe ? (fn: () => void) => pipe.beforeWrite(fn) : (fn: () => void) => void setImmediate(fn);
  /**
   * The calls of a batch as the -many scripts take them: each call's key count and arguments, its keys in
   * order — or key count 0 and no keys when they are the previous call's (a hot account's are sent once).
   */
  const many = (script: 'holdMany' | 'settleMany', argsOf: (c: Call) => (string | number)[]) => async (calls: Call[]) => {
    const keys: string[] = [];
    const args: (string | number)[] = [];
    let prev: string[] = [];
    for (const c of calls) {
      if (c.keys.length === prev.length && c.keys.every((k, i) => k === prev[i])) args.push(0, ...argsOf(c));
      else {
        keys.push(...c.keys);
        args.push(c.keys.length, ...argsOf(c));
        prev = c.keys;
      }
    }
    const reply = pipe
      ? pipe.run(lua[script], keys, args)
      : script === 'holdMany'
        ? s.tgHoldMany(keys.length, ...keys, ...args)
        : s.tgSettleMany(keys.length, ...keys, ...args);
    return perCall((await reply) as unknown[]);
  };
  /**
   * A run (run.lua, docs/ledger.md "Runs"): one account's settles, then its holds, of one bucket, in one
   * pass; what settle-many.lua and then hold-many.lua would have answered each, or undefined when the
   * script declined the run.
   */
  async function run(settles: Call[], holds: Call[]): Promise<unknown[] | undefined> {
    const ns = settles.length;
    const nh = holds.length;
    const ids = new Array<string | number>(ns + nh);
    const data = new Array<string | number>(ns);
    const settled = new Array<string>(ns);
    const values = new Array<string>(nh);
    let debit = 0;
    let release = 0;
    let total = 0;
    for (let i = 0; i < ns; i++) {
      const c = settles[i]!;
      ids[i] = c.args[0]!;
      data[i] = c.args[2]!;
      settled[i] = String(c.hold);
      debit += Number(c.args[1]);
      release += c.hold!;
    }
    for (let i = 0; i < nh; i++) {
      const [id, amount] = holds[i]!.args;
      ids[ns + i] = id!;
      values[i] = `o${amount}`;
      total += Number(amount);
    }
    // A settle's keys: balance, bucket, ledger; a hold's: balance, bucket (the ledger only with settles).
    const keys = ns > 0 ? settles[0]!.keys : holds[0]!.keys;
    const args = [String(debit), String(total - release), nh > 0 ? holds[0]!.args[2]! : 0, ns, nh, ...ids, ...data, ...settled, ...values];
    const r = (await (pipe
      ? pipe.run(lua.run, keys, args)
      : keys.length === 3
        ? s.tgRun3(...keys, ...args)
        : s.tgRun2(...keys, ...args))) as unknown[];
    if (r[0] !== 1) return undefined;
    // The script answers with the balance and held after the run: each request's is that less the ones after it.
    const out = new Array<unknown>(ns + nh);
    let bal = r[1] as number;
    let held = r[2] as number;
    for (let i = nh - 1; i >= 0; i--) {
      out[ns + i] = [1, bal, held, 0];
      held -= Number(holds[i]!.args[1]);
    }
    for (let i = ns - 1; i >= 0; i--) {
      const c = settles[i]!;
      out[i] = [r[3 + i], 0, bal, held];
      bal -= Number(c.args[1]);
      held += c.hold!;
    }
    return out;
  }
  /**
   * One lease's settles and give-backs of a turn in one call (lease-settle.lua); per call what settle.lua
   * would answer (entry id, replayed, balance, held: the account's after the call), '?' for a request
   * the script left to settle.lua, and for a give-back its balance and held.
   */
  async function leaseSettle(calls: Call[]): Promise<unknown[]> {
    const settles = calls.filter((c) => c.giveBack === undefined);
    const ns = settles.length;
    if (d.packed && ns === calls.length && distinctIds(settles)) {
      const packed = await leasePass(settles);
      if (packed) return packed;
    }
    const args = new Array<string | number>(5 + 4 * ns);
    let give = 0;
    for (const c of calls) give += c.giveBack ?? 0;
    let debit = 0;
    let drawn = 0;
    for (let i = 0; i < ns; i++) {
      const c = settles[i]!;
      args[5 + i] = c.args[0]!;
      args[5 + ns + i] = c.args[1]!;
      args[5 + 2 * ns + i] = c.args[2]!;
      args[5 + 3 * ns + i] = String(c.hold);
      debit += Number(c.args[1]);
      drawn += c.hold!;
    }
    args[0] = calls[0]!.lease!;
    args[1] = String(give);
    args[2] = ns;
    args[3] = String(debit);
    // A request settled twice in one call (a retry racing its first attempt) goes the per-request way.
    args[4] = distinctIds(settles) ? String(drawn) : '-';
    const keys = settles.length > 0 ? settles[0]!.keys : calls[0]!.keys;
    const r = (await (pipe ? pipe.run(lua.leaseSettle, keys, args) : s.tgLeaseSettle(...keys, ...args))) as unknown[];
    const [bal, held, common] = r;
    let i = 0;
    return calls.map((c) => {
      if (c.giveBack !== undefined) return [bal, held];
      // The common case answers each settle's entry id; else its entry id (or '?') and whether it replayed.
      const id = common === 1 ? r[3 + i] : r[3 + 2 * i];
      const replayed = common === 1 ? 0 : r[4 + 2 * i];
      i++;
      return id === '?' ? ['?'] : [id, replayed, bal, held];
    });
  }
  /**
   * One lease's settles of a turn as a packed pass (lease-pass.lua): their debits in entries of up to
   * PACKED_DEBITS_MAX, each request's entry id `<entry id>.<k>` (the entry id itself in an entry of one).
   * Undefined when the script declined (the lease short or gone, a request's field already there): it wrote
   * nothing, and the caller sends the same settles as lease-settle.lua, which takes each on its own.
   */
  async function leasePass(settles: Call[]): Promise<unknown[] | undefined> {
    const ns = settles.length;
    const ne = Math.ceil(ns / PACKED_DEBITS_MAX);
    const ids = 5 + 3 * ne;
    const args = new Array<string | number>(ids + ns);
    let debit = 0;
    let drawn = 0;
    for (let e = 0; e < ne; e++) {
      const from = e * PACKED_DEBITS_MAX;
      const to = Math.min(ns, from + PACKED_DEBITS_MAX);
      let data = '';
      let holds = '';
      for (let i = from; i < to; i++) {
        const c = settles[i]!;
        args[ids + i] = c.args[0]!;
        debit += Number(c.args[1]);
        drawn += c.hold!;
        data += i === from ? c.args[2] : `,${c.args[2]}`;
        holds += i === from ? String(c.hold) : `,${c.hold}`;
      }
      const n = to - from;
      args[5 + 3 * e] = n;
      args[6 + 3 * e] = n === 1 ? data : `[${data}]`;
      args[7 + 3 * e] = n === 1 ? holds : `[${holds}]`;
    }
    args[0] = settles[0]!.lease!;
    args[1] = ns;
    args[2] = String(debit);
    args[3] = String(drawn);
    args[4] = ne;
    const keys = settles[0]!.keys;
    const r = (await (pipe ? pipe.run(lua.leasePass, keys, args) : s.tgLeasePass(...keys, ...args))) as unknown[];
    if (r[0] === 0 && r.length === 1) return undefined;
    const [bal, held] = r as [number, number];
    return settles.map((_, i) => {
      const e = Math.floor(i / PACKED_DEBITS_MAX);
      const x = r[3 + e] as string;
      const single = e === ne - 1 && ns - e * PACKED_DEBITS_MAX === 1;
      return [single ? x : `${x}.${i - e * PACKED_DEBITS_MAX + 1}`, 0, bal, held];
    });
  }
  /** How one kind of call goes: a run (docs/ledger.md "Runs"), a -many call, or alone. */
  interface Path {
    /** A run's script; undefined when it declined the run. */
    run: (calls: Call[]) => Promise<unknown[] | undefined>;
    many: (calls: Call[]) => Promise<unknown[]>;
    one: (c: Call) => Promise<unknown>;
  }
  /** One account's calls of a kind as a run when they can be one (else the -many call), declined runs included. */
  const asRun = (p: Path) => async (cs: Call[]) => (await p.run(cs)) ?? (await p.many(cs));
  /** Calls of one kind for the -many script, or the single-request script when there is one. */
  const asMany = (p: Path) => async (cs: Call[]) => (cs.length === 1 ? [await p.one(cs[0]!)] : await p.many(cs));
  /**
   * A batch (two or more calls of one slot, holds and settles) with its runs taken out (docs/ledger.md
   * "Runs"). Per account: its settles and its holds go as one run when both can be in one (the same
   * bucket); else each kind goes as a run of its own when it has two or more calls that can be one; the
   * rest go as one -many call per kind, in the order issued, and a run the script declined goes that way
   * after it. An account's calls of a kind are never split between paths, so each account sees them in
   * the order issued; its settles are sent before its holds. A call that fails as a whole fails the calls
   * it carried, and only those.
   */
  async function batch(calls: Call[]): Promise<unknown[]> {
    const byAccount = new Map<string, { settles: number[]; holds: number[] }>();
    // A lease's settles and give-backs: one call each lease (its bucket and id), whatever else the turn has.
    const byLease = new Map<string, number[]>();
    for (let i = 0; i < calls.length; i++) {
      const lease = calls[i]!.lease;
      if (lease !== undefined) {
        const g = `${calls[i]!.keys[1]} ${lease}`;
        const at = byLease.get(g);
        if (at) at.push(i);
        else byLease.set(g, [i]);
        continue;
      }
      const acct = calls[i]!.keys[0]!;
      let at = byAccount.get(acct);
      if (!at) byAccount.set(acct, (at = { settles: [], holds: [] }));
      (calls[i]!.settle ? at.settles : at.holds).push(i);
    }
    const out = new Array<unknown>(calls.length);
    const jobs: Promise<void>[] = [];
    const send = (at: number[], go: (cs: Call[]) => Promise<unknown[]>) => {
      jobs.push(
        go(at.map((i) => calls[i]!)).then(
          (rs) => at.forEach((i, j) => (out[i] = rs[j])),
          (err: unknown) => at.forEach((i) => (out[i] = errorOf(err))),
        ),
      );
    };
    for (const at of byLease.values()) send(at, leaseSettle);
    const otherSettles: number[] = [];
    const otherHolds: number[] = [];
    const holdsLater: number[][] = [];
    for (const { settles: si, holds: hi } of byAccount.values()) {
      const ss = si.map((i) => calls[i]!);
      const hs = hi.map((i) => calls[i]!);
      const sRun = ss.length > 0 && isRun(ss, 3);
      const hRun = hs.length > 0 && isRun(hs, 2);
      if (sRun && hRun && ss[0]!.keys[1] === hs[0]!.keys[1] && !hs.some((h) => ss.some((x) => x.args[0] === h.args[0]))) {
        // Declined: the settles as a run (or a -many call), then the holds: one more round trip for the holds,
        // only then, so they still see the credit the settles freed.
        const n = ss.length;
        send([...si, ...hi], async (cs) => {
          const r = await run(cs.slice(0, n), cs.slice(n));
          if (r) return r;
          // Each kind's failure fails its own calls only.
          const each = (go: (cs: Call[]) => Promise<unknown[]>, cs: Call[]) => go(cs).catch((err: unknown) => cs.map(() => errorOf(err)));
          const settled = await each(asRun(settlePath), cs.slice(0, n));
          return [...settled, ...(await each(asRun(holdPath), cs.slice(n)))];
        });
        continue;
      }
      if (ss.length > 1 && sRun) send(si, asRun(settlePath));
      else otherSettles.push(...si);
      if (hs.length > 1 && hRun) holdsLater.push(hi);
      else otherHolds.push(...hi);
    }
    // Settles before holds: an account's credit its settles free is there for its holds of the same turn.
    if (otherSettles.length > 0)
      send(
        otherSettles.sort((a, b) => a - b),
        asMany(settlePath),
      );
    for (const hi of holdsLater) send(hi, asRun(holdPath));
    if (otherHolds.length > 0)
      send(
        otherHolds.sort((a, b) => a - b),
        asMany(holdPath),
      );
    await Promise.all(jobs);
    return out;
  }
  const holdOne = (c: Call) =>
    pipe ? pipe.run(lua.hold, c.keys, c.args) : c.keys.length === 3 ? s.tgHold3(...c.keys, ...c.args) : s.tgHold(...c.keys, ...c.args);
  const holdPath: Path = { run: (cs) => run([], cs), many: many('holdMany', (c) => c.args), one: holdOne };
  /** settle.lua's first call (3 keys, or 4 with a budget); an absent field answers '?'. */
  const settleScript = (k: string[], a: (string | number)[]) => {
    if (pipe) return pipe.run(lua.settle, k, a);
    if (k.length === 3) return s.tgSettle3(...k, ...a);
    if (k.length === 4) return s.tgSettle4(...k, ...a);
    return k.length === 5 ? s.tgSettle5(...k, ...a) : s.tgSettle6(...k, ...a);
  };
  // A batch of one is settle.lua's first call: 3 arguments, or all 6 for a key with a budget.
  const settleOne = (c: Call) => settleScript(c.keys, c.keys.length === 3 ? c.args.slice(0, 3) : c.args);
  const settlePath: Path = {
    run: (cs) => run(cs, []),
    // settle-many.lua takes no may-have-run (only the absent case, settle.lua's, reads it).
    many: many('settleMany', (c) =>
      c.keys.length === 4 ? [c.args[0]!, c.args[1]!, c.args[2]!, c.args[4]!, c.args[5]!] : [c.args[0]!, c.args[1]!, c.args[2]!, c.args[4]!],
    ),
    one: settleOne,
  };
  // One batcher for both kinds: a turn's settles and holds of an account can share a call.
  const creditCall = createTurnBatcher<Call, unknown>({
    schedule,
    slotOf,
    one: async (c) => (c.lease !== undefined ? (await leaseSettle([c]))[0] : c.settle ? settleOne(c) : holdOne(c)),
    many: batch,
  });
  /**
   * A lease's settles and give-backs (docs/ledger.md "Lingering passes"): with `leaseLingerMs`, those of
   * several turns wait for one timer (or for MAX_BATCH of them) and go as one pass per lease. A settle is
   * not awaited by its response (SPEC §4), so no client waits for it; the shutdown's drain does, and the
   * store's close sends what waits at once.
   */
  const lingerMs = d.leases ? (d.leaseLingerMs ?? 0) : 0;
  const lingering =
    lingerMs > 0
      ? createTurnBatcher<Call, unknown>({
          schedule: (flush) => {
            const t = setTimeout(flush, lingerMs);
            return () => clearTimeout(t);
          },
          full: MAX_BATCH,
          slotOf,
          one: async (c) => (await leaseSettle([c]))[0],
          many: batch,
        })
      : undefined;
  let hurried = false;
  const leaseCall = (c: Call) => (lingering && !hurried ? lingering(c) : creditCall(c));

  /**
   * Empties the due buckets of the index (reap-bucket.lua), a batch of up to REAP_BATCH members at a time;
   * returns how many holds were released.
   */
  async function reapBuckets(nowMs: number, ts: string): Promise<number> {
    let reaped = 0;
    // Cluster: a bucket whose node fails is passed over (it stays in the index for the next pass), so a
    // master that does not answer stops no other master's reaping; the pass then fails with its error.
    let skipped = 0;
    let failure: unknown;
    for (;;) {
      const due = await redis.zrangebyscore(K.HOLD_BUCKETS, '-inf', nowMs, 'LIMIT', skipped, REAP_BATCH);
      // Single node: the batch's first slices in one call; Cluster: a call per bucket (one slot each).
      const groups = cluster ? due.map((m) => [m]) : due.length > 0 ? [due] : [];
      const done: string[] = [];
      for (const group of groups) {
        try {
          await reapGroup(group);
          done.push(...group);
        } catch (err) {
          if (!cluster) throw err;
          failure ??= err;
          skipped += group.length;
        }
      }
      if (done.length > 0) await redis.zrem(K.HOLD_BUCKETS, ...done);
      if (due.length < REAP_BATCH) {
        if (failure !== undefined) throw failure;
        return reaped;
      }
    }

    /** Empties the buckets of `group` (index members), one call for their first slices. */
    async function reapGroup(group: string[]): Promise<void> {
      const buckets = group.map((m) => {
        const [acct, dueMs] = JSON.parse(m) as [string, number];
        return { keys: [K.balance(acct), K.holdBucket(acct, dueMs), K.ledger(acct)], dueMs };
      });
      /** One more slice of bucket `b` alone; resolves with the next cursor. */
      const slice = async (b: (typeof buckets)[number], cursor: string): Promise<string> => {
        const [next, n] = (await s.tgReapBucket3(...b.keys, ts, d.reapedTtlSeconds, b.dueMs, cursor)) as [string, number];
        reaped += n;
        return next;
      };
      const rest = [ts, d.reapedTtlSeconds, ...buckets.flatMap((b) => [b.dueMs, '0'])];
      const first = (await (buckets.length === 1
        ? s.tgReapBucket3(...buckets[0]!.keys, ...rest)
        : s.tgReapBucket(buckets.length * 3, ...buckets.flatMap((b) => b.keys), ...rest))) as (string | number)[];
      for (const [i, b] of buckets.entries()) {
        reaped += Number(first[2 * i + 1]);
        // A bucket larger than one slice goes on alone, as does one the call had no budget left for ('n').
        let cursor = String(first[2 * i]);
        if (cursor === 'n') cursor = await slice(b, '0');
        while (cursor !== '0') cursor = await slice(b, cursor);
      }
    }
  }

  /**
   * Holds of the layout before hold buckets (docs/ledger.md "Migration"), indexed one request at a time:
   * released as before until that index is empty, then one ZRANGEBYSCORE per run.
   */
  async function reapLegacy(nowMs: number, ts: string): Promise<number> {
    let reaped = 0;
    // Members not due yet (-1) stay in the index; skip past them, or a batch full of them is re-read forever.
    let kept = 0;
    for (;;) {
      const due = await redis.zrangebyscore(K.HOLD_INDEX, '-inf', nowMs, 'LIMIT', kept, REAP_BATCH);
      for (const member of due) {
        const [acct, requestId] = JSON.parse(member) as [string, string];
        const r = (await s.tgLegacyReap(K.balance(acct), K.holds(acct), K.ledger(acct), requestId, nowMs, ts)) as number;
        if (r === 1) reaped++;
        if (r !== -1) await redis.zrem(K.HOLD_INDEX, member);
        else kept++;
      }
      if (due.length < REAP_BATCH) return reaped;
    }
  }

  const leases = d.leases
    ? createLeaseBook({
        holdTtlMs,
        keepMs: d.reapedTtlSeconds * 1000,
        now: Date.now,
        onError,
        idPrefix: `L${randomBytes(6).toString('base64url')}`,
        ...(pipe && { generation: () => pipe.generation }),
        async take(acct, due, id, amount) {
          index(acct, due);
          const [code] = (await creditCall({ keys: [K.balance(acct), K.holdBucket(acct, due)], args: [id, amount, due] })) as [number];
          return { ok: code === 1 };
        },
        giveBack: (acct, due, id, amount) =>
          leaseCall({ keys: [K.balance(acct), K.holdBucket(acct, due), K.ledger(acct)], args: [], lease: id, giveBack: amount }),
      })
    : undefined;

  return {
    holdBucketDue: (expiresAt) => bucketDue(expiresAt, bucketMs),
    async hold(acct, requestId, amount, expiresAt, budget) {
      const due = bucketDue(expiresAt, bucketMs);
      // From the account's lease in this process, when it has one with enough left: no Redis call.
      if (leases && !budget && leases.draw(acct, due, requestId, amount) !== undefined)
        return { ok: true, balance_micros: 0, held_micros: 0 };
      index(acct, due);
      const n = namesOf(acct, due);
      const keys = [n.balance, n.bucket];
      const args: (string | number)[] = [requestId, amount, due];
      // A key with a budget: its period counter joins the script (same slot); keys without one pay nothing.
      if (budget) {
        keys.push(K.keyBudget(acct, budget.keyId, budget.period));
        args.push(budget.limitMicros, budget.expireAtMs ?? '');
      }
      const [code, bal, held, used] = (await creditCall({ keys, args })) as [number, number, number, number?];
      if (leases && !budget && code === 1) leases.held(acct, due, amount, bal - held);
      return { ok: code > 0, balance_micros: bal, held_micros: held, ...(code === -2 && { budget: { used_micros: used ?? 0 } }) };
    },

    async settle(i) {
      const due = settleBucketDue(i, holdTtlMs, bucketMs);
      const n = namesOf(i.account, due);
      const keys = [n.balance, n.bucket, n.ledger];
      // settle.lua's arguments; a key with a budget adds its counter as the last key and its expiry.
      // The entry's amount, as settle.lua writes it: 0 − cost is never "-0" (0 − 0 is +0).
      const args: (string | number)[] = [i.requestId, String(0 - i.costMicros), debitEntryData(i), i.mayHaveRun ? '1' : '0', due];
      const b = i.budget;
      const budgetKeys = b ? [K.keyBudget(i.account, b.keyId, b.period)] : NO_KEYS;
      if (b) args.push(b.expireAtMs ?? '');
      // A run sums the holds in JavaScript: only a whole, non-negative number may join one (a settle read
      // back from a spool file is not type-checked field by field).
      const hold = Number.isSafeInteger(i.holdMicros) && i.holdMicros! >= 0 ? i.holdMicros : undefined;
      // Drawn from a lease: its own pass (lease-settle.lua), which releases the draw (as the book recorded
      // it) from the lease.
      const lease = leases && !b ? leases.leaseOf(i.account, i.requestId, due) : undefined;
      let reply = (await (lease ? leaseCall : creditCall)({
        keys: b ? [...keys, ...budgetKeys] : keys,
        args,
        hold: lease ? lease.amount : hold,
        settle: true,
        ...(lease && { lease: lease.id }),
      })) as [string, number, number, number, number?];
      // No field in the bucket (rare: no hold reached it, or one of the previous layout): the whole script.
      if (reply[0] === '?') {
        const all = [...keys, K.holds(i.account), K.settled(i.account, i.requestId), ...budgetKeys];
        reply = (await settleScript(all, args)) as typeof reply;
      }
      if (lease) leases!.settled(i.account, i.requestId);
      const [entryId, replayed, bal, held, fresh] = reply;
      // A settle without its hold wrote the bucket's first field, maybe: index it too (rare path).
      if (fresh === 1) index(i.account, due);
      return { entry_id: entryId, replayed: replayed === 1, balance_micros: bal, held_micros: held };
    },

    /** Gives back every lease's undrawn part (the store's close, before the connections go). */
    closeLeases: async () => {
      if (!leases) return;
      // From now on nothing lingers (a settle handed over after the close fails at once, not after the timer).
      hurried = true;
      const closed = leases.close();
      // The give-backs it started, and any settle still lingering, go now; the connections close only once
      // they have answered (a spent lease has no give-back to wait for).
      await Promise.all([closed, lingering?.flush()]);
    },
    ...(leases && { leaseStats: () => ({ taken: leases.taken, draws: leases.draws, open: leases.open }) }),
    hurry() {
      hurried = true;
      void lingering?.flush();
    },

    async reapExpiredHolds(nowMs, ts) {
      for (const [cacheKey, { due }] of indexed) if (due <= nowMs) indexed.delete(cacheKey);
      await reindex();
      return (await reapBuckets(nowMs, ts)) + (await reapLegacy(nowMs, ts));
    },
  };
}
