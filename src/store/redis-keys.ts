/**
 * Redis key names. Everything of one account shares the hash tag `{acct:<id>}` so each Lua script runs
 * in one Cluster slot (SPEC §4). Key records and shares are single keys and need no tag.
 */
export const keyRecord = (hash: string) => `tg:key:${hash}`;
export const keyIdIndex = (id: string) => `tg:keyid:${id}`;
export const accountKeys = (acct: string) => `{acct:${acct}}:keys`;
/** How many keys an account made on one UTC day (limits.max_keys_made_per_day; lua/add-key.lua), gone two days on. */
export const keysMade = (acct: string, day: string) => `{acct:${acct}}:keys-made:${day}`;
/**
 * An account's rolled keys: old key id → the id of the key it was rolled to (lua/add-key.lua claims it with
 * the new key, so a key rolls once). In the account's slot; a field goes with either key's delete.
 */
export const keysRolled = (acct: string) => `{acct:${acct}}:rolled`;
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
/** An account's revoked shares still remembered (score: revoke ms), at most shares.max_revoked_per_account; in the account's slot. */
export const shareRevoked = (acct: string) => `{acct:${acct}}:shares-revoked`;
export const INVALIDATION_CHANNEL = 'tg:inval';
/** Creates whose object may exist without a record yet (member `<slug><account>`, score ms): the orphan sweep's index. */
export const SHARES_PENDING = 'tg:share-pending';
/** The snapshot migration's saved cursor and state (hash), and its lease (string, PX). */
export const SHARES_MIGRATION = 'tg:share-migration';
export const SHARES_MIGRATION_LEASE = 'tg:share-migration:lease';
/** An account's shares by creation time (ms), for the console's list; in the account's slot. */
export const shareList = (acct: string) => `{acct:${acct}}:share-list`;
/** Console sign-in tokens and sessions, by the SHA-256 of their secret (SPEC §9). */
export const consoleLogin = (hash: string) => `tg:console:login:${hash}`;
export const consoleSession = (hash: string) => `tg:console:session:${hash}`;
/** A member account's session hashes, so an operator can end them all. */
export const consoleSessions = (acct: string) => `{acct:${acct}}:console-sessions`;
/** A member account's sign-in link generation: ending its sessions bumps it, and a link minted under an older one is refused. */
export const consoleLinkGeneration = (acct: string) => `{acct:${acct}}:console-links`;
/** Matches every per-account key; the console's account list reads ids out of the names. */
export const ACCOUNT_KEYS_PATTERN = '{acct:*}:*';
export const ACCOUNT_OF_KEY = /^\{acct:([^}]+)\}:(?:keys|bal|ledger)$/;
/** Global index of accounts with ledger entries, for the export (SPEC §11: never in an account's script). */
export const LEDGER_ACCOUNTS = 'tg:ledger:accounts';
/** An account's export cursor and archived_before (hash), and its export lease (string, PX). */
export const exportState = (acct: string) => `{acct:${acct}}:export`;
export const exportLease = (acct: string) => `{acct:${acct}}:export:lease`;
/** An account's usage aggregates of one UTC day: fields `<key id>|<model>|<r|p|c|$>`. */
export const usageDay = (acct: string, day: string) => `{acct:${acct}}:usage:${day}`;
/** An account's keys' last use: key id → ISO minute. */
export const keysUsed = (acct: string) => `{acct:${acct}}:used`;
/** A key's budget counter of one period (credit/budget.ts): `s` settled spend, `h<due>` open holds by bucket due time. */
export const keyBudget = (acct: string, keyId: string, period: string) => `{acct:${acct}}:kb:${keyId}:${period}`;
