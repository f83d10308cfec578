/**
 * The store contract (SPEC §5): one interface, two implementations — Redis (production, shared by
 * every instance) and the embedded in-process store (one instance, state lost on restart). The contract
 * test suite runs against both. All amounts are integer micro-credits.
 */
import type { Cluster, Redis } from 'ioredis';
import type { LimiterClient } from './limiter-client.ts';

export type KeyEnv = 'live' | 'test';
export type Scope = 'chat' | 'models' | 'shares' | 'embeddings';
export const SCOPES: readonly Scope[] = ['chat', 'models', 'shares', 'embeddings'];

export interface RateLimitOverride {
  requests_per_minute?: number;
  tokens_per_minute?: number;
}

/** A key record as stored: everything but the key itself, which is kept only as its SHA-256. */
export interface KeyRecord {
  id: string;
  account: string;
  env: KeyEnv;
  name: string;
  active: boolean;
  scopes: Scope[];
  models: string[];
  rate_limits: RateLimitOverride | null;
  created_at: string;
  last4: string;
  /** Bumped on every change; caches never accept a record older than an invalidation they saw. */
  version: number;
  /** ISO 8601 UTC time from which the key is refused as expired (SPEC §15); null or absent = never. */
  expires_at?: string | null;
  /** Spending cap per UTC period (SPEC §15); null or absent = none. */
  budget?: KeyBudget | null;
  /** The key this one was rolled from (SPEC §15 roll); absent for a key made by a create. Not shown by reads. */
  rolled_from?: string;
}

export type BudgetPeriod = 'day' | 'month' | 'total';
export const BUDGET_PERIODS: readonly BudgetPeriod[] = ['day', 'month', 'total'];

/** A key's spending cap: what its requests may debit in one UTC period (docs/keys.md). */
export interface KeyBudget {
  limit_micros: number;
  period: BudgetPeriod;
}

/**
 * What a hold or settle of a budgeted key carries (credit/budget.ts): the counter of the key's period
 * (`{acct:<id>}:kb:<key id>:<period tag>`), the limit, and when the counter may go.
 */
export interface BudgetCharge {
  keyId: string;
  /** `d2026-11-25`, `m2026-11` or `t` (credit/budget.ts periodOf). */
  period: string;
  limitMicros: number;
  /** Unix ms after which the counter is dropped (its period's end plus a margin); null = kept (period total). */
  expireAtMs: number | null;
}

export interface KeyPatch {
  name?: string;
  active?: boolean;
  rate_limits?: RateLimitOverride | null;
  /** Replaces the key's scopes (how an operator grants a scope added after the key was made). */
  scopes?: Scope[];
  expires_at?: string | null;
  budget?: KeyBudget | null;
}

export interface AccountState {
  id: string;
  balance_micros: number;
  held_micros: number;
}

export type LedgerKind = 'grant' | 'debit' | 'hold_expired';
export type UsageSource = 'upstream' | 'estimated';

export interface LedgerEntry {
  /** Stream id `<ms>-<seq>`; ordered; the `after` cursor of the ledger read. */
  id: string;
  ts: string;
  kind: LedgerKind;
  amount_micros: number;
  request_id?: string;
  key_id?: string;
  model?: string;
  prompt_tokens?: number;
  completion_tokens?: number;
  /** The cached part of prompt_tokens (SPEC §4 "Cached input"); absent when none (and on older entries). */
  cached_tokens?: number;
  usage_source?: UsageSource;
  hold_micros?: number;
  note?: string;
}

export interface GrantResult {
  account: string;
  balance_micros: number;
  held_micros: number;
  entry_id: string;
  /** True when the idempotency key was seen before: nothing was credited. */
  replayed: boolean;
  /**
   * True when nothing was credited because the balance would have left ±MAX_BALANCE_MICROS (`entry_id`
   * is then empty and `balance_micros` the unchanged balance).
   */
  outOfRange?: boolean;
}

/**
 * The largest balance a grant may make, either sign: 9 × 10^15 micro-credits (9 billion credits). Redis'
 * HINCRBY counts in int64, so without a bound ten grants of 10^15 and one of 1 left 10000000000000001 in
 * Redis while every read, a JSON number, said 10000000000000000. The bound sits below 2^53 − 1 with room:
 * ioredis parses integer replies within ~10^4 of 2^53 inexactly (9007199254740991 arrives as …992).
 */
export const MAX_BALANCE_MICROS = 9e15;

/** What a process's credit leases did since it started (credit-lease.ts), and how many are open now. */
export interface LeaseStats {
  taken: number;
  draws: number;
  open: number;
}

export interface HoldResult {
  ok: boolean;
  /**
   * The account's balance and held as the hold found or left them; a hold drawn from a credit lease
   * (docs/ledger.md "Leases") asked no one and answers 0 for both (callers read them only on a refusal).
   */
  balance_micros: number;
  held_micros: number;
  /** Set when the key's budget refused the hold: what the key's period had spent and held (docs/keys.md). */
  budget?: { used_micros: number };
}

export interface SettleInput {
  account: string;
  requestId: string;
  costMicros: number;
  keyId: string;
  model: string;
  promptTokens: number;
  completionTokens: number;
  /** The cached part of promptTokens; absent or 0 when none (the entry then carries no cached_tokens). */
  cachedTokens?: number;
  usageSource: UsageSource;
  /** ISO time of the ledger entry. */
  ts: string;
  /**
   * The expiry the request's hold was taken with (hold()'s `expiresAtMs`): where the settle finds it
   * (docs/ledger.md). Without it the settle releases no hold (the reaper does, with a hold_expired entry).
   */
  holdExpiresAtMs?: number;
  /**
   * The due time of the hold bucket the hold was taken in (Store.holdBucketDue of the process that took
   * it): where the settle looks, whatever bucket size the process applying it uses — the spool's next
   * start or `tollgate spool replay` may run with another hold TTL (docs/ledger.md "Settles from the
   * spool"). Absent (a settle spooled by an older version): the bucket of `holdExpiresAtMs` at this
   * store's bucket size, as before.
   */
  holdBucketDue?: number | undefined;
  /**
   * The hold taken for this request (hold()'s `amount`), when there was one. It lets the Redis store
   * settle a hot account's settles of one turn in one pass (docs/ledger.md "Runs"), which checks that each
   * hold is still there at that amount; absent or wrong, the settle goes the per-request way, with the
   * same result.
   */
  holdMicros?: number;
  /**
   * True when an earlier attempt of this same settle was sent and no answer came (it may have run). Once
   * the request's hold bucket has been emptied by the reaper, such a settle that finds no trace of its
   * request debits nothing and answers `entry_id: ''` (docs/ledger.md), never a second debit.
   */
  mayHaveRun?: boolean;
  /** The key's budget counter the hold was charged to (the same as hold()'s); absent for keys without one. */
  budget?: BudgetCharge;
}

export interface SettleResult {
  entry_id: string;
  replayed: boolean;
  balance_micros: number;
  held_micros: number;
}

export interface ShareFile {
  name: string;
  content_type: string;
  size: number;
}

export interface ShareRecord {
  slug: string;
  account: string;
  created_at: string;
  /** The snapshot's size in UTF-8 bytes: the length of its object (`shares/<slug>/snapshot.json`). */
  bytes: number;
  /**
   * The snapshot text, only in a record stored before snapshots moved to the object store (SPEC §13);
   * the migration moves it out (docs/shares.md "Migration"). New records never carry it.
   */
  snapshot?: string;
  /**
   * The declared files, when the record holds them: always in the embedded store, and in Redis records
   * written before the list moved to the object store (field `f`). Absent from a Redis record of a share
   * with files: the list is the object `shares/<slug>.files.json` and `file_count` says how many
   * (docs/shares.md "Storage"). A record without files has `files: []`.
   */
  files?: ShareFile[];
  /** How many files the share declared, when `files` is absent (Redis field `n`). */
  file_count?: number;
  revoked_at: string | null;
}

/** How many files a share declared, whether its record holds the list or only the count. */
export function shareFileCount(r: Pick<ShareRecord, 'files' | 'file_count'>): number {
  return r.files?.length ?? r.file_count ?? 0;
}

/** The limits a new share is checked against (SPEC §12, §13). */
export interface ShareQuotaLimits {
  maxCount: number;
  maxBytes: number;
  /** Live shares of an account that was never granted credit (shares.unfunded_max_per_account). */
  unfundedMaxCount: number;
}

/**
 * How long and how many revoked shares are remembered (docs/shares.md "Revoke"): a revoked share's record
 * is a tombstone answering 410 for `retentionMs` (then it expires: 404), and an account keeps at most
 * `maxPerAccount` of them (the oldest go first), so create/revoke churn cannot grow Redis.
 */
export interface RevokedShareKeep {
  retentionMs: number;
  maxPerAccount: number;
}

/** shares.revoked_retention_seconds and shares.max_revoked_per_account's defaults. */
export const DEFAULT_REVOKED_KEEP: RevokedShareKeep = { retentionMs: 7 * 24 * 3600 * 1000, maxPerAccount: 1000 };

/** A share whose record may not have been written after its object was (the create's intent). */
export interface PendingShare {
  slug: string;
  account: string;
}

/** Where the migration's current walk is ('' = its start) and how many records it has moved so far. */
export interface ShareMigration {
  cursor: string;
  moved: number;
}

/** One step of the migration's walk over the share records (docs/shares.md "Migration"). */
export interface LegacySharePage {
  /** Where the next step starts; '' once the walk has covered every record. */
  cursor: string;
  /** Records that still carry their snapshot (`snapshot` set) or their file list (`files` set). */
  records: ShareRecord[];
}

/**
 * The longest a console sign-in token may live (a member link: console/sessions.ts LINK_TTL). Redis keeps
 * an account's link generation longer than this after its last use, so no token outlives the generation
 * it was stamped with (one that did would meet a generation restarted at 0 and pass the next end).
 */
export const MAX_LINK_TTL_SECONDS = 86_400;

/** What a console sign-in token grants: a member of one account, or an operator (`account: null`). */
export interface ConsoleGrant {
  account: string | null;
}

/** A console session (SPEC §9). */
export interface ConsoleSession {
  account: string | null;
  created_at: string;
  expires_at: string;
}

/** Where an account's ledger export stands (SPEC §10); ids are ledger entry ids. */
export interface ExportState {
  /** The last entry acknowledged by S3; null before the first export. */
  cursor: string | null;
  /** Entries before this id were trimmed from Redis and are only in the exported objects; null until a trim. */
  archived_before: string | null;
}

/** One usage aggregate cell: an account's day × key × model (SPEC §10). */
export interface UsageCell {
  day: string;
  key_id: string;
  model: string;
  requests: number;
  prompt_tokens: number;
  completion_tokens: number;
  cost_micros: number;
  /** The cached part of prompt_tokens (SPEC §4 "Cached input"). */
  cached_tokens: number;
}

/** What one process aggregated since its last flush. */
export interface UsageFlush {
  /** Added to the stored counters (HINCRBY), per account. */
  cells: (UsageCell & { account: string })[];
  /** account → key id → ISO minute of the last request seen. */
  lastUsed: { account: string; key_id: string; at: string }[];
  /** Accounts that wrote ledger entries (live keys): kept in the export's account index. */
  ledgerAccounts: string[];
  /** An aggregate expires this many days after its day ends. */
  retentionDays: number;
  /**
   * Which flush this is: the flushing process and its flush's sequence number (growing; a retry repeats
   * it). A store applies each account × day of a flush at most once per process and number, so a retry of
   * a flush that landed changes nothing (SPEC §10). Absent: applied every time.
   */
  flushId?: { process: string; seq: number };
}

/** Invalidation messages, broadcast to every instance (Redis pub/sub; local for the embedded store). */
export type Invalidation = { kind: 'key'; hash: string; version: number } | { kind: 'share'; slug: string };

/** The bounds createKey checks (SPEC §13, limits.max_keys_per_account and max_keys_made_per_day); absent or 0: none. */
export interface KeyCaps {
  readonly maxPerAccount?: number | undefined;
  readonly maxMadePerDay?: number | undefined;
}

/**
 * What createKey did: stored the key, refused it at one of its account's caps (KeyCaps), or — for a roll's
 * new key (`record.rolled_from`) — refused it because that key already has a successor, named here.
 */
export type KeyCreated = 'created' | 'held_cap' | 'daily_cap' | { rolledTo: string };

export interface Store {
  /**
   * The embedded store only: snapshot texts by slug, kept beside the records so every gateway on this
   * store reads the same ones (shares/snapshot-objects.ts). Redis never holds snapshots (SPEC §13).
   */
  readonly snapshotTexts?: Map<string, string>;
  readonly kind: 'redis' | 'memory';
  /**
   * The client rate-limiter-flexible counts with: on a single node its script goes through the script
   * pipe (limiter-client.ts), on Cluster/Sentinel through ioredis; undefined for the embedded store.
   */
  readonly redis: Redis | Cluster | LimiterClient | undefined;

  /**
   * Stores a new key record, counted into its account's keys and into the keys the account made on the
   * UTC day of its `created_at`. Refused, nothing stored: `held_cap` when the account already holds
   * `maxPerAccount` keys, disabled ones included; `daily_cap` when it already made `maxMadePerDay` keys
   * that day, deleted ones included. The checks and the counts are atomic (SPEC §13, lua/add-key.lua), so
   * concurrent creates cannot pass either. A record with `rolled_from` is a roll's new key: a key has at
   * most one successor, claimed in the same atomic step, so concurrent rolls of one key make one key; the
   * others get `{ rolledTo }`. The claim goes with either key's delete (then the old key may roll again).
   */
  createKey(hash: string, record: KeyRecord, caps?: KeyCaps): Promise<KeyCreated>;
  getKeyByHash(hash: string): Promise<KeyRecord | null>;
  getKey(id: string): Promise<{ record: KeyRecord; hash: string } | null>;
  listKeys(account: string): Promise<KeyRecord[]>;
  /**
   * Every key record, in batches, for checks at boot (main.ts warns of keys naming models the config
   * no longer has). Redis: SCAN over key records (on every master of a Cluster), never KEYS.
   */
  scanKeys(onBatch: (records: KeyRecord[]) => void): Promise<void>;
  /** Applies the patch and bumps the version; null when the id is unknown. */
  updateKey(id: string, patch: KeyPatch): Promise<{ record: KeyRecord; hash: string } | null>;
  /**
   * Removes the record and its indexes for good (SPEC §15); null when the id is unknown. `record` null: the
   * record was already gone, and this finished a half-done delete (Redis: its id index was left).
   */
  deleteKey(id: string): Promise<{ record: KeyRecord | null; hash: string } | null>;
  /** What a key's budget counter of one period has settled (`spent`) and holds open now (`held`). */
  keySpend(account: string, keyId: string, period: string, nowMs: number): Promise<{ spent_micros: number; held_micros: number }>;

  grant(
    account: string,
    amountMicros: number,
    idempotencyKey: string | undefined,
    note: string | undefined,
    ts: string,
  ): Promise<GrantResult>;
  getAccount(account: string): Promise<AccountState>;
  /** Entries oldest first, strictly after `after` when given. */
  ledger(account: string, after: string | undefined, limit: number): Promise<LedgerEntry[]>;
  /**
   * Takes a hold when balance − held ≥ amount; idempotent per request id and expiry (a replay repeats
   * both). A hold for a request already settled or reaped takes nothing; one whose expiry bucket the reaper
   * has already emptied is refused (`ok: false`).
   */
  hold(account: string, requestId: string, amountMicros: number, expiresAtMs: number, budget?: BudgetCharge): Promise<HoldResult>;
  /**
   * Debits the cost, releases the hold, appends the debit entry; idempotent per request id. A store error
   * whose `cause.sent === false` never reached the store (the settle certainly did not run).
   */
  settle(input: SettleInput): Promise<SettleResult>;
  /**
   * Registers `listener`, called when writes this store acknowledged may be missing from the server it
   * reaches next: a connection to a Redis master ended or a node stopped answering, and a replica promoted
   * in its place may not have received its last writes (Redis replicates asynchronously). `lost` resolves
   * once that is known: true when they may be lost (Cluster: at once; a single node: the next connection
   * reached another server process), false when not (the same process again, or the store closed). The
   * credit layer then sends the settles that landed just before the report again (credit.ts,
   * docs/ledger.md "Failover"). Absent on a store that cannot lose an acknowledged write (the embedded store).
   */
  onPossibleLoss?(listener: (lost: Promise<boolean>) => void): void;
  /**
   * The due time of the hold bucket a hold expiring at `expiresAtMs` goes to in this store (hold-bucket.ts,
   * at this store's bucket size): what the request's settle carries as `holdBucketDue`.
   */
  holdBucketDue?(expiresAtMs: number): number;
  /**
   * Releases holds whose expiry bucket is due (⌈expiry / bucket⌉ · bucket ≤ now, hold-bucket.ts), each
   * with a `hold_expired` entry, and drops the records of settled requests with them; returns how many holds.
   */
  reapExpiredHolds(nowMs: number, ts: string): Promise<number>;
  /** Credit leases of this process (docs/ledger.md "Leases"), when the store has them on: for /metrics. */
  leaseStats?(): LeaseStats;
  /**
   * Shutdown: settles waiting to share a call (`credit.lease_linger_ms`, docs/ledger.md "Lingering passes")
   * go now, and from now on each turn's go in that turn.
   */
  hurry?(): void;

  putShare(record: ShareRecord): Promise<void>;
  /**
   * Counts a new share against its account's quota, atomically: 'ok', or which limit it would pass
   * (SPEC §12: shares.max_per_account / max_bytes_per_account).
   */
  reserveShareQuota(
    account: string,
    slug: string,
    bytes: number,
    limits: ShareQuotaLimits,
    createdMs: number,
  ): Promise<'ok' | 'count' | 'bytes' | 'unfunded'>;
  /**
   * Gives a share's count and bytes back and takes it out of the account's index; idempotent per share.
   * `revoked`: remembered among the account's revoked shares (listed for the console) within `keep`, the
   * tombstones of those pushed past it deleted; `dropped`: it was never stored and is forgotten.
   */
  releaseShareQuota(account: string, slug: string, how?: 'revoked' | 'dropped', keep?: RevokedShareKeep): Promise<void>;
  /** Records the intent of a create before its object is written (the orphan sweep's index). */
  markSharePending(p: PendingShare, atMs: number): Promise<void>;
  /** Removes the intent once the record is written (or the orphan cleaned up). */
  clearSharePending(p: PendingShare): Promise<void>;
  /**
   * Moves an intent's time forward to `atMs` (never back), if it is still there: the sweep puts off an
   * intent it could not finish, so that it does not come first in every later sweep. An intent cleared
   * meanwhile is not written again, and one written again meanwhile (a revoke's, newer) is left as it is.
   */
  deferSharePending(p: PendingShare, atMs: number): Promise<void>;
  /** Intents older than `beforeMs`, oldest first, at most `limit`. */
  duePendingShares(beforeMs: number, limit: number): Promise<PendingShare[]>;
  /**
   * The migration's walk: from `cursor` ('' = the start), about `count` records looked at; returns
   * those that still hold their snapshot or their file list. Resumable: the cursor can be saved and given
   * back later.
   */
  scanLegacyShares(cursor: string, count: number): Promise<LegacySharePage>;
  /**
   * Drops a legacy record's snapshot text and file list (their objects are confirmed), keeping `fileCount`;
   * false when nothing was left to do.
   */
  compactShare(slug: string, bytes: number, fileCount?: number): Promise<boolean>;
  /**
   * The migration's shared progress: takes (or renews) the lease for `owner` for `ttlMs` and returns the
   * saved walk (null = finished), or undefined when another instance holds the lease.
   */
  claimShareMigration(owner: string, ttlMs: number): Promise<ShareMigration | null | undefined>;
  /** Saves the walk (null = a whole walk found nothing to move: finished) while holding the lease. */
  saveShareMigration(owner: string, walk: ShareMigration | null): Promise<void>;
  getShare(slug: string): Promise<ShareRecord | null>;
  /**
   * Revokes the share (idempotent): its record becomes a tombstone (account, created_at, revoked_at; no
   * files, bytes 0) that expires after `keep.retentionMs`. Returns the record as it was, revoked_at set
   * (a repeated revoke: the tombstone, first revoked_at kept); null when unknown.
   */
  revokeShare(slug: string, ts: string, keep?: RevokedShareKeep): Promise<ShareRecord | null>;

  publish(msg: Invalidation): Promise<void>;
  /** Registers the handler for invalidations from every instance, this one included. */
  onInvalidation(handler: (msg: Invalidation) => void): void;

  /** True when the store answers. */
  ping(): Promise<boolean>;
  close(): Promise<void>;

  // Console (SPEC §9): sign-in tokens and sessions, stored only under the SHA-256 of their secret.
  /**
   * Stores a single-use sign-in token that expires after `ttlSeconds` (at most a day: MAX_LINK_TTL_SECONDS).
   * A member's token is stamped with its account's link generation (deleteAccountSessions bumps it).
   */
  putLoginToken(hash: string, grant: ConsoleGrant, ttlSeconds: number): Promise<void>;
  /**
   * Returns and deletes the token in one atomic step: a second take of the same token gets null, and so
   * does a member token minted before its account's sessions were last ended.
   */
  takeLoginToken(hash: string): Promise<ConsoleGrant | null>;
  /** Stores a session that expires after `ttlSeconds`, indexed by account so it can be ended with the others. */
  putSession(hash: string, session: ConsoleSession, ttlSeconds: number): Promise<void>;
  /** The live session, or null (unknown, ended or expired). */
  getSession(hash: string): Promise<ConsoleSession | null>;
  deleteSession(hash: string): Promise<void>;
  /**
   * Ends every session of a member account and revokes its sign-in tokens stored before (the ones not yet
   * taken); tokens stored afterwards work. Returns how many sessions were live.
   */
  deleteAccountSessions(account: string): Promise<number>;
  /**
   * Account ids that have keys or a ledger and contain `search` (case-insensitive), sorted, at most
   * `limit`. Redis: SCAN over account keys (every master of a Cluster), never KEYS; an operator page.
   */
  listAccounts(search: string, limit: number): Promise<string[]>;
  /** Ledger entries newest first, strictly before `before` when given (the console's pages). */
  ledgerBefore(account: string, before: string | undefined, limit: number): Promise<LedgerEntry[]>;
  /** The account's shares, live and revoked, newest first, at most `limit`. */
  listShares(account: string, limit: number): Promise<ShareRecord[]>;

  // Ledger export and retention (SPEC §10, docs/ledger-export.md).
  /** Adds accounts to the global index of accounts with ledger entries (its own key: SPEC §11). */
  indexLedgerAccounts(accounts: readonly string[]): Promise<void>;
  /** Every indexed account, in batches (SSCAN). */
  scanLedgerAccounts(onBatch: (accounts: string[]) => Promise<void>): Promise<void>;
  /** Indexes every account that has a ledger (a SCAN of the keyspace: accounts from before the index existed). */
  backfillLedgerIndex(): Promise<number>;
  exportState(account: string): Promise<ExportState>;
  /** Takes the account's export lease for `ttlMs` when free (or already `token`'s); false when another holds it. */
  acquireExportLease(account: string, token: string, ttlMs: number): Promise<boolean>;
  releaseExportLease(account: string, token: string): Promise<void>;
  /**
   * Moves the export cursor from `from` to `to`, only while `token` holds the lease and the cursor is
   * still `from` (a fenced compare-and-set); false when either is not so, and nothing changes.
   */
  commitExport(account: string, token: string, from: string | null, to: string): Promise<boolean>;
  /**
   * Trims entries older than `beforeId` that are also at or before the export cursor (XTRIM MINID); an
   * unexported entry is never trimmed. Returns how many were removed (archived_before moves when > 0).
   */
  trimLedger(account: string, beforeId: string): Promise<number>;

  // Usage aggregates (SPEC §10, src/usage/).
  /** Adds one process's aggregates in one flush: single-key commands, so any slot layout works. */
  flushUsage(f: UsageFlush): Promise<void>;
  /**
   * The stored cells of an account for the days `from`..`to` (YYYY-MM-DD, inclusive), each day read whole
   * at one instant (a flush is in it or not). `sliced`: each day read a slice at a time (Redis: `HSCAN`),
   * so no reply is large; a flush landing meanwhile may be in some of a cell's counters and not in others
   * until the next read. For a page that shows figures (the console), never for a bill.
   */
  usageCells(account: string, from: string, to: string, o?: { sliced?: boolean }): Promise<UsageCell[]>;
  /**
   * The stored fields of each day `from`..`to` (HLEN: O(1) a day, whatever the day holds), an upper
   * bound on its cells (a cell is 1–5 fields): what a bounded reader checks before `usageCells`.
   */
  usageDayFields(account: string, from: string, to: string): Promise<number[]>;
  /**
   * Replaces the cells of `day` for the given keys with `cells` (a rebuild from the ledger); cells of
   * other keys (test keys, which write no ledger) stay.
   */
  replaceUsage(account: string, day: string, keyIds: readonly string[], cells: readonly UsageCell[], retentionDays: number): Promise<void>;
  /** key id → ISO minute of its last request, for an account's keys. */
  lastUsed(account: string): Promise<Record<string, string>>;
}

/** Account ids become part of Redis keys inside a `{acct:<id>}` hash tag, so `{`/`}` must never appear. */
/** An account id's pattern as 422 bodies quote it; ids become part of Redis keys. */
export const ACCOUNT_ID_PATTERN = '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$';
export const ACCOUNT_ID = new RegExp(ACCOUNT_ID_PATTERN);

export function encodeInvalidation(m: Invalidation): string {
  return m.kind === 'key' ? `key ${m.hash} ${m.version}` : `share ${m.slug}`;
}

export function decodeInvalidation(s: string): Invalidation | null {
  const [kind, a, b] = s.split(' ');
  if (kind === 'key' && a && b) return { kind: 'key', hash: a, version: Number(b) };
  if (kind === 'share' && a) return { kind: 'share', slug: a };
  return null;
}

/** The ledger export's and usage aggregates' part of the store (redis-export.ts, memory-export.ts). */
export type ExportStore = Pick<
  Store,
  | 'indexLedgerAccounts'
  | 'scanLedgerAccounts'
  | 'backfillLedgerIndex'
  | 'exportState'
  | 'acquireExportLease'
  | 'releaseExportLease'
  | 'commitExport'
  | 'trimLedger'
  | 'flushUsage'
  | 'usageCells'
  | 'usageDayFields'
  | 'replaceUsage'
  | 'lastUsed'
>;
