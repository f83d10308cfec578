// Contract cases for the ledger export's state and the usage aggregates (SPEC §10): the lease, the fenced
// cursor, trimming that never passes the cursor, the account index, and the usage cells.
import type { Test } from 'tap';
import type { UsageCell } from '../../src/store/types.ts';
import { USAGE_FIELDS_PER_SCAN } from '../../src/store/usage-fields.ts';
import { encodeObject, decodeObject } from '../../src/ledger/entries.ts';
import { allEntries, DEBIT_FIELDS, FAR, keyRecordOf, settleOf, TS, TS2, uniqueAccount, waitFor, type Harness } from './harness.ts';

type Case = (name: string, fn: (t: Test, h: Harness) => Promise<void>) => void;

const FAR_FUTURE = '99999999999999-0';

/** A key record of `account` with id `id`, held by the store (a last use is recorded only for held keys). */
async function holdKey(store: Harness['store'], account: string, id: string): Promise<void> {
  await store.createKey(`hash-${account}-${id}`, keyRecordOf(account, id));
}

function cell(day: string, key_id: string, model: string, n: number): UsageCell {
  return { day, key_id, model, requests: n, prompt_tokens: 10 * n, completion_tokens: 100 * n, cost_micros: 1000 * n, cached_tokens: n };
}

export function exportCases(test: Case): void {
  test('export lease: one holder at a time, renewable by its holder, free again once released or expired', async (t, { store }) => {
    const a = uniqueAccount();
    t.equal(await store.acquireExportLease(a, 'one', 60_000), true, 'free: taken');
    t.equal(await store.acquireExportLease(a, 'two', 60_000), false, 'held by another: refused');
    t.equal(await store.acquireExportLease(a, 'one', 60_000), true, 'its holder renews it');
    await store.releaseExportLease(a, 'two');
    t.equal(await store.acquireExportLease(a, 'two', 60_000), false, "another's release does not free it");
    await store.releaseExportLease(a, 'one');
    t.equal(await store.acquireExportLease(a, 'two', 150), true, 'released: taken by the next');
    await waitFor(() => store.acquireExportLease(a, 'three', 60_000), 3000, 'the short lease to expire');
  });

  test("every kind of entry carries its fields in one order, the Redis store's: the export's bytes are the same from either store", async (t, {
    store,
  }) => {
    const a = uniqueAccount();
    await store.grant(a, 100_000, undefined, 'a note', TS);
    await store.grant(a, 5, undefined, undefined, TS);
    for (const [id, cached] of [
      ['with-cached', 5],
      ['without', 0],
    ] as const) {
      await store.hold(a, id, 500, FAR);
      await store.settle(settleOf(a, id, 120, { cachedTokens: cached, holdMicros: 500 }));
    }
    await store.hold(a, 'reaped', 300, 1000);
    await store.reapExpiredHolds(2000, TS2);
    const debit = DEBIT_FIELDS;
    const want = [
      ['id', 'kind', 'amount_micros', 'ts', 'note', 'account'],
      ['id', 'kind', 'amount_micros', 'ts', 'account'],
      [...debit, 'cached_tokens', 'account'],
      [...debit, 'account'],
      ['id', 'kind', 'amount_micros', 'ts', 'request_id', 'hold_micros', 'account'],
    ];
    // As the export writes them (the embedded store wrote `ts` second: the same entries, other bytes).
    const lines = await decodeObject(await encodeObject(a, await allEntries(store, a)));
    t.same(
      lines.map((e) => Object.keys(e)),
      want,
    );
  });

  test('commitExport moves the cursor only under the lease and from the cursor it read (fenced CAS)', async (t, { store }) => {
    const a = uniqueAccount();
    const g1 = await store.grant(a, 10, undefined, undefined, TS);
    const g2 = await store.grant(a, 20, undefined, undefined, TS);
    t.same(await store.exportState(a), { cursor: null, archived_before: null }, 'nothing exported yet');
    t.equal(await store.commitExport(a, 'nobody', null, g1.entry_id), false, 'without the lease: refused');
    await store.acquireExportLease(a, 'me', 60_000);
    t.equal(await store.commitExport(a, 'me', g1.entry_id, g2.entry_id), false, 'from a cursor that is not the current one: refused');
    t.equal(await store.commitExport(a, 'me', null, g1.entry_id), true, 'from the current cursor: moved');
    t.equal(await store.commitExport(a, 'me', null, g2.entry_id), false, 'a replay of the same step: refused');
    t.equal((await store.exportState(a)).cursor, g1.entry_id);
    await store.releaseExportLease(a, 'me');
    t.equal(await store.commitExport(a, 'me', g1.entry_id, g2.entry_id), false, 'after release: refused');
    t.equal((await store.exportState(a)).cursor, g1.entry_id, 'unchanged');
  });

  test('trimLedger never removes an entry past the export cursor, whatever its age', async (t, h) => {
    const { store } = h;
    const a = uniqueAccount();
    const ids: string[] = [];
    for (let i = 1; i <= 5; i++) ids.push((await store.grant(a, i, undefined, undefined, TS)).entry_id);
    t.equal(await store.trimLedger(a, FAR_FUTURE), 0, 'nothing exported: nothing trimmed');
    t.equal((await allEntries(store, a)).length, 5);
    await store.acquireExportLease(a, 'x', 60_000);
    t.ok(await store.commitExport(a, 'x', null, ids[2]!));
    t.equal(await store.trimLedger(a, ids[1]!), 1, 'the retention bound first: only entries older than it');
    t.same((await store.exportState(a)).archived_before, ids[1], 'archived_before is where the trim stopped');
    t.equal(await store.trimLedger(a, FAR_FUTURE), 2, 'then up to and including the cursor, no further');
    t.same(
      (await allEntries(store, a)).map((e) => e.id),
      ids.slice(3),
      'the two unexported entries stay',
    );
    const archived = (await store.exportState(a)).archived_before!;
    t.ok(archived > ids[2]! || archived.split('-')[0] === ids[2]!.split('-')[0], 'archived_before moved past the cursor');
    t.same(
      (await store.ledger(a, undefined, 10)).map((e) => e.id),
      ids.slice(3),
      'reads start after the trim',
    );
    // The invariant check (balance = Σ ledger) cannot hold for a trimmed ledger: that sum needs the objects.
    h.accounts.delete(a);
  });

  test('the ledger account index: grants index their account; backfill finds accounts with a ledger', async (t, { store }) => {
    const a = uniqueAccount();
    const b = uniqueAccount();
    await store.grant(a, 5, undefined, undefined, TS);
    await store.indexLedgerAccounts([b]);
    const seen = new Set<string>();
    await store.scanLedgerAccounts(async (batch) => void batch.forEach((x) => seen.add(x)));
    t.ok(seen.has(a), 'granted account indexed');
    t.ok(seen.has(b), 'explicitly indexed account listed');
    t.ok((await store.backfillLedgerIndex()) >= 1, 'backfill finds at least the granted account');
  });

  test('usage: flushes add up per day × key × model; rebuild replaces only the keys named', async (t, { store }) => {
    const a = uniqueAccount();
    await holdKey(store, a, 'key_live');
    const flush = (cells: UsageCell[]) =>
      store.flushUsage({
        cells: cells.map((c) => ({ ...c, account: a })),
        lastUsed: [{ account: a, key_id: 'key_live', at: '2026-11-22T10:05:00Z' }],
        ledgerAccounts: [a],
        retentionDays: 400,
      });
    await flush([cell('2026-11-21', 'key_live', 'm|odd', 1), cell('2026-11-22', 'key_test', 'm', 2)]);
    await flush([cell('2026-11-21', 'key_live', 'm|odd', 3), cell('2026-11-22', 'key_live', 'm', 1)]);
    t.same(await store.usageCells(a, '2026-11-21', '2026-11-22'), [
      cell('2026-11-21', 'key_live', 'm|odd', 4),
      cell('2026-11-22', 'key_live', 'm', 1),
      cell('2026-11-22', 'key_test', 'm', 2),
    ]);
    t.same(await store.usageCells(a, '2026-11-22', '2026-11-22'), [
      cell('2026-11-22', 'key_live', 'm', 1),
      cell('2026-11-22', 'key_test', 'm', 2),
    ]);
    t.same(await store.lastUsed(a), { key_live: '2026-11-22T10:05:00Z' });
    t.same(
      await store.usageDayFields(a, '2026-11-20', '2026-11-22'),
      [0, 5, 10],
      "each day's stored fields (five counters a cell here), 0 for a day without usage",
    );
    await store.replaceUsage(a, '2026-11-22', ['key_live'], [cell('2026-11-22', 'key_live', 'other', 7)], 400);
    t.same(
      await store.usageCells(a, '2026-11-22', '2026-11-22'),
      [cell('2026-11-22', 'key_live', 'other', 7), cell('2026-11-22', 'key_test', 'm', 2)],
      "the live key's cells replaced, the test key's kept",
    );
    t.same(await store.usageCells(uniqueAccount(), '2026-11-01', '2026-11-30'), [], 'an unknown account has none');
    t.same(await store.usageDayFields(uniqueAccount(), '2026-11-01', '2026-11-03'), [0, 0, 0]);
  });

  test('usage: a sliced read (the console page) finds the same cells as a whole one, a large day included', async (t, { store }) => {
    const a = uniqueAccount();
    // 3,000 cells of five counters: 15,000 fields, several slices of USAGE_FIELDS_PER_SCAN on Redis.
    const big = Array.from({ length: 3_000 }, (_, i) => ({
      ...cell('2026-11-22', `key_${String(i).padStart(5, '0')}`, 'm', i + 1),
      account: a,
    }));
    for (let i = 0; i < big.length; i += 500)
      await store.flushUsage({ cells: big.slice(i, i + 500), lastUsed: [], ledgerAccounts: [], retentionDays: 400 });
    await store.flushUsage({
      cells: [{ ...cell('2026-11-20', 'key_x', 'v|m', 2), account: a }],
      lastUsed: [],
      ledgerAccounts: [],
      retentionDays: 400,
    });
    const whole = await store.usageCells(a, '2026-11-19', '2026-11-22');
    t.equal(whole.length, 3_001);
    t.same(await store.usageCells(a, '2026-11-19', '2026-11-22', { sliced: true }), whole, 'the same cells, in the same order');
    t.ok(USAGE_FIELDS_PER_SCAN < 15_000, 'the large day takes more than one slice');
  });

  test("usage: a key's last use is kept only while its account holds the key", async (t, { store }) => {
    const a = uniqueAccount();
    await holdKey(store, a, 'key_kept');
    await holdKey(store, a, 'key_gone');
    const flush = (key_id: string, at: string) =>
      store.flushUsage({ cells: [], lastUsed: [{ account: a, key_id, at }], ledgerAccounts: [], retentionDays: 400 });
    await flush('key_kept', '2026-11-22T10:05:00Z');
    await flush('key_gone', '2026-11-22T10:06:00Z');
    t.same(await store.lastUsed(a), { key_kept: '2026-11-22T10:05:00Z', key_gone: '2026-11-22T10:06:00Z' });
    t.ok(await store.deleteKey('key_gone'));
    t.same(await store.lastUsed(a), { key_kept: '2026-11-22T10:05:00Z' }, 'a delete takes its last use along');
    await flush('key_gone', '2026-11-22T10:07:00Z');
    await flush('key_never', '2026-11-22T10:07:00Z');
    t.same(
      await store.lastUsed(a),
      { key_kept: '2026-11-22T10:05:00Z' },
      'a flush landing after the delete, or for a key never held, writes nothing',
    );
  });

  test('usage: a flush is applied at most once per process and sequence number (SPEC §10)', async (t, { store }) => {
    const a = uniqueAccount();
    const flush = (cells: UsageCell[], flushId?: { process: string; seq: number }) =>
      store.flushUsage({
        cells: cells.map((c) => ({ ...c, account: a })),
        lastUsed: [],
        ledgerAccounts: [],
        retentionDays: 400,
        ...(flushId && { flushId }),
      });
    const two = [cell('2026-11-21', 'key_a', 'm', 1), cell('2026-11-22', 'key_a', 'm', 2)];
    await flush(two, { process: 'p1', seq: 1 });
    await flush(two, { process: 'p1', seq: 1 });
    t.same(await store.usageCells(a, '2026-11-21', '2026-11-22'), two, 'a retried flush that landed changes nothing');
    await flush([cell('2026-11-22', 'key_a', 'm', 5)], { process: 'p2', seq: 1 });
    await flush([cell('2026-11-21', 'key_a', 'm', 1)], { process: 'p1', seq: 2 });
    await flush([cell('2026-11-21', 'key_a', 'm', 1)]);
    t.same(
      await store.usageCells(a, '2026-11-21', '2026-11-22'),
      [cell('2026-11-21', 'key_a', 'm', 3), cell('2026-11-22', 'key_a', 'm', 7)],
      "another process's flush, a later one, and one without an id all apply; the marks are no cells",
    );
    await store.replaceUsage(a, '2026-11-21', ['key_a'], [cell('2026-11-21', 'key_a', 'm', 9)], 400);
    await flush([cell('2026-11-21', 'key_a', 'm', 1)], { process: 'p1', seq: 2 });
    t.same(await store.usageCells(a, '2026-11-21', '2026-11-21'), [cell('2026-11-21', 'key_a', 'm', 9)], 'a rebuild keeps the marks');
  });
}
