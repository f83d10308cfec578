// Credit leases on a real Redis (docs/ledger.md "Leases", credit-lease.ts, lease-settle.lua): a process
// holding often for one account takes a lease and draws the next holds of the bucket from it without a
// Redis call; every ledger guarantee still holds per request: no overspend (the lease is a hold), one
// debit per request id (a replayed settle replays), a settle after the reaper took the lease debits with
// hold 0, a settle from a process that knows nothing of the lease (the spool) debits once, and whatever a
// lease did not spend goes back (at close, at the end of its bucket's window, or by the reaper).
import { setTimeout as sleep } from 'node:timers/promises';
import t from 'tap';
import type { Test } from 'tap';
import type { DebitLayout } from '../../src/store/debit-layout.ts';
import { MAX_BATCH } from '../../src/store/credit-batch.ts';
import { LEASE_AFTER } from '../../src/store/credit-lease.ts';
import { createRedisStore } from '../../src/store/redis-store.ts';
import * as K from '../../src/store/redis-keys.ts';
import { bucketDue, DEFAULT_BUCKET_MS } from '../../src/store/hold-bucket.ts';
import type { Store } from '../../src/store/types.ts';
import { startRedis } from '../helpers/redis.ts';
import { allEntries, FAR, settleOf, TS, waitFor } from './harness.ts';

const redis = await startRedis(t);
if (redis) {
  const open = async (
    t: Test,
    o: {
      scriptPipe?: boolean;
      leases?: boolean;
      holdTtlMs?: number;
      bucketMs?: number;
      debitEntries?: DebitLayout;
      leaseLingerMs?: number;
    } = {},
  ): Promise<Store> => {
    const store = await createRedisStore({ url: redis.url, commandTimeoutMs: 2000, settledTtlSeconds: 4260, leases: true, ...o });
    t.teardown(() => store.close());
    return store;
  };
  /** Script calls that ran (ioredis' first EVALSHA of a script fails with NOSCRIPT and is sent again as EVAL). */
  const evalCalls = async () => {
    const info = await redis.client.info('commandstats');
    let n = 0;
    for (const [, calls, failed] of info.matchAll(/cmdstat_eval(?:sha)?:calls=(\d+),.*failed_calls=(\d+)/g))
      n += Number(calls) - Number(failed);
    return n;
  };
  /** 'held' read straight from Redis (also after the store is closed). */
  const heldOf = async (acct: string) => Number(await redis.client.hget(K.balance(acct), 'held'));
  /**
   * An expiry whose bucket's window (a hold TTL of 1.5 s, 1 s buckets) lasts at least another 3 s: warm()'s
   * 8 holds, the take and the next hold must all land in it on a loaded machine (past it, holds go to Redis).
   */
  const soon = () => Math.ceil((Date.now() + 1500) / 1000) * 1000 + 3000;
  /** The bucket's fields: the leases' (`L…`) and the requests'. */
  const bucket = async (acct: string, expiresAt = FAR, bucketMs = DEFAULT_BUCKET_MS) => {
    const all = await redis.client.hgetall(K.holdBucket(acct, bucketDue(expiresAt, bucketMs)));
    const leases = Object.entries(all).filter(([f]) => f.startsWith('L'));
    return { leases, requests: Object.entries(all).filter(([f]) => !f.startsWith('L')) };
  };
  /** Holds one at a time until this process has a lease in the bucket (its field there). */
  const warm = async (t: Test, store: Store, acct: string, amount: number, expiresAt = FAR, bucketMs = DEFAULT_BUCKET_MS) => {
    const taken = store.leaseStats!().taken;
    for (let i = 0; i < LEASE_AFTER; i++) t.ok((await store.hold(acct, `warm${i}`, amount, expiresAt)).ok);
    // In Redis, and in this process's book: the bucket can show the lease before the take's reply reached
    // the store (a hold made in between would go to Redis, not to the lease).
    await waitFor(
      async () => store.leaseStats!().taken > taken && (await bucket(acct, expiresAt, bucketMs)).leases.length === 1,
      2000,
      'the lease is taken',
    );
  };
  const balanceIsLedger = async (t: Test, store: Store, acct: string) => {
    const entries = await allEntries(store, acct);
    t.equal(
      (await store.getAccount(acct)).balance_micros,
      entries.reduce((s, e) => s + e.amount_micros, 0),
      'balance = Σ ledger',
    );
    return entries;
  };

  for (const scriptPipe of [true, false]) {
    t.test(
      `a hot account's holds come from its lease; each settle debits and releases once (${scriptPipe ? 'pipe' : 'ioredis'})`,
      async (t) => {
        const store = await open(t, { scriptPipe });
        const acct = `lease-hot-${scriptPipe}`;
        await store.grant(acct, 100_000_000, undefined, undefined, TS);
        await warm(t, store, acct, 1000);
        const [[leaseId, leaseValue]] = (await bucket(acct)).leases as [[string, string]];
        t.equal(leaseValue, `o${32 * 1000}`, 'the first lease covers 32 holds of the size that asked');
        t.equal((await store.getAccount(acct)).held_micros, 8 * 1000 + 32 * 1000, 'held: the 8 holds and the lease');
        const before = await evalCalls();
        const held = await Promise.all(Array.from({ length: 20 }, (_, i) => store.hold(acct, `r${i}`, 1000, FAR)));
        t.ok(
          held.every((h) => h.ok),
          'every hold is taken',
        );
        t.ok((await store.hold(acct, 'r5', 1000, FAR)).ok, 'a hold repeated for a drawn request');
        t.equal(await evalCalls(), before, '20 holds drawn from the lease (and one repeated): no script call');
        t.equal((await bucket(acct)).requests.length, 8, 'a drawn request has no field until it settles');
        // Settles: each its debit, its draw released from 'held' and from the lease, in one pass per turn.
        // r0's settle says no hold (as one read back from a spool file might): its draw is the book's, 1000.
        const settled = await Promise.all(
          held.map((_, i) => store.settle(settleOf(acct, `r${i}`, 700, i === 0 ? {} : { holdMicros: 1000 }))),
        );
        t.equal(await evalCalls(), before + 1, "a turn's settles of one lease: one call");
        t.ok(settled.every((s) => !s.replayed && /^\d+-\d+$/.test(s.entry_id)));
        t.equal((await bucket(acct)).leases[0]![1], `o${12 * 1000}`, 'the lease: less the 20 draws');
        t.equal((await store.getAccount(acct)).held_micros, 8 * 1000 + 12 * 1000, 'held: the 8 holds and what is left of the lease');
        // A settle repeated (its reply lost, say): a replay with the first entry id, nothing debited.
        const again = await store.settle(settleOf(acct, 'r3', 700, { holdMicros: 1000, mayHaveRun: true }));
        t.same([again.replayed, again.entry_id], [true, settled[3]!.entry_id], 'a replayed settle replays');
        for (let i = 0; i < 8; i++) await store.settle(settleOf(acct, `warm${i}`, 700, { holdMicros: 1000 }));
        const entries = await balanceIsLedger(t, store, acct);
        t.equal(entries.filter((e) => e.kind === 'debit').length, 28, 'one debit per request');
        t.ok(
          entries.filter((e) => e.kind === 'debit' && e.request_id?.startsWith('r')).every((e) => e.hold_micros === 1000),
          'each drawn request released its draw',
        );
        await store.close();
        t.equal(await heldOf(acct), 0, 'closed: the lease given back (the repeated hold drew nothing), nothing held');
        t.equal((await bucket(acct)).leases[0]![1], '=', 'an emptied lease is marked done (the reaper drops it)');
      },
    );
  }

  t.test('no overspend: draws of two processes never exceed the balance, and what leases keep goes back', async (t) => {
    const a = await open(t);
    const b = await open(t);
    const acct = 'lease-tight';
    // 2,560 holds of 100 would spend it all; each process takes leases (1/64 of what is available, smaller
    // as the credit goes) and both hold in turns of 100 until it is gone.
    const balance = 2560 * 100;
    await a.grant(acct, balance, undefined, undefined, TS);
    await warm(t, a, acct, 100);
    let ok = LEASE_AFTER;
    let refused = 0;
    for (let round = 0; round < 30; round++) {
      const rs = await Promise.all(Array.from({ length: 100 }, (_, i) => (i % 2 ? a : b).hold(acct, `t${round}_${i}`, 100, FAR)));
      ok += rs.filter((r) => r.ok).length;
      refused += rs.filter((r) => !r.ok).length;
      const state = await a.getAccount(acct);
      t.ok(state.held_micros <= state.balance_micros, `round ${round}: held ≤ balance`);
    }
    t.ok(ok * 100 <= balance, `the holds taken (${ok} of 100) fit the balance`);
    t.ok(refused > 0, 'and the rest were refused');
    await a.close();
    await b.close();
    t.equal(await heldOf(acct), ok * 100, 'both closed: held is exactly the holds taken (every lease gave back its rest)');
    t.ok(ok >= 2560 - 2 * 8, `the credit was usable: ${ok} holds of at most 2,560`);
  });

  t.test('a settle after the reaper took the lease debits with hold 0; the lease rest is hold_expired', async (t) => {
    // A 1.5 s hold TTL and 1 s buckets: the lease's bucket is due within ~5.5 s.
    const o = { holdTtlMs: 1500, bucketMs: 1000 };
    const store = await open(t, o);
    const acct = 'lease-reaped';
    await store.grant(acct, 10_000_000, undefined, undefined, TS);
    const exp = soon();
    await warm(t, store, acct, 1000, exp, 1000);
    t.ok((await store.hold(acct, 'late', 1000, exp)).ok);
    t.equal((await bucket(acct, exp, 1000)).requests.length, 8, 'drawn');
    await sleep(Math.max(0, bucketDue(exp, 1000) - Date.now() + 20));
    t.ok((await store.reapExpiredHolds(Date.now(), TS)) >= 9, 'the reaper releases the 8 holds and the lease');
    t.equal(await heldOf(acct), 0, 'nothing held');
    const entries0 = await allEntries(store, acct);
    const lease = entries0.find((e) => e.kind === 'hold_expired' && e.request_id?.startsWith('L'));
    // The window's end gave back the 31 never drawn; what the reaper finds is the open draw.
    t.equal(lease?.hold_micros, 1000, "the lease's rest (the open draw) is released with a hold_expired entry");
    const s = await store.settle(settleOf(acct, 'late', 700, { holdMicros: 1000, holdExpiresAtMs: exp }));
    t.notOk(s.replayed);
    t.equal(await heldOf(acct), 0, 'the settle released nothing: the reaper had');
    const again = await store.settle(settleOf(acct, 'late', 700, { holdMicros: 1000, holdExpiresAtMs: exp, mayHaveRun: true }));
    t.same([again.replayed, again.entry_id], [true, s.entry_id], 'and it replays');
    const entries = await balanceIsLedger(t, store, acct);
    const debit = entries.filter((e) => e.kind === 'debit');
    t.same(
      debit.map((e) => [e.request_id, e.amount_micros, e.hold_micros]),
      [['late', -700, 0]],
      'one debit, hold 0',
    );
  });

  t.test('a settle from a process without the lease (the spool) debits once; the draw goes back with the lease', async (t) => {
    const o = { holdTtlMs: 1500, bucketMs: 1000 };
    const store = await open(t, o);
    const other = await open(t, { ...o, leases: false });
    const acct = 'lease-spool';
    await store.grant(acct, 10_000_000, undefined, undefined, TS);
    const exp = soon();
    await warm(t, store, acct, 1000, exp, 1000);
    t.ok((await store.hold(acct, 'drawn', 1000, exp)).ok);
    const s = await other.settle(settleOf(acct, 'drawn', 700, { holdMicros: 1000, holdExpiresAtMs: exp, mayHaveRun: true }));
    t.notOk(s.replayed, 'debited by the other process');
    // The first process settling it too (a retry racing the spool): a replay.
    const mine = await store.settle(settleOf(acct, 'drawn', 700, { holdMicros: 1000, holdExpiresAtMs: exp, mayHaveRun: true }));
    t.same([mine.replayed, mine.entry_id], [true, s.entry_id], "the lease's own settle replays it");
    for (let i = 0; i < LEASE_AFTER; i++) await store.settle(settleOf(acct, `warm${i}`, 0, { holdMicros: 1000, holdExpiresAtMs: exp }));
    // The window ends before the bucket is due: the lease gives back what was never drawn by itself.
    await waitFor(async () => (await bucket(acct, exp, 1000)).leases[0]?.[1] === 'o1000', 6000, 'the undrawn part given back');
    t.equal(await heldOf(acct), 1000, 'held: the one draw the other process settled without releasing');
    await sleep(Math.max(0, bucketDue(exp, 1000) - Date.now() + 20));
    await store.reapExpiredHolds(Date.now(), TS);
    t.equal(await heldOf(acct), 0, 'the reaper releases it with the lease');
    const entries = await balanceIsLedger(t, store, acct);
    t.equal(entries.filter((e) => e.kind === 'debit' && e.request_id === 'drawn').length, 1, 'one debit');
  });

  t.test('a drawn request settled twice in one turn (a retry racing its first attempt) is debited once', async (t) => {
    const store = await open(t);
    const acct = 'lease-twice';
    await store.grant(acct, 100_000_000, undefined, undefined, TS);
    await warm(t, store, acct, 1000);
    t.ok((await store.hold(acct, 'x', 1000, FAR)).ok);
    t.ok((await store.hold(acct, 'y', 1000, FAR)).ok);
    const input = settleOf(acct, 'x', 700, { holdMicros: 1000 });
    const [a, b, c] = await Promise.all([
      store.settle(input),
      store.settle({ ...input, mayHaveRun: true }),
      store.settle(settleOf(acct, 'y', 500, { holdMicros: 1000 })),
    ]);
    t.same([a.replayed, b.replayed, c.replayed], [false, true, false], 'the second of x replays');
    t.equal(b.entry_id, a.entry_id, 'with the first entry id');
    const entries = await balanceIsLedger(t, store, acct);
    t.same(
      entries.filter((e) => e.kind === 'debit').map((e) => [e.request_id, e.amount_micros, e.hold_micros]),
      [
        ['x', -700, 1000],
        ['y', -500, 1000],
      ],
      'one debit each, each releasing its draw once',
    );
    t.equal((await bucket(acct)).leases[0]![1], `o${30 * 1000}`, 'the lease less the two draws');
  });

  // store.debit_entries: fields (a rolling upgrade, docs/ledger.md "Debit entries"): every debit a lease pass
  // writes, in its common path (no check per request) and in its per-request loop, is field by field.
  for (const scriptPipe of [true, false]) {
    t.test(`debit entries "fields": a lease pass writes none compact (${scriptPipe ? 'pipe' : 'ioredis'})`, async (t) => {
      const store = await open(t, { scriptPipe, debitEntries: 'fields' });
      const acct = `lease-fields-${scriptPipe}`;
      await store.grant(acct, 100_000_000, undefined, undefined, TS);
      await warm(t, store, acct, 1000);
      for (const id of ['a', 'b', 'c', 'd']) t.ok((await store.hold(acct, id, 1000, FAR)).ok);
      const before = await evalCalls();
      // One turn, each request once: the common path.
      await Promise.all([store.settle(settleOf(acct, 'a', 700)), store.settle(settleOf(acct, 'b', 800))]);
      // One turn with a request twice: the per-request loop.
      const c = settleOf(acct, 'c', 600, { holdMicros: 1000 });
      await Promise.all([store.settle(c), store.settle({ ...c, mayHaveRun: true }), store.settle(settleOf(acct, 'd', 500))]);
      t.equal(await evalCalls(), before + 2, 'two lease passes, one per turn');
      const raw = (await redis.client.xrange(K.ledger(acct), '-', '+')) as [string, string[]][];
      t.strictSame(
        raw.filter(([, f]) => f[0] !== 'kind').map(([, f]) => f[0]),
        [],
        'no compact entry',
      );
      const entries = await balanceIsLedger(t, store, acct);
      t.strictSame(
        entries.filter((e) => e.kind === 'debit').map((e) => [e.request_id, e.amount_micros, e.hold_micros]),
        [
          ['a', -700, 1000],
          ['b', -800, 1000],
          ['c', -600, 1000],
          ['d', -500, 1000],
        ],
        'each read back whole, its draw released',
      );
    });
  }

  // store.debit_entries: packed (docs/ledger.md "Packed passes"): a lease's settles of one turn are one ledger
  // entry; every reader (the ledger API's pages, the console's newest-first pages, the export's cursor and
  // trim) sees one debit per request, `<entry id>.<k>`, and a repeated settle replays with its own id.
  for (const scriptPipe of [true, false]) {
    t.test(
      `debit entries "packed": a turn's settles of one lease are entries of up to 16 debits, read as one debit each (${scriptPipe ? 'pipe' : 'ioredis'})`,
      async (t) => {
        const store = await open(t, { scriptPipe, debitEntries: 'packed' });
        const acct = `lease-packed-${scriptPipe}`;
        await store.grant(acct, 100_000_000, undefined, undefined, TS);
        await warm(t, store, acct, 1000);
        for (let i = 0; i < 8; i++) await store.settle(settleOf(acct, `warm${i}`, 100, { holdMicros: 1000 }));
        // 17 settles of one turn: an entry of 16 (PACKED_DEBITS_MAX) and a plain entry of one.
        const held = await Promise.all(Array.from({ length: 17 }, (_, i) => store.hold(acct, `r${i}`, 1000, FAR)));
        t.ok(held.every((h) => h.ok));
        const streamBefore = await redis.client.xlen(K.ledger(acct));
        const before = await evalCalls();
        const settled = await Promise.all(held.map((_, i) => store.settle(settleOf(acct, `r${i}`, 700 + i, { holdMicros: 1000 }))));
        t.equal(await evalCalls(), before + 1, 'one script call');
        t.equal(await redis.client.xlen(K.ledger(acct)), streamBefore + 2, 'two stream entries for the 17 debits');
        const x = settled[0]!.entry_id.split('.')[0]!;
        const y = settled[16]!.entry_id;
        t.match(x, /^\d+-\d+$/);
        t.match(y, /^\d+-\d+$/, 'the last debit alone: a plain entry');
        const idOf = (i: number) => (i < 16 ? `${x}.${i + 1}` : y);
        t.strictSame(
          settled.map((r) => [r.entry_id, r.replayed]),
          settled.map((_, i) => [idOf(i), false]),
          'each request its own id, in the order issued',
        );
        t.equal((await bucket(acct)).leases[0]![1], `o${15 * 1000}`, 'the lease: less the 17 draws');
        t.equal((await store.getAccount(acct)).held_micros, 15 * 1000, 'held: what is left of the lease');
        const entries = await balanceIsLedger(t, store, acct);
        const drawn = entries.filter((e) => e.request_id?.startsWith('r'));
        t.strictSame(
          drawn.map((e) => [e.id, e.kind, e.request_id, e.amount_micros, e.hold_micros, e.model]),
          held.map((_, i) => [idOf(i), 'debit', `r${i}`, -(700 + i), 1000, 'gpt-test']),
          'read back as one debit per request, each releasing its draw',
        );
        // Pages of 7 cut the pass: oldest first after a debit inside it, newest first before one.
        const paged: string[] = [];
        for (let after: string | undefined; ;) {
          const page = await store.ledger(acct, after, 7);
          paged.push(...page.map((e) => e.id));
          if (page.length < 7) break;
          after = page.at(-1)!.id;
        }
        t.strictSame(
          paged,
          entries.map((e) => e.id),
          'the ledger API pages through the pass',
        );
        const back: string[] = [];
        for (let before: string | undefined; ;) {
          const page = await store.ledgerBefore(acct, before, 7);
          back.push(...page.map((e) => e.id));
          if (page.length < 7) break;
          before = page.at(-1)!.id;
        }
        t.strictSame(back, entries.map((e) => e.id).reverse(), "the console's pages, newest first");
        // The packed entry's own id as a cursor: its debits come after it.
        t.strictSame(
          (await store.ledger(acct, x, 3)).map((e) => e.id),
          [`${x}.1`, `${x}.2`, `${x}.3`],
          "after the entry's own id: its debits",
        );
        t.strictSame(
          (await store.ledgerBefore(acct, `${x}.1`, 1)).map((e) => e.id),
          [entries[entries.findIndex((e) => e.id === `${x}.1`) - 1]!.id],
          'before its first debit: the entry before it',
        );
        // A repeated settle (its reply lost): a replay with its own id; nothing debited.
        const again = await store.settle(settleOf(acct, 'r3', 703, { holdMicros: 1000, mayHaveRun: true }));
        t.strictSame([again.replayed, again.entry_id], [true, `${x}.4`], 'a replayed settle answers its debit in the entry');
        // The export's cursor inside the pass: the trim keeps the entry (its later debits are not exported).
        const token = 'tok';
        t.ok(await store.acquireExportLease(acct, token, 60_000));
        t.ok(await store.commitExport(acct, token, null, `${x}.5`));
        t.equal((await store.exportState(acct)).cursor, `${x}.5`);
        await store.trimLedger(acct, `${Date.now() + 60_000}-0`);
        t.strictSame(
          (await store.ledger(acct, `${x}.5`, 100)).map((e) => e.id),
          held.slice(5).map((_, i) => idOf(i + 5)),
          'after the trim, the debits past the cursor are still there',
        );
        t.equal((await store.ledger(acct, undefined, 1))[0]!.id, `${x}.1`, 'the trim stopped at the pass: nothing before it is left');
        // At its last debit the cursor still keeps the entry (the script does not read it to count); once the
        // cursor moves past it, it goes.
        t.ok(await store.commitExport(acct, token, `${x}.5`, `${x}.16`));
        await store.trimLedger(acct, `${Date.now() + 60_000}-0`);
        t.equal(await redis.client.xlen(K.ledger(acct)), 2, 'the cursor at its last debit: the entry is kept');
        t.ok(await store.commitExport(acct, token, `${x}.16`, y));
        await store.trimLedger(acct, `${Date.now() + 60_000}-0`);
        t.equal(await redis.client.xlen(K.ledger(acct)), 0, 'the cursor past it: both entries trimmed');
      },
    );
  }

  t.test('debit entries "packed": a pass with a request already settled is declined and settled per request', async (t) => {
    const store = await open(t, { debitEntries: 'packed' });
    const acct = 'lease-packed-declined';
    await store.grant(acct, 100_000_000, undefined, undefined, TS);
    await warm(t, store, acct, 1000);
    for (const id of ['a', 'b', 'c']) t.ok((await store.hold(acct, id, 1000, FAR)).ok);
    const a = settleOf(acct, 'a', 700, { holdMicros: 1000 });
    const first = await store.settle(a);
    t.match(first.entry_id, /^\d+-\d+$/, 'a pass of one is a plain entry');
    // A hold repeated for a request already settled draws again (docs/ledger.md "Leases", an edge): its
    // settle repeated then goes in a lease pass, where its field is already there.
    t.ok((await store.hold(acct, 'a', 1000, FAR)).ok);
    const before = await evalCalls();
    const [again, b, c] = await Promise.all([
      store.settle({ ...a, mayHaveRun: true }),
      store.settle(settleOf(acct, 'b', 800, { holdMicros: 1000 })),
      store.settle(settleOf(acct, 'c', 900, { holdMicros: 1000 })),
    ]);
    t.equal(await evalCalls(), before + 2, 'the packed pass declined, then lease-settle.lua');
    t.strictSame([again.replayed, again.entry_id], [true, first.entry_id], 'the settled request replays');
    t.ok(!b.replayed && !c.replayed && /^\d+-\d+$/.test(b.entry_id) && /^\d+-\d+$/.test(c.entry_id), 'the others debit, an entry each');
    const entries = await balanceIsLedger(t, store, acct);
    t.strictSame(
      entries
        .filter((e) => e.kind === 'debit' && !e.request_id!.startsWith('warm'))
        .map((e) => [e.request_id, e.amount_micros, e.hold_micros]),
      [
        ['a', -700, 1000],
        ['b', -800, 1000],
        ['c', -900, 1000],
      ],
    );
    t.equal(
      (await store.getAccount(acct)).held_micros,
      8 * 1000 + 29 * 1000,
      "held: the 8 holds and the lease less the 3 draws settled (the repeated hold's draw stays in it until given back)",
    );
  });

  // Lingering passes (`credit.lease_linger_ms`, docs/ledger.md "Lingering passes"): a lease's settles of
  // several turns wait for one timer and go as one call; a full batch goes at once; the store's close and
  // the shutdown's hurry() send what waits. Each settle is still its own debit.
  /** Settles each drawn request in a turn of its own; returns their promises (not awaited). */
  const settleInTurns = async (store: Store, acct: string, ids: string[]) => {
    const out: Promise<{ entry_id: string; replayed: boolean }>[] = [];
    for (const id of ids) {
      out.push(store.settle(settleOf(acct, id, 700, { holdMicros: 100 })));
      await new Promise((r) => setImmediate(r));
    }
    return out;
  };
  const debitsOf = async (store: Store, acct: string, prefix: string) =>
    (await allEntries(store, acct)).filter((e) => e.kind === 'debit' && e.request_id?.startsWith(prefix));
  for (const debitEntries of ['compact', 'packed'] as const) {
    t.test(`lingering passes (${debitEntries}): settles of 12 turns are one call, sent by the timer`, async (t) => {
      const store = await open(t, { leaseLingerMs: 1000, debitEntries });
      const acct = `linger-timer-${debitEntries}`;
      await store.grant(acct, 100_000_000, undefined, undefined, TS);
      await warm(t, store, acct, 1000);
      const ids = Array.from({ length: 12 }, (_, i) => `g${i}`);
      for (const id of ids) t.ok((await store.hold(acct, id, 100, FAR)).ok);
      const before = await evalCalls();
      const settled = await Promise.all(await settleInTurns(store, acct, ids));
      t.equal(await evalCalls(), before + 1, "12 turns' settles of one lease: one call");
      t.equal(new Set(settled.map((s) => s.entry_id)).size, 12, 'each settle its own entry id');
      t.ok(settled.every((s) => !s.replayed));
      const debits = await debitsOf(store, acct, 'g');
      t.same(debits.map((e) => e.request_id).sort(), [...ids].sort(), 'one debit per request');
      if (debitEntries === 'packed')
        t.equal(new Set(debits.map((e) => e.id.split('.')[0])).size, 1, 'packed: the 12 debits in one ledger entry');
      t.equal((await bucket(acct)).leases[0]![1], `o${32 * 1000 - 12 * 100}`, 'the lease less the 12 draws');
      await balanceIsLedger(t, store, acct);
    });
  }

  t.test('lingering passes: nothing is sent before the timer; a full batch goes at once; close sends the rest', async (t) => {
    const store = await open(t, { leaseLingerMs: 60_000, debitEntries: 'packed' });
    const acct = 'linger-full';
    await store.grant(acct, 100_000_000, undefined, undefined, TS);
    await warm(t, store, acct, 1000);
    // Draws of 100 from a lease of 32 × 1000: 130 of them fit.
    const ids = Array.from({ length: MAX_BATCH + 2 }, (_, i) => `f${i}`);
    for (const id of ids) t.ok((await store.hold(acct, id, 100, FAR)).ok);
    const before = await evalCalls();
    const first = await settleInTurns(store, acct, ids.slice(0, 5));
    await sleep(50);
    t.equal(await evalCalls(), before, 'settles waiting for the timer: no call yet');
    t.equal((await debitsOf(store, acct, 'f')).length, 0, 'and no debit');
    const rest = await settleInTurns(store, acct, ids.slice(5, MAX_BATCH));
    const full = await Promise.all([...first, ...rest]);
    t.equal(full.length, MAX_BATCH, `the ${MAX_BATCH}th settle sends the batch at once (the timer is a minute)`);
    t.equal((await debitsOf(store, acct, 'f')).length, MAX_BATCH);
    const last = await settleInTurns(store, acct, ids.slice(MAX_BATCH));
    await sleep(50);
    t.equal((await debitsOf(store, acct, 'f')).length, MAX_BATCH, 'the next two wait');
    await store.close();
    const closed = await Promise.all(last);
    t.ok(
      closed.every((s) => !s.replayed),
      "the store's close sent them",
    );
    t.equal(await heldOf(acct), 8 * 1000, 'closed: the lease given back with them; only the 8 warm-up holds are held');
    const entries = (await redis.client.xrange(K.ledger(acct), '-', '+')).length;
    t.ok(entries >= 9 && entries <= 12, `${entries} ledger entries for ${MAX_BATCH + 2} debits and the grant`);
  });

  for (const scriptPipe of [true, false])
    t.test(
      `lingering passes: close with a spent lease (no give-back) still sends what waits (${scriptPipe ? 'pipe' : 'ioredis'})`,
      async (t) => {
        const store = await open(t, { leaseLingerMs: 60_000, debitEntries: 'packed', scriptPipe });
        const acct = `linger-spent-${scriptPipe}`;
        await store.grant(acct, 100_000_000, undefined, undefined, TS);
        await warm(t, store, acct, 1000);
        // Draws of 1000 from a lease of 32 × 1000: the 32nd spends it, so the close has nothing to give back
        // and, before the fix, did not wait for the lingering pass (a review's reproduction).
        for (let i = 0; i < 32; i++) t.ok((await store.hold(acct, `s${i}`, 1000, FAR)).ok);
        const waiting = (await settleInTurns(store, acct, ['s0', 's1', 's2'])).map((p) =>
          p.then(
            () => 'landed',
            (err: unknown) => `failed: ${(err as Error).message}`,
          ),
        );
        await sleep(30);
        await store.close();
        t.same(await Promise.all(waiting), ['landed', 'landed', 'landed'], "the store's close sent them and waited");
        const debits = await redis.client.xrange(K.ledger(acct), '-', '+');
        t.equal(debits.filter(([, f]) => f.includes('p')).length, 1, 'one packed entry of the three');
        // A settle handed to the closed store fails at once instead of lingering for the minute.
        const started = Date.now();
        await t.rejects(store.settle(settleOf(acct, 's3', 700, { holdMicros: 100 })));
        t.ok(Date.now() - started < 30_000, 'not held back by the linger after the close');
      },
    );

  t.test('lingering passes: hurry() (the shutdown drain) sends what waits, and later settles go in their turn', async (t) => {
    const store = await open(t, { leaseLingerMs: 60_000 });
    const acct = 'linger-hurry';
    await store.grant(acct, 100_000_000, undefined, undefined, TS);
    await warm(t, store, acct, 1000);
    for (let i = 0; i < 4; i++) t.ok((await store.hold(acct, `h${i}`, 100, FAR)).ok);
    const waiting = await settleInTurns(store, acct, ['h0', 'h1']);
    await sleep(50);
    t.equal((await debitsOf(store, acct, 'h')).length, 0, 'waiting for the timer');
    store.hurry!();
    t.equal((await Promise.all(waiting)).length, 2, 'hurry() sent them');
    // After hurry(), a settle goes in its own turn: awaited here with a minute's linger configured.
    const [late] = await settleInTurns(store, acct, ['h2']);
    t.notOk((await late!).replayed, 'a settle after hurry() is not held back');
    t.equal((await debitsOf(store, acct, 'h')).length, 3);
  });

  t.test('an account without enough credit to spare takes no lease', async (t) => {
    const store = await open(t);
    const acct = 'lease-poor';
    // 8 holds of 1000 leave 2,000: a lease of 1/64 of it would not cover 8 holds.
    await store.grant(acct, 10_000, undefined, undefined, TS);
    for (let i = 0; i < LEASE_AFTER; i++) await store.hold(acct, `p${i}`, 1000, FAR);
    await sleep(50);
    t.equal((await bucket(acct)).leases.length, 0, 'no lease');
    t.equal((await store.getAccount(acct)).held_micros, 8000);
    t.notOk((await store.hold(acct, 'p9', 3000, FAR)).ok, 'a hold is refused exactly as without leases');
  });

  t.test('leases off (the default): every hold is its own', async (t) => {
    const store = await open(t, { leases: false });
    const acct = 'lease-off';
    await store.grant(acct, 100_000_000, undefined, undefined, TS);
    for (let i = 0; i < 3 * LEASE_AFTER; i++) await store.hold(acct, `o${i}`, 1000, FAR);
    await sleep(50);
    t.same((await bucket(acct)).leases, []);
    t.equal((await bucket(acct)).requests.length, 3 * LEASE_AFTER);
  });
}

// A shutdown during a Redis outage: the store's close gives its leases back, or fails to at once and
// leaves them to the reaper; it never waits on a server that is gone.
t.test('Redis away: an open lease still lends; close does not hang on the give-back', async (t) => {
  const down = await startRedis(t, { restartable: true });
  if (!down) return;
  for (const scriptPipe of [true, false]) {
    await down.start().catch(() => {});
    const store = await createRedisStore({ url: down.url, commandTimeoutMs: 1000, settledTtlSeconds: 4260, leases: true, scriptPipe });
    const acct = `lease-outage-${scriptPipe}`;
    await store.grant(acct, 100_000_000, undefined, undefined, TS);
    for (let i = 0; i < LEASE_AFTER; i++) await store.hold(acct, `w${i}`, 1000, FAR);
    // In Redis and in this process's book (the take's reply can reach the store after Redis shows the lease).
    await waitFor(
      async () => store.leaseStats!().taken === 1 && (await store.getAccount(acct)).held_micros === 8000 + 32_000,
      2000,
      'the lease is taken',
    );
    t.ok((await store.hold(acct, 'drawn', 1000, FAR)).ok, 'drawn');
    await down.stop();
    // Redis away: the open lease still lends (the credit was reserved before), and a settle fails, to be
    // retried and spooled by its caller.
    t.ok((await store.hold(acct, 'during', 1000, FAR)).ok, 'a hold drawn with Redis gone');
    await t.rejects(store.settle(settleOf(acct, 'drawn', 700, { holdMicros: 1000 })), 'its settle fails, to be retried');
    const t0 = Date.now();
    await store.close();
    t.ok(Date.now() - t0 < 5000, `${scriptPipe ? 'pipe' : 'ioredis'}: closed in ${Date.now() - t0} ms with Redis gone`);
  }
});
