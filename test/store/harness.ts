// Shared plumbing for the store contract: a store wrapper that remembers which holds the test took, and
// the two invariants every case ends on (SPEC §4): balance = Σ ledger amount_micros, held = Σ open holds.
import type { Test } from 'tap';
import { compareIds } from '../../src/ledger/entries.ts';
import { createMemoryStore } from '../../src/store/memory-store.ts';
import type { KeyRecord, LedgerEntry, SettleInput, Store } from '../../src/store/types.ts';
export { waitFor } from '../helpers/wait.ts';

/** Builds a fresh, empty store for one subtest and closes it at that subtest's teardown. */
export type MakeStore = (t: Test) => Promise<Store>;

export interface ContractOptions {
  /**
   * A second instance sharing `store`'s state (another gateway process on the same Redis). Defaults to
   * `store` itself, which is the only honest answer for the embedded store.
   */
  makePeer?: (t: Test, store: Store) => Promise<Store>;
}

/** A store plus what the test itself knows about it, so invariants need nothing implementation-specific. */
export interface Harness {
  store: Store;
  /** Every account the case touched through grant/hold/settle. */
  accounts: Set<string>;
  /** account → request id → amount of the first successful hold of that request id. */
  holds: Map<string, Map<string, number>>;
}

export const TS = '2026-11-22T10:00:00.000Z';
export const TS2 = '2026-11-22T10:05:00.000Z';
export const ENTRY_ID = /^\d+-\d+$/;

let counter = 0;
/** A fresh account id per call, so cases never see each other's state even on a shared server. */
export function uniqueAccount(prefix = 'acct'): string {
  counter++;
  return `${prefix}-${process.pid}-${counter}`;
}

/** Wraps `store` so every grant/hold/settle is recorded in the harness. */
export function track(store: Store): Harness {
  const h: Harness = { store, accounts: new Set(), holds: new Map() };
  h.store = {
    ...store,
    grant: (acct, amount, idem, note, ts) => {
      h.accounts.add(acct);
      return store.grant(acct, amount, idem, note, ts);
    },
    hold: async (acct, requestId, amount, expiresAt, budget) => {
      h.accounts.add(acct);
      const r = await store.hold(acct, requestId, amount, expiresAt, budget);
      if (r.ok) {
        const m = h.holds.get(acct) ?? new Map<string, number>();
        if (!m.has(requestId)) m.set(requestId, amount);
        h.holds.set(acct, m);
      }
      return r;
    },
    settle: (i) => {
      h.accounts.add(i.account);
      return store.settle(i);
    },
  };
  return h;
}

/** A store whose getKeyByHash calls are counted (key lookups that reached the store) and can be held back. */
export interface CountingKeyReads {
  store: Store;
  reads: () => number;
  /** While set, every getKeyByHash holds its answer back until this resolves. */
  gate: { wait: Promise<void> | undefined };
}

/** Wraps `inner` (a fresh embedded store by default) so its getKeyByHash calls are counted and gated. */
export function countingKeyReads(inner: Store = createMemoryStore()): CountingKeyReads {
  let n = 0;
  const gate: CountingKeyReads['gate'] = { wait: undefined };
  const store: Store = {
    ...inner,
    async getKeyByHash(hash) {
      n++;
      const r = await inner.getKeyByHash(hash);
      if (gate.wait) await gate.wait;
      return r;
    },
  };
  return { store, reads: () => n, gate };
}

/** The whole ledger of an account, read in pages of 1000 through the `after` cursor. */
export async function allEntries(store: Store, acct: string): Promise<LedgerEntry[]> {
  const out: LedgerEntry[] = [];
  for (;;) {
    const page = await store.ledger(acct, out.at(-1)?.id, 1000);
    out.push(...page);
    if (page.length < 1000) return out;
  }
}

/** Orders two entry ids numerically (string order breaks at 9 → 10), packed debits' `<id>.<k>` too. */
export { compareIds } from '../../src/ledger/entries.ts';

/**
 * Checks SPEC §4's invariants for every account the case touched. A hold is open until the ledger
 * shows a `debit` or `hold_expired` entry for its request id.
 */
export async function checkInvariants(t: Test, h: Harness): Promise<void> {
  for (const acct of h.accounts) {
    const entries = await allEntries(h.store, acct);
    const state = await h.store.getAccount(acct);
    const sum = entries.reduce((s, e) => s + e.amount_micros, 0);
    t.equal(state.balance_micros, sum, `${acct}: balance = Σ ledger amount_micros`);
    const closed = new Set(entries.filter((e) => e.kind !== 'grant').map((e) => e.request_id));
    let open = 0;
    for (const [requestId, amount] of h.holds.get(acct) ?? []) if (!closed.has(requestId)) open += amount;
    t.equal(state.held_micros, open, `${acct}: held = Σ open holds`);
    t.ok(state.held_micros >= 0, `${acct}: held never negative`);
    const ordered = entries.every((e, i) => ENTRY_ID.test(e.id) && (i === 0 || compareIds(entries[i - 1]!.id, e.id) < 0));
    t.ok(ordered, `${acct}: ledger ids are <ms>-<seq> and strictly increasing`);
  }
}

/** Rejects if `p` has not settled within `ms`: turns a hang into a readable failure. */
export function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not finish within ${ms} ms`)), ms);
  });
  return Promise.race([p, timeout]).finally(() => clearTimeout(timer));
}

/**
 * The fields of a debit entry, in the order the Redis store writes them (`cached_tokens` follows when set);
 * ledger reads and exports keep that order, so tests compare whole key lists against it.
 */
export const DEBIT_FIELDS: readonly string[] = [
  'id',
  'kind',
  'amount_micros',
  'ts',
  'request_id',
  'key_id',
  'model',
  'prompt_tokens',
  'completion_tokens',
  'usage_source',
  'hold_micros',
];

/** An expiry no reaper run in these tests reaches. */
export const FAR = 9_000_000_000_000;

/** A key record of `account` with id `id` (a test key unless `extra` says otherwise), for createKey. */
export function keyRecordOf(account: string, id: string, extra: Partial<KeyRecord> = {}): KeyRecord {
  return {
    id,
    account,
    env: 'test',
    name: 'k',
    active: true,
    scopes: ['chat'],
    models: [],
    rate_limits: null,
    created_at: TS,
    last4: 'abcd',
    version: 1,
    ...extra,
  };
}

/** A settle of `requestId`'s hold taken with expiry FAR (unless `extra` says otherwise). */
export function settleOf(account: string, requestId: string, costMicros: number, extra: Partial<SettleInput> = {}): SettleInput {
  return {
    account,
    requestId,
    costMicros,
    keyId: 'key_1111111111111111',
    model: 'gpt-test',
    promptTokens: 12,
    completionTokens: 34,
    usageSource: 'upstream',
    ts: TS2,
    holdExpiresAtMs: FAR,
    ...extra,
  };
}
