/**
 * The store contract (SPEC §5): one interface, two implementations — Redis (production, shared by
 * every instance) and the embedded in-process store (one instance, state lost on restart). The contract
 * test suite runs against both. All amounts are integer micro-credits.
 */
import type { Cluster, Redis } from 'ioredis';
import type { LimiterClient } from './limiter-client.ts';

export type KeyEnv = 'live' | 'test';
export type Scope = 'chat' | 'models' | 'shares';
export const SCOPES: readonly Scope[] = ['chat', 'models', 'shares'];

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
}

export interface KeyPatch {
  name?: string;
  active?: boolean;
  rate_limits?: RateLimitOverride | null;
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
}

export interface HoldResult {
  ok: boolean;
  balance_micros: number;
  held_micros: number;
}

export interface SettleInput {
  account: string;
  requestId: string;
  costMicros: number;
  keyId: string;
  model: string;
  promptTokens: number;
  completionTokens: number;
  usageSource: UsageSource;
  /** ISO time of the ledger entry. */
  ts: string;
  /**
   * The expiry the request's hold was taken with (hold()'s `expiresAtMs`): where the settle finds it
   * (docs/ledger.md). Without it the settle releases no hold (the reaper does, with a hold_expired entry).
   */
  holdExpiresAtMs?: number;
  /**
   * True when an earlier attempt of this same settle was sent and no answer came (it may have run). Once
   * the request's hold bucket has been emptied by the reaper, such a settle that finds no trace of its
   * request debits nothing and answers `entry_id: ''` (docs/ledger.md), never a second debit.
   */
  mayHaveRun?: boolean;
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
  /** The snapshot as published, kept as JSON text so reads return it byte-for-byte. */
  snapshot: string;
  files: ShareFile[];
  revoked_at: string | null;
}

/** Invalidation messages, broadcast to every instance (Redis pub/sub; local for the embedded store). */
export type Invalidation = { kind: 'key'; hash: string; version: number } | { kind: 'share'; slug: string };

export interface Store {
  readonly kind: 'redis' | 'memory';
  /**
   * The client rate-limiter-flexible counts with: on a single node its script goes through the script
   * pipe (limiter-client.ts), on Cluster/Sentinel through ioredis; undefined for the embedded store.
   */
  readonly redis: Redis | Cluster | LimiterClient | undefined;

  createKey(hash: string, record: KeyRecord): Promise<void>;
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
  hold(account: string, requestId: string, amountMicros: number, expiresAtMs: number): Promise<HoldResult>;
  /**
   * Debits the cost, releases the hold, appends the debit entry; idempotent per request id. A store error
   * whose `cause.sent === false` never reached the store (the settle certainly did not run).
   */
  settle(input: SettleInput): Promise<SettleResult>;
  /**
   * Releases holds whose expiry bucket is due (⌈expiry / bucket⌉ · bucket ≤ now, hold-bucket.ts), each
   * with a `hold_expired` entry, and drops the records of settled requests with them; returns how many holds.
   */
  reapExpiredHolds(nowMs: number, ts: string): Promise<number>;

  putShare(record: ShareRecord): Promise<void>;
  /**
   * Counts a new share against its account's quota, atomically: 'ok', or which limit it would pass
   * (SPEC §12: shares.max_per_account / max_bytes_per_account).
   */
  reserveShareQuota(
    account: string,
    slug: string,
    bytes: number,
    limits: { maxCount: number; maxBytes: number },
  ): Promise<'ok' | 'count' | 'bytes'>;
  /** Gives a share's count and bytes back (revoked, or never stored); idempotent per share. */
  releaseShareQuota(account: string, slug: string): Promise<void>;
  getShare(slug: string): Promise<ShareRecord | null>;
  /** Marks the share revoked (idempotent); null when unknown. */
  revokeShare(slug: string, ts: string): Promise<ShareRecord | null>;

  publish(msg: Invalidation): Promise<void>;
  /** Registers the handler for invalidations from every instance, this one included. */
  onInvalidation(handler: (msg: Invalidation) => void): void;

  /** True when the store answers. */
  ping(): Promise<boolean>;
  close(): Promise<void>;
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
