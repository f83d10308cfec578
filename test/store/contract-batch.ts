// Contract cases for group commit (docs/ledger.md "Group commit"): holds and settles issued in the same
// event-loop turn. On Redis they reach the server as one script call per slot (hold-many.lua,
// settle-many.lua); every guarantee still holds per request inside the batch: each is checked in the
// order it was issued, one refused never fails another, a replay in the batch debits nothing. The embedded
// store has no batches and must answer the same.
import type { Test } from 'tap';
import type { BudgetCharge } from '../../src/store/types.ts';
import { allEntries, FAR, settleOf, TS, uniqueAccount, type Harness } from './harness.ts';

type Case = (name: string, fn: (t: Test, h: Harness) => Promise<void>) => void;

const settleInput = settleOf;

const charge = (keyId: string, limitMicros: number): BudgetCharge => ({ keyId, period: 'd2026-11-22', limitMicros, expireAtMs: FAR });

export function batchCases(test: Case): void {
  test('holds of one turn, mixed accounts: each checked in order, a refused one fails no other', async (t, { store }) => {
    const [a, b, c] = [uniqueAccount(), uniqueAccount(), uniqueAccount()];
    await store.grant(a, 100, undefined, undefined, TS);
    await store.grant(c, 50, undefined, undefined, TS);
    // No await between them: one turn, so on Redis one batch (a single node) or one per slot (Cluster).
    const results = await Promise.all([
      store.hold(a, 'a1', 40, FAR),
      store.hold(a, 'a2', 40, FAR),
      store.hold(b, 'b1', 10, FAR), // b has no credit
      store.hold(a, 'a3', 40, FAR), // 80 held of 100: refused
      store.hold(c, 'c1', 50, FAR),
      store.hold(a, 'a4', 20, FAR), // exactly what is left
      store.hold(a, 'a1', 40, FAR), // a replay of the first, in the same batch
      store.hold(c, 'c2', 1, FAR), // c is fully held now
    ]);
    t.strictSame(
      results.map((r) => [r.ok, r.balance_micros, r.held_micros]),
      [
        [true, 100, 40],
        [true, 100, 80],
        [false, 0, 0],
        [false, 100, 80],
        [true, 50, 50],
        [true, 100, 100],
        [true, 100, 100],
        [false, 50, 50],
      ],
      'every hold answers as if it had been alone, after the ones before it',
    );
    t.strictSame(await store.getAccount(a), { id: a, balance_micros: 100, held_micros: 100 }, 'the replay held nothing more');
    t.strictSame(await store.getAccount(c), { id: c, balance_micros: 50, held_micros: 50 });
  });

  test('settles of one turn: mixed accounts, a replay in the same batch, an overrun, one without a hold', async (t, { store }) => {
    const [a, c] = [uniqueAccount(), uniqueAccount()];
    await store.grant(a, 1_000, undefined, undefined, TS);
    await store.grant(c, 100, undefined, undefined, TS);
    await Promise.all([store.hold(a, 'a1', 100, FAR), store.hold(a, 'a2', 100, FAR), store.hold(c, 'c1', 50, FAR)]);
    const [s1, s1again, s2, sc, none, s1third] = await Promise.all([
      store.settle(settleInput(a, 'a1', 30)),
      store.settle(settleInput(a, 'a1', 30)), // the same settle twice in one batch: debited once
      store.settle(settleInput(a, 'a2', 100)),
      store.settle(settleInput(c, 'c1', 80)), // more than its hold: debited in full
      store.settle(settleInput(a, 'no-hold', 7)), // no field in its bucket: settled alone (settle.lua)
      store.settle(settleInput(a, 'a1', 30)),
    ]);
    t.equal(s1.replayed, false);
    t.strictSame([s1again.replayed, s1again.entry_id], [true, s1.entry_id], 'the replay in the batch returns the first entry');
    t.strictSame([s1third.replayed, s1third.entry_id], [true, s1.entry_id]);
    t.strictSame([s1.balance_micros, s1.held_micros], [970, 100], 'a1 settled: its hold released, 30 debited');
    t.strictSame([s2.balance_micros, s2.held_micros], [870, 0], 'a2 after a1 in the same batch');
    t.strictSame([sc.balance_micros, sc.held_micros], [20, 0], 'c: the overrun debited in full');
    t.equal(none.replayed, false);
    t.equal((await store.getAccount(a)).balance_micros, 863, 'a: 1000 − 30 − 100 − 7');
    const debits = (await allEntries(store, a)).filter((e) => e.kind === 'debit');
    t.strictSame(
      debits.map((e) => [e.request_id, e.amount_micros, e.hold_micros]).sort(),
      [
        ['a1', -30, 100],
        ['a2', -100, 100],
        ['no-hold', -7, 0],
      ],
      'one entry per request, each with its own hold',
    );
    t.equal(new Set(debits.map((e) => e.id)).size, 3, 'distinct entry ids');
  });

  test('budgeted and unbudgeted holds of one key in one turn: the budget refuses only the one past it', async (t, { store }) => {
    const a = uniqueAccount();
    const key = 'key_BBBBBBBBBBBBBBB7';
    const b = charge(key, 1_000);
    await store.grant(a, 10_000, undefined, undefined, TS);
    const [h1, plain, h2, h3] = await Promise.all([
      store.hold(a, 'r1', 600, FAR, b),
      store.hold(a, 'plain', 5_000, FAR),
      store.hold(a, 'r2', 500, FAR, b), // 600 + 500 > 1000
      store.hold(a, 'r3', 400, FAR, b), // 600 + 400 = 1000
    ]);
    t.strictSame([h1.ok, plain.ok, h2.ok, h3.ok], [true, true, false, true]);
    t.strictSame(h2.budget, { used_micros: 600 }, 'refused by the budget, with what it had used');
    t.equal(h3.held_micros, 6_000, 'the account holds 600 + 5000 + 400');
    const settled = await Promise.all([
      store.settle(settleInput(a, 'r1', 250, { budget: b })),
      store.settle(settleInput(a, 'plain', 10)),
      store.settle(settleInput(a, 'r3', 400, { budget: b, cachedTokens: 5 })),
      store.settle(settleInput(a, 'r1', 250, { budget: b })),
    ]);
    t.equal(settled[3]!.replayed, true);
    t.strictSame(await store.keySpend(a, key, b.period, Date.now()), { spent_micros: 650, held_micros: 0 }, 'spent once each');
    const r3 = (await allEntries(store, a)).find((e) => e.request_id === 'r3');
    t.equal(r3?.cached_tokens, 5, 'cached tokens carried through the batch');
  });

  test('200 holds of 10 in one turn on a balance of 500: exactly 50 taken, then all settled in one turn', async (t, { store }) => {
    const a = uniqueAccount();
    await store.grant(a, 500, undefined, undefined, TS);
    const ids = Array.from({ length: 200 }, (_, i) => `r${i}`);
    const held = await Promise.all(ids.map((id) => store.hold(a, id, 10, FAR)));
    t.equal(held.filter((r) => r.ok).length, 50);
    t.ok(held.slice(0, 50).every((r) => r.ok) && held.slice(50).every((r) => !r.ok), 'the first 50 issued are the ones taken');
    const settled = await Promise.all(ids.slice(0, 50).map((id) => store.settle(settleInput(a, id, 3))));
    t.equal(new Set(settled.map((s) => s.entry_id)).size, 50);
    t.strictSame(await store.getAccount(a), { id: a, balance_micros: 350, held_micros: 0 });
  });
}
