// Contract cases for the hold/settle layout (docs/ledger.md): the request's own hold record as its
// idempotency, reaped holds remembered, and a seeded random interleaving of everything, checked after
// every step (SPEC §4: balance = Σ grants − Σ debits, no double debit, held = Σ open holds).
import type { Test } from 'tap';
import type { LedgerEntry, SettleInput, Store } from '../../src/store/types.ts';
import { allEntries, checkInvariants, TS, TS2, uniqueAccount, type Harness } from './harness.ts';

type Case = (name: string, fn: (t: Test, h: Harness) => Promise<void>) => void;

function settleOf(
  account: string,
  requestId: string,
  costMicros: number,
  holdExpiresAtMs: number,
  extra: Partial<SettleInput> = {},
): SettleInput {
  return {
    account,
    requestId,
    costMicros,
    keyId: 'key_2222222222222222',
    model: 'gpt-test',
    promptTokens: 3,
    completionTokens: 4,
    usageSource: 'upstream',
    ts: TS2,
    holdExpiresAtMs,
    ...extra,
  };
}

const kinds = (entries: LedgerEntry[], requestId: string) => entries.filter((e) => e.request_id === requestId).map((e) => e.kind);

/** Deterministic PRNG (mulberry32): a failing seed replays exactly. */
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let x = a;
    x = Math.imul(x ^ (x >>> 15), x | 1);
    x ^= x + Math.imul(x ^ (x >>> 7), x | 61);
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296;
  };
}

export function ledgerCases(test: Case): void {
  test('settle and reaper on a due hold, in either order or at once: one debit, the hold released once', async (t, { store }) => {
    const acct = uniqueAccount();
    await store.grant(acct, 100_000, undefined, undefined, TS);
    const orders = ['settle first', 'reap first', 'together, settle sent first', 'together, reap sent first'] as const;
    for (const [n, order] of orders.entries()) {
      const id = `race-${n}`;
      const expiry = 1000 * (n + 1);
      t.equal((await store.hold(acct, id, 300, expiry)).ok, true);
      const settle = () => store.settle(settleOf(acct, id, 120, expiry));
      const reap = () => store.reapExpiredHolds(expiry, TS2);
      if (order === 'settle first') await settle().then(reap);
      else if (order === 'reap first') await reap().then(settle);
      else if (order === 'together, settle sent first') await Promise.all([settle(), reap()]);
      else await Promise.all([reap(), settle()]);
      const entries = await allEntries(store, acct);
      const mine = entries.filter((e) => e.request_id === id);
      const debits = mine.filter((e) => e.kind === 'debit');
      t.equal(debits.length, 1, `${order}: one debit`);
      t.equal(debits[0]?.amount_micros, -120, `${order}: at the full cost`);
      const expired = mine.filter((e) => e.kind === 'hold_expired');
      if (expired.length === 1) t.equal(debits[0]?.hold_micros, 0, `${order}: the reaper released the hold, the settle released nothing`);
      else t.strictSame([expired.length, debits[0]?.hold_micros], [0, 300], `${order}: the settle released the hold, nothing left to reap`);
      t.equal((await store.getAccount(acct)).held_micros, 0, `${order}: nothing held`);
    }
    t.equal((await store.getAccount(acct)).balance_micros, 100_000 - 4 * 120);
  });

  test('a replayed hold after its settle takes nothing, before and after the reaper emptied its bucket', async (t, { store }) => {
    const acct = uniqueAccount();
    await store.grant(acct, 1000, undefined, undefined, TS);
    t.equal((await store.hold(acct, 'r1', 400, 3000)).ok, true);
    await store.settle(settleOf(acct, 'r1', 100, 3000));
    t.strictSame(
      await store.hold(acct, 'r1', 400, 3000),
      { ok: true, balance_micros: 900, held_micros: 0 },
      'the settled record answers: nothing held',
    );
    t.equal(await store.reapExpiredHolds(3000, TS2), 0, 'a settled request is not reaped');
    t.strictSame(
      await store.hold(acct, 'r1', 400, 3000),
      { ok: false, balance_micros: 900, held_micros: 0 },
      'after the reaper, the record is gone and the replay is refused as stale',
    );
    t.equal((await store.hold(acct, 'r2', 400, 2500)).ok, false, 'any hold into an emptied bucket is refused');
    t.equal((await store.hold(acct, 'r3', 400, 4000)).ok, true, 'a hold into a later bucket is taken');
    t.equal(await store.reapExpiredHolds(4000, TS2), 1);
    t.strictSame(kinds(await allEntries(store, acct), 'r1'), ['debit'], 'r1: one debit, no hold_expired');
  });

  test('a settle retried after its hold was reaped debits exactly once', async (t, { store }) => {
    const acct = uniqueAccount();
    await store.grant(acct, 1000, undefined, undefined, TS);
    await store.hold(acct, 'late', 300, 2000);
    t.equal(await store.reapExpiredHolds(2000, TS2), 1, 'the hold expired before its settle landed');
    t.equal((await store.getAccount(acct)).held_micros, 0);
    // The first attempt timed out in an outage, so the retry says an earlier attempt may have run.
    const s1 = await store.settle(settleOf(acct, 'late', 250, 2000, { mayHaveRun: true }));
    t.strictSame(
      { replayed: s1.replayed, balance: s1.balance_micros, held: s1.held_micros },
      { replayed: false, balance: 750, held: 0 },
      'debited',
    );
    const s2 = await store.settle(settleOf(acct, 'late', 250, 2000, { mayHaveRun: true }));
    t.strictSame({ ...s2 }, { entry_id: s1.entry_id, replayed: true, balance_micros: 750, held_micros: 0 }, 'its own retry replays');
    t.equal(await store.reapExpiredHolds(5000, TS2), 0, 'the reaper does not release it again');
    const entries = await allEntries(store, acct);
    t.strictSame(kinds(entries, 'late'), ['hold_expired', 'debit']);
    t.equal(entries.at(-1)?.hold_micros, 0, 'the debit released nothing: the reaper had');
  });

  test('a settle retried after its first attempt landed and its bucket was emptied debits nothing more', async (t, { store }) => {
    const acct = uniqueAccount();
    await store.grant(acct, 1000, undefined, undefined, TS);
    await store.hold(acct, 'done', 300, 2000);
    const first = await store.settle(settleOf(acct, 'done', 100, 2000));
    const early = await store.settle(settleOf(acct, 'done', 100, 2000, { mayHaveRun: true }));
    t.strictSame([early.replayed, early.entry_id], [true, first.entry_id], 'before the reaper: the settled record replays the entry');
    await store.reapExpiredHolds(2000, TS2);
    const late = await store.settle(settleOf(acct, 'done', 100, 2000, { mayHaveRun: true }));
    t.strictSame(
      { ...late },
      { entry_id: '', replayed: true, balance_micros: 900, held_micros: 0 },
      'after it: no record, no second debit',
    );
    t.strictSame(kinds(await allEntries(store, acct), 'done'), ['debit']);
  });

  test('a settle whose hold never reached the store debits once, and stops that hold arriving late', async (t, { store }) => {
    const acct = uniqueAccount();
    await store.grant(acct, 1000, undefined, undefined, TS);
    // The route settles at 0 when its hold failed (it may still run later): that settle comes first here.
    const s = await store.settle(settleOf(acct, 'lost', 0, 6000));
    t.equal(s.replayed, false);
    t.strictSame(
      await store.hold(acct, 'lost', 500, 6000),
      { ok: true, balance_micros: 1000, held_micros: 0 },
      'the late hold takes nothing',
    );
    t.equal((await store.settle(settleOf(acct, 'lost', 0, 6000, { mayHaveRun: true }))).replayed, true);
    t.equal(await store.reapExpiredHolds(6000, TS2), 0);
    t.strictSame(kinds(await allEntries(store, acct), 'lost'), ['debit']);
    // The same after the reaper emptied the bucket: debited, and nothing recorded where no reaper returns.
    const after = await store.settle(settleOf(acct, 'lost-2', 0, 5500));
    t.equal(after.replayed, false, 'debited');
    const retry = await store.settle(settleOf(acct, 'lost-2', 0, 5500, { mayHaveRun: true }));
    t.strictSame([retry.replayed, retry.entry_id], [true, ''], 'its retry finds no record: no second debit');
    t.equal((await store.hold(acct, 'lost-2', 500, 5500)).ok, false, 'its late hold is refused as stale');
    t.strictSame(kinds(await allEntries(store, acct), 'lost-2'), ['debit']);
  });

  test('random interleavings of grants, holds, replays, settles, retries and reaper runs keep the ledger exact', async (t, h) => {
    for (const seed of [1, 2, 3]) await randomRun(t, h, seed, 120);
  });
}

interface Req {
  id: string;
  expiry: number;
  amount: number;
  cost: number;
  settles: number;
}

/** One seeded run on a fresh account; checks the invariants after every step. */
async function randomRun(t: Test, h: Harness, seed: number, steps: number): Promise<void> {
  const rnd = prng(seed);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)]!;
  const acct = uniqueAccount(`rand${seed}`);
  const store: Store = h.store;
  const reqs: Req[] = [];
  let clock = 10_000;
  let n = 0;
  await store.grant(acct, 5_000, undefined, undefined, TS);
  const op = async (): Promise<string> => {
    const r = rnd();
    if (r < 0.08) {
      const amount = Math.floor(rnd() * 3000) - 500;
      await store.grant(acct, amount, undefined, undefined, TS);
      return `grant ${amount}`;
    }
    if (r < 0.38 || reqs.length === 0) {
      const q: Req = { id: `q${n++}`, expiry: clock + 1 + Math.floor(rnd() * 4000), amount: Math.floor(rnd() * 900), cost: 0, settles: 0 };
      q.cost = Math.floor(rnd() * (q.amount + 200));
      reqs.push(q);
      await store.hold(acct, q.id, q.amount, q.expiry);
      return `hold ${q.id}`;
    }
    const q = pick(reqs);
    if (r < 0.5) {
      await store.hold(acct, q.id, q.amount, q.expiry);
      return `replayed hold ${q.id}`;
    }
    if (r < 0.85) {
      // A later attempt says an earlier one may have run (counted when it is made, as Credit does: only
      // one first attempt per request): in this model every earlier attempt did.
      const attempt = ++q.settles;
      await store.settle(settleOf(acct, q.id, q.cost, q.expiry, { mayHaveRun: attempt > 1 }));
      return `settle ${q.id} #${attempt}`;
    }
    clock += Math.floor(rnd() * 2500);
    await store.reapExpiredHolds(clock, TS2);
    return `reap at ${clock}`;
  };
  for (let step = 0; step < steps; step++) {
    const batch = rnd() < 0.3 ? 2 + Math.floor(rnd() * 3) : 1;
    const done = await Promise.all(Array.from({ length: batch }, op));
    const entries = await allEntries(store, acct);
    const debits = new Map<string, number>();
    for (const e of entries) if (e.kind === 'debit') debits.set(e.request_id!, (debits.get(e.request_id!) ?? 0) + 1);
    const twice = [...debits].filter(([, c]) => c > 1);
    const unbilled = reqs.filter((q) => q.settles > 0 && !debits.has(q.id));
    const state = await store.getAccount(acct);
    const sum = entries.reduce((s, e) => s + e.amount_micros, 0);
    const closed = new Set(entries.filter((e) => e.kind !== 'grant').map((e) => e.request_id));
    let open = 0;
    for (const [id, amount] of h.holds.get(acct) ?? []) if (!closed.has(id)) open += amount;
    if (twice.length > 0 || unbilled.length > 0 || sum !== state.balance_micros || state.held_micros !== open) {
      t.fail(`seed ${seed}, step ${step} (${done.join(', ')})`, { twice, unbilled: unbilled.map((q) => q.id), sum, open, state });
      return;
    }
  }
  clock += 10_000;
  await store.reapExpiredHolds(clock, TS2);
  t.equal((await store.getAccount(acct)).held_micros, 0, `seed ${seed}: after the last reaper run nothing is held`);
  const entries = await allEntries(store, acct);
  const closed = new Set(entries.filter((e) => e.kind !== 'grant').map((e) => e.request_id));
  t.strictSame(
    [...(h.holds.get(acct)?.keys() ?? [])].filter((id) => !closed.has(id)),
    [],
    `seed ${seed}: every hold taken was settled or reaped`,
  );
  await checkInvariants(t, h);
  t.pass(`seed ${seed}: ${steps} steps, ${reqs.length} requests, ${entries.length} entries, invariants held after every step`);
}
