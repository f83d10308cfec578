/**
 * Key administration (SPEC §2): create (the full key is returned once and never stored), list, read,
 * rename, enable/disable, set rate-limit overrides. Every change bumps the record's version and is
 * broadcast, so every instance drops its cached copy within a pub/sub hop.
 */
import { GatewayError } from '../http/errors.ts';
import { generateKey, generateKeyId, hashKey } from './keys.ts';
import { SCOPES, type KeyEnv, type KeyPatch, type KeyRecord, type RateLimitOverride, type Scope, type Store } from '../store/types.ts';

export interface NewKey {
  account: string;
  env: KeyEnv;
  name: string;
  scopes?: Scope[] | undefined;
  models?: string[] | undefined;
  rate_limits?: RateLimitOverride | null | undefined;
}

/** The public view of a record (no version), in SPEC §2a's field order. */
export function publicKey(r: KeyRecord) {
  return {
    id: r.id,
    account: r.account,
    env: r.env,
    name: r.name,
    active: r.active,
    scopes: r.scopes,
    models: r.models,
    rate_limits: r.rate_limits,
    created_at: r.created_at,
    last4: r.last4,
  };
}

export interface KeyTable {
  /** limits.max_keys_per_account; undefined: no cap. */
  readonly maxPerAccount: number | undefined;
  create(k: NewKey): Promise<{ key: string; record: KeyRecord }>;
  get(id: string): Promise<KeyRecord | null>;
  list(account: string): Promise<KeyRecord[]>;
  update(id: string, patch: KeyPatch): Promise<KeyRecord | null>;
}

/**
 * `maxPerAccount` (limits.max_keys_per_account, SPEC §13) caps the keys one account holds, disabled
 * ones included (disabling is free, so it must not make room): past it `create` throws 429
 * `key_limit_exceeded`, whichever front door (admin API, console) asked.
 */
export function createKeyTable(d: { store: Store; now: () => number; maxPerAccount?: number }): KeyTable {
  return {
    maxPerAccount: d.maxPerAccount,
    async create(k) {
      const key = generateKey(k.env);
      const record: KeyRecord = {
        id: generateKeyId(),
        account: k.account,
        env: k.env,
        name: k.name,
        active: true,
        scopes: k.scopes ?? [...SCOPES],
        models: k.models ?? [],
        rate_limits: k.rate_limits ?? null,
        created_at: new Date(d.now()).toISOString(),
        last4: key.slice(-4),
        version: 1,
      };
      if (!(await d.store.createKey(hashKey(key), record, d.maxPerAccount))) {
        throw new GatewayError(
          'key_limit_exceeded',
          `Account ${JSON.stringify(k.account)} already has ${d.maxPerAccount === 1 ? '1 key' : `${d.maxPerAccount} keys`}, the most one account may hold ` +
            '(disabled keys count). Reuse or re-enable a key, or ask the operator to raise limits.max_keys_per_account.',
        );
      }
      return { key, record };
    },
    async get(id) {
      return (await d.store.getKey(id))?.record ?? null;
    },
    list(account) {
      return d.store.listKeys(account);
    },
    async update(id, patch) {
      const r = await d.store.updateKey(id, patch);
      if (!r) return null;
      await d.store.publish({ kind: 'key', hash: r.hash, version: r.record.version });
      return r.record;
    },
  };
}
