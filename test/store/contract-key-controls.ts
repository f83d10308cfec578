// Contract cases for key controls (SPEC §15, docs/keys.md): expiry and budget fields, delete, and the
// budget counter the hold and settle scripts charge atomically with the balance.
import type { Test } from 'tap';
import type { BudgetCharge, KeyRecord, SettleInput } from '../../src/store/types.ts';
import { TS, TS2, uniqueAccount, type Harness } from './harness.ts';

type Case = (name: string, fn: (t: Test, h: Harness) => Promise<void>) => void;

const FAR = 9_000_000_000_000;

export function keyRecord(id: string, account: string, extra: Partial<KeyRecord> = {}): KeyRecord {
  return {
    id,
    account,
    env: 'live',
    name: `name of ${id}`,
    active: true,
    scopes: ['chat'],
    models: [],
    rate_limits: null,
    created_at: TS,
    last4: 'wxyz',
    version: 1,
    ...extra,
  };
}

export function charge(keyId: string, limitMicros: number, extra: Partial<BudgetCharge> = {}): BudgetCharge {
  return { keyId, period: 'd2026-11-22', limitMicros, expireAtMs: FAR, ...extra };
}

export function settleInput(account: string, requestId: string, costMicros: number, extra: Partial<SettleInput> = {}): SettleInput {
  return {
    account,
    requestId,
    costMicros,
    keyId: 'key_BBBBBBBBBBBBBBB1',
    model: 'gpt-test',
    promptTokens: 1,
    completionTokens: 2,
    usageSource: 'upstream',
    ts: TS2,
    holdExpiresAtMs: FAR,
    ...extra,
  };
}

export function keyControlCases(test: Case): void {
  test('expires_at and budget are stored at creation, patched, cleared, and survive reads', async (t, { store }) => {
    const a = uniqueAccount();
    const budget = { limit_micros: 5_000_000, period: 'month' as const };
    const k = keyRecord('key_BBBBBBBBBBBBBBB2', a, { expires_at: '2026-12-01T00:00:00.000Z', budget });
    await store.createKey('hash-ctl-1', k);
    t.strictSame(await store.getKeyByHash('hash-ctl-1'), k);
    const p = await store.updateKey(k.id, { expires_at: '2027-01-01T00:00:00.000Z', budget: { limit_micros: 7, period: 'day' } });
    t.equal(p?.record.expires_at, '2027-01-01T00:00:00.000Z');
    t.strictSame(p?.record.budget, { limit_micros: 7, period: 'day' });
    t.equal(p?.record.version, 2);
    const c = await store.updateKey(k.id, { expires_at: null, budget: null });
    t.equal(c?.record.expires_at, null, 'cleared expiry');
    t.equal(c?.record.budget, null, 'cleared budget');
    t.strictSame((await store.getKeyByHash('hash-ctl-1'))?.budget, null);
    const n = await store.updateKey(k.id, { name: 'renamed' });
    t.equal(n?.record.expires_at, null, 'a later patch keeps the cleared expiry');
  });

  test('deleteKey removes the record from every read; unknown ids are null', async (t, { store }) => {
    const a = uniqueAccount();
    const k1 = keyRecord('key_BBBBBBBBBBBBBBB3', a);
    const k2 = keyRecord('key_BBBBBBBBBBBBBBB4', a);
    await store.createKey('hash-ctl-3', k1);
    await store.createKey('hash-ctl-4', k2);
    const gone = await store.deleteKey(k1.id);
    t.strictSame(gone, { record: k1, hash: 'hash-ctl-3' });
    t.equal(await store.getKeyByHash('hash-ctl-3'), null);
    t.equal(await store.getKey(k1.id), null);
    t.strictSame(
      (await store.listKeys(a)).map((r) => r.id),
      [k2.id],
    );
    t.equal(await store.deleteKey(k1.id), null, 'a second delete finds nothing');
    t.equal(await store.updateKey(k1.id, { active: true }), null, 'a deleted key cannot be patched back');
    t.equal(await store.getKeyByHash('hash-ctl-3'), null);
  });

  test('a key rolls once: of concurrent successors one is stored, the rest name it; a delete frees the claim', async (t, { store }) => {
    const a = uniqueAccount();
    const old = keyRecord('key_RRRRRRRRRRRRRRRA', a);
    await store.createKey('hash-roll-old', old);
    const next = (n: number) => keyRecord(`key_RRRRRRRRRRRRRRR${n}`, a, { rolled_from: old.id });
    const caps = { maxPerAccount: 10, maxMadePerDay: 10 };
    // Three rolls of one key at once (three admin requests, any instances): one new key, not three.
    const made = await Promise.all([1, 2, 3].map((n) => store.createKey(`hash-roll-${n}`, next(n), caps)));
    const won = made.flatMap((m, i) => (m === 'created' ? [next(i + 1).id] : []));
    t.equal(won.length, 1, `one successor stored: ${JSON.stringify(made)}`);
    t.strictSame(
      made.filter((m) => m !== 'created'),
      [{ rolledTo: won[0] }, { rolledTo: won[0] }],
      'the others are refused, naming it',
    );
    t.strictSame((await store.listKeys(a)).map((r) => r.id).sort(), [old.id, won[0]].sort(), 'the refused ones left no key');
    const winner = made.findIndex((m) => m === 'created') + 1;
    t.equal((await store.getKeyByHash(`hash-roll-${winner}`))?.rolled_from, old.id, 'the successor knows its old key');
    for (const n of [1, 2, 3]) if (n !== winner) t.equal(await store.getKeyByHash(`hash-roll-${n}`), null);
    t.strictSame(await store.createKey('hash-roll-4', next(4), caps), { rolledTo: won[0] }, 'a later roll too');
    // A refused roll counted nothing: with room for exactly one more key, a create still fits.
    t.equal(await store.createKey('hash-roll-plain', keyRecord('key_RRRRRRRRRRRRRRRP', a), { maxPerAccount: 3 }), 'created');

    // Its successor deleted, the old key may roll again; the old key deleted, its claim goes with it.
    await store.deleteKey(won[0]!);
    t.equal(await store.createKey('hash-roll-5', next(5), caps), 'created', 'the successor deleted: rolls again');
    t.strictSame(await store.createKey('hash-roll-6', next(6), caps), { rolledTo: next(5).id });
    await store.deleteKey(old.id);
    await store.deleteKey(next(5).id);
    t.equal(await store.createKey('hash-roll-7', next(7), caps), 'created', 'no claim left behind by the deletes');
  });

  test('a budgeted hold counts settled spend plus open holds against the limit', async (t, { store }) => {
    const a = uniqueAccount();
    const key = 'key_BBBBBBBBBBBBBBB5';
    await store.grant(a, 10_000, undefined, undefined, TS);
    const b = charge(key, 1_000);
    t.equal((await store.hold(a, 'r1', 600, FAR, b)).ok, true);
    const refused = await store.hold(a, 'r2', 500, FAR, b);
    t.equal(refused.ok, false, 'open hold of 600 + 500 > 1000');
    t.strictSame(refused.budget, { used_micros: 600 });
    t.equal(refused.held_micros, 600, 'nothing more held on the account');
    t.equal((await store.hold(a, 'r1', 600, FAR, b)).ok, true, 'a replay of a taken hold still answers ok');
    t.equal((await store.hold(a, 'r3', 400, FAR, b)).ok, true, 'exactly up to the limit');
    t.strictSame(await store.keySpend(a, key, b.period, Date.now()), { spent_micros: 0, held_micros: 1_000 });
    await store.settle(settleInput(a, 'r1', 250, { budget: b }));
    t.strictSame(
      await store.keySpend(a, key, b.period, Date.now()),
      { spent_micros: 250, held_micros: 400 },
      'actual cost spent, hold released',
    );
    t.equal((await store.hold(a, 'r4', 351, FAR, b)).ok, false, '250 + 400 + 351 > 1000');
    t.equal((await store.hold(a, 'r4', 350, FAR, b)).ok, true, '250 + 400 + 350 = 1000');
    await store.settle(settleInput(a, 'r3', 400, { budget: b }));
    await store.settle(settleInput(a, 'r4', 0, { budget: b }));
    const replay = await store.settle(settleInput(a, 'r3', 400, { budget: b }));
    t.equal(replay.replayed, true);
    t.strictSame(
      await store.keySpend(a, key, b.period, Date.now()),
      { spent_micros: 650, held_micros: 0 },
      'a replayed settle charges nothing',
    );
    t.equal((await store.getAccount(a)).balance_micros, 10_000 - 650, 'the balance moved by the same debits');
  });

  test('cached tokens (SPEC §4): the entry carries cached_tokens on every settle variant; none without', async (t, { store }) => {
    const a = uniqueAccount();
    const key = 'key_BBBBBBBBBBBBBBB1';
    await store.grant(a, 10_000, undefined, undefined, TS);
    const b = charge(key, 5_000);
    await store.hold(a, 'plain', 100, FAR);
    await store.hold(a, 'budgeted', 100, FAR, b);
    // 'no-hold' and 'no-hold-budget' find no field: the store runs the whole script (5 or 6 keys).
    await store.settle(settleInput(a, 'plain', 40, { promptTokens: 10, cachedTokens: 7 }));
    await store.settle(settleInput(a, 'budgeted', 50, { promptTokens: 10, cachedTokens: 8, budget: b }));
    await store.settle(settleInput(a, 'no-hold', 60, { promptTokens: 10, cachedTokens: 9 }));
    await store.settle(settleInput(a, 'no-hold-budget', 70, { promptTokens: 10, cachedTokens: 10, budget: b }));
    await store.settle(settleInput(a, 'uncached', 80, { promptTokens: 10, cachedTokens: 0 }));
    const page = await store.ledger(a, undefined, 100);
    const debits = new Map(page.filter((e) => e.kind === 'debit').map((e) => [e.request_id, e]));
    t.equal(debits.get('plain')?.cached_tokens, 7, 'held, no budget');
    t.equal(debits.get('plain')?.hold_micros, 100, 'the hold was still found and released');
    t.equal(debits.get('budgeted')?.cached_tokens, 8, 'held, budget');
    t.equal(debits.get('no-hold')?.cached_tokens, 9, 'no hold, no budget');
    t.equal(debits.get('no-hold-budget')?.cached_tokens, 10, 'no hold, budget');
    t.notOk('cached_tokens' in debits.get('uncached')!, 'no cached tokens: no field');
    t.strictSame(
      await store.keySpend(a, key, b.period, Date.now()),
      { spent_micros: 120, held_micros: 0 },
      'the budget counter as without cached tokens',
    );
    t.strictSame(await store.getAccount(a), { id: a, balance_micros: 10_000 - 300, held_micros: 0 });
  });

  test('budget counters are per key and per period; keys without a budget touch none', async (t, { store }) => {
    const a = uniqueAccount();
    await store.grant(a, 10_000, undefined, undefined, TS);
    const k1 = charge('key_BBBBBBBBBBBBBBB6', 100);
    const k2 = charge('key_BBBBBBBBBBBBBBB7', 100);
    const nextDay = charge('key_BBBBBBBBBBBBBBB6', 100, { period: 'd2026-11-23' });
    t.equal((await store.hold(a, 'q1', 100, FAR, k1)).ok, true);
    t.equal((await store.hold(a, 'q2', 100, FAR, k2)).ok, true, "another key's budget is its own");
    t.equal((await store.hold(a, 'q3', 100, FAR, nextDay)).ok, true, 'another period starts at zero');
    t.equal((await store.hold(a, 'q4', 5_000, FAR)).ok, true, 'no budget: only the balance counts');
    await store.settle(settleInput(a, 'q4', 5_000));
    t.strictSame(await store.keySpend(a, 'key_BBBBBBBBBBBBBBB6', k1.period, Date.now()), { spent_micros: 0, held_micros: 100 });
    for (const [id, c] of [
      ['q1', k1],
      ['q2', k2],
      ['q3', nextDay],
    ] as const)
      await store.settle(settleInput(a, id, 100, { budget: c }));
  });

  test('the balance still refuses first; a budget of 0 refuses every hold but a free one', async (t, { store }) => {
    const a = uniqueAccount();
    await store.grant(a, 100, undefined, undefined, TS);
    const r = await store.hold(a, 'p1', 200, FAR, charge('key_BBBBBBBBBBBBBBB8', 1_000));
    t.equal(r.ok, false);
    t.equal(r.budget, undefined, 'refused by the balance, not the budget');
    const zero = charge('key_BBBBBBBBBBBBBBB8', 0, { period: 't', expireAtMs: null });
    t.equal((await store.hold(a, 'p2', 1, FAR, zero)).ok, false);
    t.equal((await store.hold(a, 'p3', 0, FAR, zero)).ok, true);
    await store.settle(settleInput(a, 'p3', 0, { budget: zero }));
  });

  test('holds of a budget whose bucket is due no longer count (a dead process does not eat the budget)', async (t, { store }) => {
    const a = uniqueAccount();
    await store.grant(a, 10_000, undefined, undefined, TS);
    const b = charge('key_BBBBBBBBBBBBBBB9', 1_000);
    const soon = Date.now() + 1_500;
    t.equal((await store.hold(a, 'd1', 1_000, soon, b)).ok, true);
    t.equal((await store.hold(a, 'd2', 1, FAR, b)).ok, false, 'the open hold fills the budget');
    await new Promise((r) => setTimeout(r, 2_600));
    await store.reapExpiredHolds(Date.now(), TS2);
    t.equal((await store.hold(a, 'd2', 1_000, FAR, b)).ok, true, 'after its expiry the reaped hold is not counted');
    t.strictSame(await store.keySpend(a, b.keyId, b.period, Date.now()), { spent_micros: 0, held_micros: 1_000 });
    await store.settle(settleInput(a, 'd2', 10, { budget: b }));
  });

  test('deleting a key drops its lifetime budget counter', async (t, { store }) => {
    const a = uniqueAccount();
    await store.grant(a, 10_000, undefined, undefined, TS);
    const k = keyRecord('key_BBBBBBBBBBBBBBBC', a, { budget: { limit_micros: 1_000, period: 'total' } });
    await store.createKey('hash-ctl-c', k);
    const b = charge(k.id, 1_000, { period: 't', expireAtMs: null });
    t.equal((await store.hold(a, 'f1', 100, FAR, b)).ok, true);
    await store.settle(settleInput(a, 'f1', 100, { budget: b }));
    t.equal((await store.keySpend(a, k.id, 't', Date.now())).spent_micros, 100);
    await store.deleteKey(k.id);
    t.equal((await store.keySpend(a, k.id, 't', Date.now())).spent_micros, 0);
  });

  test('a counter past its expiry is gone', async (t, { store }) => {
    const a = uniqueAccount();
    await store.grant(a, 10_000, undefined, undefined, TS);
    // 1.5 s: the hold, the settle and the first read land before it even on a loaded machine (a settle past
    // it would find the counter gone at once); the second read comes after it.
    const expireAtMs = Date.now() + 1_500;
    const b = charge('key_BBBBBBBBBBBBBBBA', 1_000, { expireAtMs });
    t.equal((await store.hold(a, 'e1', 100, FAR, b)).ok, true);
    await store.settle(settleInput(a, 'e1', 100, { budget: b }));
    t.equal((await store.keySpend(a, b.keyId, b.period, Date.now())).spent_micros, 100);
    await new Promise((r) => setTimeout(r, Math.max(0, expireAtMs - Date.now()) + 200));
    t.strictSame(await store.keySpend(a, b.keyId, b.period, Date.now()), { spent_micros: 0, held_micros: 0 });
  });
}
