/**
 * Redis key names. Everything of one account shares the hash tag `{acct:<id>}` so each Lua script runs
 * in one Cluster slot (SPEC §4). Key records and shares are single keys and need no tag.
 */
export const keyRecord = (hash: string) => `tg:key:${hash}`;
export const keyIdIndex = (id: string) => `tg:keyid:${id}`;
export const accountKeys = (acct: string) => `{acct:${acct}}:keys`;
export const balance = (acct: string) => `{acct:${acct}}:bal`;
export const ledger = (acct: string) => `{acct:${acct}}:ledger`;
export const idempotency = (acct: string) => `{acct:${acct}}:idem`;
/** The holds of an account that expire in one second, by the bucket's due time (hold-bucket.ts). */
export const holdBucket = (acct: string, dueMs: number) => `{acct:${acct}}:hb:${dueMs}`;
/**
 * Global index of hold buckets (member `[account, due]`, score the due time), read by every instance's
 * reaper. Never touched in a script with an account's keys (SPEC §11).
 */
export const HOLD_BUCKETS = 'tg:hold-buckets';
/** Open holds of the layout before hold buckets (docs/ledger.md "Migration"): read, never written. */
export const holds = (acct: string) => `{acct:${acct}}:holds`;
/** A settled marker of the layout before hold buckets: read, never written, gone by its TTL. */
export const settled = (acct: string, requestId: string) => `{acct:${acct}}:done:${requestId}`;
/** The old layout's global index of open holds (one member per request): drained by the reaper. */
export const HOLD_INDEX = 'tg:holds';
export const share = (slug: string) => `tg:share:${slug}`;
/** An account's live shares and their bytes (SPEC §12 quotas), in the account's slot. */
export const shareQuota = (acct: string) => `{acct:${acct}}:shares`;
export const INVALIDATION_CHANNEL = 'tg:inval';
