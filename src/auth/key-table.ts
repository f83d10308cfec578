/**
 * Key administration (SPEC §2): create (the full key is returned once and never stored), list, read,
 * rename, enable/disable, set rate-limit overrides. Every change bumps the record's version and is
 * broadcast, so every instance drops its cached copy within a pub/sub hop.
 */
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
  create(k: NewKey): Promise<{ key: string; record: KeyRecord }>;
  get(id: string): Promise<KeyRecord | null>;
  list(account: string): Promise<KeyRecord[]>;
  update(id: string, patch: KeyPatch): Promise<KeyRecord | null>;
}

export function createKeyTable(d: { store: Store; now: () => number }): KeyTable {
  return {
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
      await d.store.createKey(hashKey(key), record);
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
