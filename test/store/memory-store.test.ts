// The embedded store against the store contract.
import t from 'tap';
import { createMemoryStore } from '../../src/store/memory-store.ts';
import { runStoreContract } from './contract.ts';

runStoreContract(t, async (t) => {
  const store = createMemoryStore();
  t.teardown(() => store.close());
  return store;
});

t.test('entry ids stay strictly increasing when the clock stands still or goes back', async (t) => {
  const clock = [5000, 5000, 4000, 6000];
  const store = createMemoryStore(() => clock.shift() ?? 6000);
  t.teardown(() => store.close());
  const ids: string[] = [];
  for (let i = 0; i < 4; i++) ids.push((await store.grant('acct-1', 1, undefined, undefined, '2026-11-22T10:00:00.000Z')).entry_id);
  t.strictSame(ids, ['5000-0', '5000-1', '5000-2', '6000-0']);
});

t.test('a ledger page costs the same at the end of a long ledger as at its start', async (t) => {
  // A page read scanned from the start, splitting every id: at 300,000 entries a page near the end took
  // ~100 ms of the event loop (~300 ms at a million), and paging through it all took the square of that.
  const store = createMemoryStore();
  t.teardown(() => store.close());
  const N = 300_000;
  const ids: string[] = [];
  for (let i = 0; i < N; i++) ids.push((await store.grant('long', 1, undefined, undefined, '2026-11-22T10:00:00.000Z')).entry_id);
  const median = async (read: () => Promise<unknown>) => {
    const times: number[] = [];
    for (let i = 0; i < 15; i++) {
      const t0 = performance.now();
      await read();
      times.push(performance.now() - t0);
    }
    return times.sort((a, b) => a - b)[7]!;
  };
  const start = await median(() => store.ledger('long', ids[0], 100));
  const end = await median(() => store.ledger('long', ids[N - 50], 100));
  const endBefore = await median(() => store.ledgerBefore('long', ids[N - 1], 100));
  // Wide slack for a loaded machine: the scan was ~1000 × a page read's own cost here.
  t.ok(end < start * 10 + 10, `ledger after an id near the end: ${end.toFixed(2)} ms (near the start ${start.toFixed(2)} ms)`);
  t.ok(endBefore < start * 10 + 10, `ledgerBefore near the end: ${endBefore.toFixed(2)} ms`);
  t.strictSame(
    (await store.ledger('long', ids[N - 3], 100)).map((e) => e.id),
    ids.slice(N - 2),
    'the entries after the id, oldest first',
  );
  t.strictSame(
    (await store.ledgerBefore('long', ids[2], 100)).map((e) => e.id),
    [ids[1], ids[0]],
    'the entries before the id, newest first',
  );
  t.strictSame(await store.ledger('long', '99999999999999-0', 100), [], 'after the last entry: none');
  t.equal((await store.ledgerBefore('long', '0-0', 100)).length, 0, 'before the first entry: none');
});
