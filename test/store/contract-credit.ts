// Contract cases for money (SPEC §4): grants, the ledger, holds, settle and the reaper.
import type { Test } from 'tap';
import { MAX_BALANCE_MICROS, type SettleInput } from '../../src/store/types.ts';
import { allEntries, ENTRY_ID, FAR, settleOf, TS, TS2, uniqueAccount, within, type Harness } from './harness.ts';

type Case = (name: string, fn: (t: Test, h: Harness) => Promise<void>) => void;

const settleInput = settleOf;

/** Registers the credit cases; `test` creates a fresh tracked store per case and checks invariants after. */
export function creditCases(test: Case): void {
  test('getAccount of a never-granted account is zeros', async (t, { store }) => {
    const acct = uniqueAccount();
    t.strictSame(await store.getAccount(acct), { id: acct, balance_micros: 0, held_micros: 0 });
  });

  test('grants credit, correct with negative amounts, and write grant entries oldest first', async (t, { store }) => {
    const acct = uniqueAccount();
    const g1 = await store.grant(acct, 1_000_000, undefined, 'welcome', TS);
    t.strictSame({ ...g1, entry_id: 'x' }, { account: acct, balance_micros: 1_000_000, held_micros: 0, entry_id: 'x', replayed: false });
    t.match(g1.entry_id, ENTRY_ID, 'entry id is <ms>-<seq>');
    const g2 = await store.grant(acct, -250_000, undefined, 'correction', TS2);
    t.equal(g2.balance_micros, 750_000, 'a negative grant is a correction');
    const g3 = await store.grant(acct, 5, undefined, undefined, TS2);
    t.equal(g3.balance_micros, 750_005);
    t.strictSame(await store.getAccount(acct), { id: acct, balance_micros: 750_005, held_micros: 0 });
    t.strictSame(await store.ledger(acct, undefined, 100), [
      { id: g1.entry_id, ts: TS, kind: 'grant', amount_micros: 1_000_000, note: 'welcome' },
      { id: g2.entry_id, ts: TS2, kind: 'grant', amount_micros: -250_000, note: 'correction' },
      { id: g3.entry_id, ts: TS2, kind: 'grant', amount_micros: 5 },
    ]);
  });

  test('a repeated idempotency key replays the first grant and credits once', async (t, { store }) => {
    const acct = uniqueAccount();
    const first = await store.grant(acct, 500, 'idem-1', 'first', TS);
    const again = await store.grant(acct, 500, 'idem-1', 'second', TS2);
    t.equal(first.replayed, false);
    t.strictSame(again, { account: acct, balance_micros: 500, held_micros: 0, entry_id: first.entry_id, replayed: true });
    const changed = await store.grant(acct, 999, 'idem-1', undefined, TS2);
    t.equal(changed.replayed, true, 'a replay with another amount credits nothing either');
    t.equal(changed.balance_micros, 500);
    const entries = await store.ledger(acct, undefined, 100);
    t.equal(entries.length, 1);
    t.equal(entries[0]?.note, 'first', 'the original entry is kept');
    const other = uniqueAccount();
    const elsewhere = await store.grant(other, 7, 'idem-1', undefined, TS);
    t.equal(elsewhere.replayed, false, 'idempotency keys are scoped to their account');
    t.equal(elsewhere.balance_micros, 7);
  });

  test('a grant past ±MAX_BALANCE_MICROS credits nothing, writes nothing and leaves its idempotency key unspent', async (t, { store }) => {
    const acct = uniqueAccount();
    await store.grant(acct, MAX_BALANCE_MICROS - 1, undefined, undefined, TS);
    const last = await store.grant(acct, 1, undefined, undefined, TS);
    t.equal(last.balance_micros, MAX_BALANCE_MICROS, 'the bound itself is reachable');
    const over = await store.grant(acct, 1, 'k', undefined, TS2);
    t.strictSame(over, {
      account: acct,
      balance_micros: MAX_BALANCE_MICROS,
      held_micros: 0,
      entry_id: '',
      replayed: false,
      outOfRange: true,
    });
    t.equal((await allEntries(store, acct)).length, 2);
    t.equal((await store.grant(acct, -1, 'k', undefined, TS2)).replayed, false, 'the refused key was not recorded');
    const neg = uniqueAccount();
    t.equal((await store.grant(neg, -MAX_BALANCE_MICROS, undefined, undefined, TS)).balance_micros, -MAX_BALANCE_MICROS);
    t.equal((await store.grant(neg, -1, undefined, undefined, TS)).outOfRange, true, 'the same bound below zero');
    t.equal((await store.getAccount(neg)).balance_micros, -MAX_BALANCE_MICROS);
  });

  test('50 concurrent grants with one idempotency key credit once', async (t, { store }) => {
    const acct = uniqueAccount();
    const results = await Promise.all(Array.from({ length: 50 }, () => store.grant(acct, 100, 'same-key', undefined, TS)));
    t.equal(results.filter((r) => !r.replayed).length, 1, 'exactly one grant is not a replay');
    t.equal(new Set(results.map((r) => r.entry_id)).size, 1, 'all report the same entry id');
    t.equal((await store.getAccount(acct)).balance_micros, 100);
    t.equal((await allEntries(store, acct)).length, 1);
  });

  test('50 concurrent grants with distinct idempotency keys are all credited', async (t, { store }) => {
    const acct = uniqueAccount();
    const results = await Promise.all(Array.from({ length: 50 }, (_, i) => store.grant(acct, 100, `key-${i}`, undefined, TS)));
    t.equal(results.filter((r) => r.replayed).length, 0);
    t.equal(new Set(results.map((r) => r.entry_id)).size, 50, '50 distinct entries');
    t.equal((await store.getAccount(acct)).balance_micros, 5000);
    t.equal((await allEntries(store, acct)).length, 50);
  });

  test('ledger paging: after is exclusive, limit is respected', async (t, { store }) => {
    const acct = uniqueAccount();
    const ids: string[] = [];
    for (let i = 1; i <= 5; i++) ids.push((await store.grant(acct, i, undefined, undefined, TS)).entry_id);
    const idsOf = async (after: string | undefined, limit: number) => (await store.ledger(acct, after, limit)).map((e) => e.id);
    t.strictSame(await idsOf(undefined, 2), ids.slice(0, 2));
    t.strictSame(await idsOf(ids[1], 2), ids.slice(2, 4), 'starts strictly after the cursor');
    t.strictSame(await idsOf(ids[3], 10), ids.slice(4));
    t.strictSame(await idsOf(ids[4], 10), [], 'nothing after the last entry');
    t.strictSame(await idsOf(undefined, 100), ids);
    t.strictSame(
      (await store.ledger(acct, ids[0], 1)).map((e) => e.amount_micros),
      [2],
    );
    t.strictSame(await store.ledger(uniqueAccount('nobody'), undefined, 10), []);
    t.strictSame(await store.ledger(uniqueAccount('nobody'), ids[0], 10), []);
  });

  test('holds: taken while balance − held ≥ amount, refused otherwise, idempotent per request id', async (t, { store }) => {
    const acct = uniqueAccount();
    await store.grant(acct, 1000, undefined, undefined, TS);
    t.strictSame(await store.hold(acct, 'req-1', 600, FAR), { ok: true, balance_micros: 1000, held_micros: 600 });
    t.strictSame(await store.hold(acct, 'req-2', 401, FAR), { ok: false, balance_micros: 1000, held_micros: 600 }, 'refused: 1 short');
    t.strictSame(await store.getAccount(acct), { id: acct, balance_micros: 1000, held_micros: 600 }, 'a refusal changes nothing');
    t.strictSame(await store.hold(acct, 'req-3', 400, FAR), { ok: true, balance_micros: 1000, held_micros: 1000 }, 'exactly the rest');
    t.strictSame(await store.hold(acct, 'req-1', 600, FAR), { ok: true, balance_micros: 1000, held_micros: 1000 }, 'same id holds once');
    t.equal((await store.hold(acct, 'req-4', 1, FAR)).ok, false, 'nothing left');
    t.equal((await store.hold(uniqueAccount('empty'), 'req-5', 1, FAR)).ok, false, 'no credit, no hold');
    t.equal((await allEntries(store, acct)).length, 1, 'holds write no ledger entries');
  });

  test('200 concurrent holds of 10 on a balance of 500: exactly 50 succeed', async (t, { store }) => {
    const acct = uniqueAccount();
    await store.grant(acct, 500, undefined, undefined, TS);
    const results = await Promise.all(Array.from({ length: 200 }, (_, i) => store.hold(acct, `req-${i}`, 10, FAR)));
    t.equal(results.filter((r) => r.ok).length, 50);
    t.strictSame(await store.getAccount(acct), { id: acct, balance_micros: 500, held_micros: 500 });
  });

  test('settle debits the cost, releases the hold and writes one debit entry; a second settle replays', async (t, { store }) => {
    const acct = uniqueAccount();
    await store.grant(acct, 1000, undefined, undefined, TS);
    await store.hold(acct, 'req-1', 300, FAR);
    const s = await store.settle(settleInput(acct, 'req-1', 120));
    t.strictSame({ ...s, entry_id: 'x' }, { entry_id: 'x', replayed: false, balance_micros: 880, held_micros: 0 });
    t.match(s.entry_id, ENTRY_ID);
    const last = (await allEntries(store, acct)).at(-1);
    t.strictSame(
      last,
      {
        id: s.entry_id,
        ts: TS2,
        kind: 'debit',
        amount_micros: -120,
        request_id: 'req-1',
        key_id: 'key_1111111111111111',
        model: 'gpt-test',
        prompt_tokens: 12,
        completion_tokens: 34,
        usage_source: 'upstream',
        hold_micros: 300,
      },
      'numbers come back as numbers',
    );
    const again = await store.settle(settleInput(acct, 'req-1', 999));
    t.strictSame(again, { entry_id: s.entry_id, replayed: true, balance_micros: 880, held_micros: 0 }, 'no second debit');
    t.equal((await allEntries(store, acct)).length, 2);
    t.strictSame(
      await store.hold(acct, 'req-1', 300, FAR),
      { ok: true, balance_micros: 880, held_micros: 0 },
      'a hold for a settled request takes nothing',
    );
  });

  // A settle applied by another process (the spool replayed by the next start or `tollgate spool replay`,
  // another pod) may size its hold buckets otherwise (another hold TTL): it looks in the bucket the hold
  // was taken in, which it carries (holdBucketDue), not in one its expiry names at its own size. Here the
  // holds are taken as a process with 10 s buckets would have (in the bucket due at ⌈E / 10 s⌉ · 10 s) and
  // settled by this store, whose buckets are 1 s.
  test('a settle looks in the hold bucket it carries, not in one of its own bucket size', async (t, { store }) => {
    const acct = uniqueAccount();
    await store.grant(acct, 10_000, undefined, undefined, TS);
    const expiry = FAR + 1234;
    const due = Math.ceil(expiry / 10_000) * 10_000;
    t.equal(store.holdBucketDue!(due), due, 'the store names a bucket by its due time');
    t.not(store.holdBucketDue!(expiry), due, 'at its own size the expiry names another bucket');
    const budget = { keyId: 'key_1111111111111111', period: 't', limitMicros: 100_000, expireAtMs: null };
    for (const id of ['alone', 'turn-1', 'turn-2']) t.ok((await store.hold(acct, id, 500, due)).ok);
    t.ok((await store.hold(acct, 'budgeted', 500, due, budget)).ok);
    const settle = (id: string, cost: number, extra: Partial<SettleInput> = {}) =>
      settleInput(acct, id, cost, { holdExpiresAtMs: expiry, holdBucketDue: due, holdMicros: 500, ...extra });
    const first = [
      await store.settle(settle('alone', 100)),
      // One turn: a batch (or a run) on Redis.
      ...(await Promise.all([store.settle(settle('turn-1', 200)), store.settle(settle('turn-2', 300))])),
      await store.settle(settle('budgeted', 400, { budget })),
    ];
    t.strictSame(
      first.map((r) => r.replayed),
      [false, false, false, false],
    );
    t.strictSame(await store.getAccount(acct), { id: acct, balance_micros: 10_000 - 1000, held_micros: 0 }, 'every hold released');
    t.strictSame(await store.keySpend(acct, budget.keyId, budget.period, Date.now()), { spent_micros: 400, held_micros: 0 });
    // The same settles again, as a spool replay sends them (it may have landed): replays, in one turn too.
    const again = await Promise.all(
      ['alone', 'turn-1', 'turn-2', 'budgeted'].map((id, i) =>
        store.settle(settle(id, 999, { mayHaveRun: true, ...(i === 3 && { budget }) })),
      ),
    );
    t.strictSame(
      again.map((r) => [r.replayed, r.entry_id]),
      first.map((r) => [true, r.entry_id]),
      'each replays with its first entry id',
    );
    const debits = (await allEntries(store, acct)).filter((e) => e.kind === 'debit');
    t.strictSame(
      debits.map((e) => [e.request_id, e.amount_micros, e.hold_micros]),
      [
        ['alone', -100, 500],
        ['turn-1', -200, 500],
        ['turn-2', -300, 500],
        ['budgeted', -400, 500],
      ],
      'one debit each, each releasing its hold',
    );
    t.strictSame(await store.getAccount(acct), { id: acct, balance_micros: 9000, held_micros: 0 });
  });

  test('settle with cost 0 still writes an entry', async (t, { store }) => {
    const acct = uniqueAccount();
    await store.grant(acct, 1000, undefined, undefined, TS);
    await store.hold(acct, 'req-0', 250, FAR);
    const s = await store.settle(settleInput(acct, 'req-0', 0, { usageSource: 'estimated', promptTokens: 0, completionTokens: 0 }));
    t.strictSame({ balance: s.balance_micros, held: s.held_micros }, { balance: 1000, held: 0 });
    const e = (await allEntries(store, acct)).at(-1);
    t.equal(e?.kind, 'debit');
    t.ok(Object.is(e?.amount_micros, 0), 'amount_micros is 0 (not -0)');
    t.equal(e?.usage_source, 'estimated');
    t.equal(e?.hold_micros, 250);
    t.equal(e?.prompt_tokens, 0);
    // A free model holds 0: that hold must settle and reap like any other.
    t.equal((await store.hold(acct, 'free-1', 0, FAR)).ok, true);
    t.equal((await store.settle(settleInput(acct, 'free-1', 0))).replayed, false);
    t.equal((await allEntries(store, acct)).at(-1)?.hold_micros, 0);
    t.equal((await store.hold(acct, 'free-2', 0, 1000)).ok, true);
    t.equal(await store.reapExpiredHolds(1000, TS2), 1, 'a zero hold is reaped');
    t.strictSame(await store.getAccount(acct), { id: acct, balance_micros: 1000, held_micros: 0 });
  });

  test('settle without a hold still debits, with hold_micros 0', async (t, { store }) => {
    const acct = uniqueAccount();
    await store.grant(acct, 1000, undefined, undefined, TS);
    await store.hold(acct, 'other', 100, FAR);
    const s = await store.settle(settleInput(acct, 'never-held', 70));
    t.strictSame({ balance: s.balance_micros, held: s.held_micros }, { balance: 930, held: 100 }, 'other holds untouched');
    const e = (await allEntries(store, acct)).at(-1);
    t.equal(e?.amount_micros, -70);
    t.equal(e?.hold_micros, 0);
  });

  test('an overrun (cost > hold) is debited in full; only then may the balance go negative', async (t, { store }) => {
    const acct = uniqueAccount();
    await store.grant(acct, 100, undefined, undefined, TS);
    t.equal((await store.hold(acct, 'req-1', 100, FAR)).ok, true);
    const s = await store.settle(settleInput(acct, 'req-1', 150));
    t.strictSame({ balance: s.balance_micros, held: s.held_micros }, { balance: -50, held: 0 });
    t.equal((await allEntries(store, acct)).at(-1)?.amount_micros, -150);
    t.equal((await store.hold(acct, 'req-2', 1, FAR)).ok, false, 'a negative balance backs no hold');
    t.equal((await store.hold(acct, 'req-3', 0, FAR)).ok, false, 'not even a zero hold');
  });

  test('reaper releases expired holds once, each with a hold_expired entry', async (t, { store }) => {
    const acct = uniqueAccount();
    const other = uniqueAccount();
    await store.grant(acct, 1000, undefined, undefined, TS);
    await store.grant(other, 1000, undefined, undefined, TS);
    await store.hold(acct, 'exp-1', 100, 1000);
    await store.hold(acct, 'exp-2', 200, 2000);
    await store.hold(acct, 'live-3', 300, 5000);
    await store.hold(other, 'exp-4', 50, 1500);
    t.equal(await store.reapExpiredHolds(2000, TS2), 3, 'expiresAt ≤ now is expired, across accounts');
    t.strictSame(await store.getAccount(acct), { id: acct, balance_micros: 1000, held_micros: 300 });
    t.strictSame(await store.getAccount(other), { id: other, balance_micros: 1000, held_micros: 0 });
    const expired = (await allEntries(store, acct)).filter((e) => e.kind === 'hold_expired');
    const withoutIds = expired.map(({ id: _id, ...rest }) => rest).sort((a, b) => (a.hold_micros ?? 0) - (b.hold_micros ?? 0));
    t.strictSame(withoutIds, [
      { ts: TS2, kind: 'hold_expired', amount_micros: 0, request_id: 'exp-1', hold_micros: 100 },
      { ts: TS2, kind: 'hold_expired', amount_micros: 0, request_id: 'exp-2', hold_micros: 200 },
    ]);
    t.equal(await store.reapExpiredHolds(2000, TS2), 0, 'a second run finds nothing');
    t.equal(await store.reapExpiredHolds(4999, TS2), 0, 'the live hold stays');
    t.equal((await allEntries(store, acct)).length, 3, 'no duplicate entries');

    const s = await store.settle(settleInput(acct, 'exp-1', 80, { holdExpiresAtMs: 1000 }));
    t.strictSame(
      { balance: s.balance_micros, held: s.held_micros },
      { balance: 920, held: 300 },
      'reaped then settled: held not released twice',
    );
    t.equal((await allEntries(store, acct)).at(-1)?.hold_micros, 0);
    t.equal(await store.reapExpiredHolds(5000, TS2), 1);
    t.strictSame(await store.getAccount(acct), { id: acct, balance_micros: 920, held_micros: 0 });
  });

  test('a repeated hold (same request, same expiry) holds once, and many not-yet-due holds do not stall the reaper', async (t, {
    store,
  }) => {
    const acct = uniqueAccount();
    await store.grant(acct, 1_000_000, undefined, undefined, TS);
    // 250 > one reaper batch (200 in the Redis store), and across several hold buckets (1 s each).
    for (let i = 0; i < 250; i++) {
      await store.hold(acct, `req-${i}`, 10, 7_001 + i * 10);
      t.equal((await store.hold(acct, `req-${i}`, 10, 7_001 + i * 10)).ok, true);
    }
    t.equal(await within(store.reapExpiredHolds(5_000, TS2), 5_000, 'reaper run'), 0, 'nothing has expired yet');
    t.equal((await store.getAccount(acct)).held_micros, 2500);
    t.equal(await within(store.reapExpiredHolds(8_000, TS2), 5_000, 'reaper run'), 100, 'the bucket due at 8 s: expiries 7001..7991');
    t.equal(await within(store.reapExpiredHolds(10_000, TS2), 5_000, 'reaper run'), 150);
    t.equal((await store.getAccount(acct)).held_micros, 0);
  });
}
