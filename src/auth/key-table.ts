/**
 * Key administration (SPEC §2): create (the full key is returned once and never stored), list, read,
 * rename, enable/disable, set rate-limit overrides. Every change bumps the record's version and is
 * broadcast, so every instance drops its cached copy within a pub/sub hop.
 */
import { GatewayError } from '../http/errors.ts';
import { generateKey, generateKeyId, hashKey } from './keys.ts';
import {
  SCOPES,
  type KeyBudget,
  type KeyEnv,
  type KeyPatch,
  type KeyRecord,
  type RateLimitOverride,
  type Scope,
  type Store,
} from '../store/types.ts';

const DAY_MS = 86_400_000;

/** 409 for a roll of a key past its expiry (docs/keys.md "Rotation"). */
const notRollableExpired = (r: KeyRecord) =>
  new GatewayError(
    'key_not_rollable',
    `Key ${r.id} expired at ${r.expires_at}: an expired key is not rolled. Create a new key, or move its expires_at (PATCH) first.`,
  );

export interface NewKey {
  account: string;
  env: KeyEnv;
  name: string;
  scopes?: Scope[] | undefined;
  models?: string[] | undefined;
  rate_limits?: RateLimitOverride | null | undefined;
  expires_at?: string | null | undefined;
  budget?: KeyBudget | null | undefined;
  /** false: made disabled (a roll of a disabled key); absent: active. */
  active?: boolean | undefined;
  /** The key this one is rolled from: refused when that key already has a successor (roll). */
  rolled_from?: string | undefined;
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
    expires_at: r.expires_at ?? null,
    budget: r.budget ?? null,
  };
}

/** True when the key's `expires_at` has passed at `nowMs` (SPEC §15: refused like a disabled key). */
export function isExpired(r: KeyRecord, nowMs: number): boolean {
  return r.expires_at != null && Date.parse(r.expires_at) <= nowMs;
}

export interface KeyTable {
  /** limits.max_keys_per_account; undefined: no cap. */
  readonly maxPerAccount: number | undefined;
  /** limits.max_keys_made_per_day; undefined or 0: no bound. */
  readonly maxMadePerDay: number | undefined;
  /** `slack` keys past the cap are allowed (a roll's new key, while the old one waits out its grace). */
  create(k: NewKey, slack?: number): Promise<{ key: string; record: KeyRecord }>;
  get(id: string): Promise<KeyRecord | null>;
  list(account: string): Promise<KeyRecord[]>;
  update(id: string, patch: KeyPatch): Promise<KeyRecord | null>;
  /** Deletes the key for good (SPEC §15): gone from every list, its hash refused on every instance; false when unknown. */
  delete(id: string): Promise<boolean>;
  /**
   * Rolls a key (SPEC §15): a new key with the old one's account, env, name, scopes, models, rate limits,
   * budget, state (a disabled key's successor is disabled) and expiry, while the old one expires
   * `graceSeconds` from now (or earlier, if it already would). Once per key: a key that already has a
   * successor, or that has expired, throws 409 `key_not_rollable` (docs/keys.md).
   */
  roll(id: string, graceSeconds: number): Promise<{ key: string; record: KeyRecord; previous: KeyRecord } | null>;
}

/**
 * `maxPerAccount` (limits.max_keys_per_account, SPEC §13) caps the keys one account holds, disabled
 * ones included (disabling is free, so it must not make room); `maxMadePerDay`
 * (limits.max_keys_made_per_day) bounds the keys it makes in one UTC day, deleted ones and rolls included
 * (each key id made writes usage cells kept usage.retention_days, so deleting must not make room either).
 * Past either, `create` and `roll` throw 429 `key_limit_exceeded`, whichever front door (admin API,
 * console) asked; only the daily refusal carries `retry-after` (the next UTC midnight): waiting helps it.
 */
export function createKeyTable(d: { store: Store; now: () => number; maxPerAccount?: number; maxMadePerDay?: number }): KeyTable {
  return {
    maxPerAccount: d.maxPerAccount,
    maxMadePerDay: d.maxMadePerDay,
    async create(k, slack = 0) {
      const key = generateKey(k.env);
      const record: KeyRecord = {
        id: generateKeyId(),
        account: k.account,
        env: k.env,
        name: k.name,
        active: k.active ?? true,
        scopes: k.scopes ?? [...SCOPES],
        models: k.models ?? [],
        rate_limits: k.rate_limits ?? null,
        created_at: new Date(d.now()).toISOString(),
        last4: key.slice(-4),
        version: 1,
        ...(k.expires_at != null && { expires_at: k.expires_at }),
        ...(k.budget != null && { budget: k.budget }),
        ...(k.rolled_from !== undefined && { rolled_from: k.rolled_from }),
      };
      const cap = d.maxPerAccount === undefined || d.maxPerAccount === 0 ? d.maxPerAccount : d.maxPerAccount + slack;
      const made = await d.store.createKey(hashKey(key), record, { maxPerAccount: cap, maxMadePerDay: d.maxMadePerDay });
      if (typeof made === 'object' && made.rolledTo === '') {
        // This roll's claim was dropped by another (it was slow) and no claim stands now: say so, not a name.
        throw new GatewayError(
          'key_not_rollable',
          `Key ${k.rolled_from} was being rolled by another request at the same time; nothing was made. Look at the account's keys, then roll again if it has no successor.`,
        );
      }
      if (typeof made === 'object') {
        throw new GatewayError(
          'key_not_rollable',
          `Key ${k.rolled_from} was already rolled: its successor is ${made.rolledTo}. A key rolls once: roll ${made.rolledTo} instead (or, if its key was never received, delete it and roll again).`,
        );
      }
      if (made === 'held_cap') {
        throw new GatewayError(
          'key_limit_exceeded',
          `Account ${JSON.stringify(k.account)} already has ${d.maxPerAccount === 1 ? '1 key' : `${d.maxPerAccount} keys`}, the most one account may hold ` +
            '(disabled keys count). Reuse or re-enable a key, or ask the operator to raise limits.max_keys_per_account.',
        );
      }
      if (made === 'daily_cap') {
        const ms = Date.parse(`${record.created_at.slice(0, 10)}T00:00:00Z`) + DAY_MS - d.now();
        throw new GatewayError(
          'key_limit_exceeded',
          `Account ${JSON.stringify(k.account)} already made ${d.maxMadePerDay === 1 ? '1 key' : `${d.maxMadePerDay} keys`} today (UTC), ` +
            'the most one account may make in a day (deleted and rolled keys count). Reuse a key, or create it after midnight UTC; ' +
            'the operator can raise limits.max_keys_made_per_day.',
          { headers: { 'retry-after': String(Math.max(1, Math.ceil(ms / 1000))), 'retry-after-ms': String(Math.max(1, ms)) } },
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
    async delete(id) {
      const r = await d.store.deleteKey(id);
      if (!r) return false;
      // A version above the last one: a read racing the delete cannot put the old record back in a cache.
      // A half-deleted key's version went with its record: the highest there is (its hash is never reused).
      const version = r.record ? r.record.version + 1 : Number.MAX_SAFE_INTEGER;
      await d.store.publish({ kind: 'key', hash: r.hash, version });
      return true;
    },
    async roll(id, graceSeconds) {
      const old = await this.get(id);
      if (!old) return null;
      // An expired key is not rolled: its successor would be born expired (it inherits the expiry), and a
      // roll must not bring a dead key back as a live one. Moving the expiry (PATCH) is the explicit way.
      if (isExpired(old, d.now())) throw notRollableExpired(old);
      const made = await this.create(
        {
          account: old.account,
          env: old.env,
          name: old.name,
          scopes: old.scopes,
          models: old.models,
          rate_limits: old.rate_limits,
          budget: old.budget ?? null,
          // A roll replaces the secret, nothing else: a disabled key's successor is disabled (enable it with
          // PATCH), and a key that expires at T has a successor that expires at T too.
          active: old.active,
          expires_at: old.expires_at ?? null,
          rolled_from: old.id,
        },
        1,
      ); // an account at its key cap can still roll once: the old key expires, and deleting it frees the slot
      // Its key not shown yet, the successor is undone on any failure from here: a key stored but never
      // received would authenticate with nobody to hold it, and its claim would block the next roll.
      const undo = () => this.delete(made.record.id).catch(() => false);
      let shortened: KeyRecord | undefined; // the old key as it was before the grace write, once that is sent
      try {
        // The old key read again now that its successor is claimed and stored (the record is another Cluster
        // slot than the claim, so this is the commit point, not the script): a PATCH that disabled the key,
        // moved its expiry or changed what it may do since the read above — or the clock passing its
        // expiry — is taken over, as if the roll had come after it. Else a key disabled mid-roll had an
        // active successor. A change landing after this read is a change after the roll.
        const now = (await this.get(id)) ?? old; // deleted meanwhile: that delete came after the roll
        if (isExpired(now, d.now())) throw notRollableExpired(now); // undone below
        let record = made.record;
        if (now.version !== old.version) {
          const patch: KeyPatch = {};
          if (now.active !== record.active) patch.active = now.active;
          if ((now.expires_at ?? null) !== (record.expires_at ?? null)) patch.expires_at = now.expires_at ?? null;
          if (now.name !== record.name) patch.name = now.name;
          if (JSON.stringify(now.scopes) !== JSON.stringify(record.scopes)) patch.scopes = now.scopes;
          if (JSON.stringify(now.rate_limits) !== JSON.stringify(record.rate_limits)) patch.rate_limits = now.rate_limits;
          if (JSON.stringify(now.budget ?? null) !== JSON.stringify(record.budget ?? null)) patch.budget = now.budget ?? null;
          if (Object.keys(patch).length > 0) record = (await this.update(record.id, patch)) ?? { ...record, ...patch };
        }
        const graceEnd = d.now() + graceSeconds * 1000;
        const current = now.expires_at == null ? Infinity : Date.parse(now.expires_at);
        if (graceEnd < current) shortened = now;
        const previous = graceEnd < current ? await this.update(id, { expires_at: new Date(graceEnd).toISOString() }) : now;
        return { key: made.key, record, previous: previous ?? now };
      } catch (e) {
        // The old key's grace write may have landed with its reply lost: its expiry goes back first, so a
        // failed roll leaves the old key as it was (with grace 0 it would be dead with no successor, and a
        // retry's successor would copy the shortened expiry). Redis failing that too: logged by the caller's
        // error; the key then expires at the grace end, as the roll asked.
        if (shortened) await this.update(id, { expires_at: shortened.expires_at ?? null }).catch(() => null);
        await undo();
        throw e;
      }
    },
  };
}
