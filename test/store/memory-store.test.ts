// The embedded store against the store contract.
import t from 'tap';
import { createMemoryStore, firstPast } from '../../src/store/memory-store.ts';
import type { LedgerEntry } from '../../src/store/types.ts';
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

t.test('a ledger page is found by a binary search, not a scan from the start', async (t) => {
  // A page read scanned from the start, splitting every id: at 300,000 entries a page near the end took
  // ~100 ms of the event loop (~300 ms at a million), and paging through it all took the square of that.
  // Counted, not timed: the entries a lookup reads, through a proxy over a 300,000-entry ledger.
  const N = 300_000;
  const entries = Array.from({ length: N }, (_, i) => ({ id: `${1000 + (i >> 2)}-${i & 3}` }) as LedgerEntry);
  let reads = 0;
  const counted = new Proxy(entries, {
    get(target, prop, receiver) {
      if (typeof prop === 'string' && /^\d+$/.test(prop)) reads++;
      return Reflect.get(target, prop, receiver);
    },
  });
  const bound = 2 * Math.ceil(Math.log2(N)) + 2;
  for (const [id, inclusive, want] of [
    [entries[N - 50]!.id, false, N - 49],
    [entries[N - 1]!.id, true, N - 1],
    [entries[0]!.id, false, 1],
    [entries[0]!.id, true, 0],
    ['0-0', false, 0],
    ['99999999999999-0', false, N],
    [`${1000 + (N >> 3)}-9`, false, ((N >> 3) + 1) * 4],
  ] as const) {
    reads = 0;
    t.equal(firstPast(counted, id, inclusive), want, `first entry past ${id}${inclusive ? ' (inclusive)' : ''}`);
    t.ok(reads <= bound, `${reads} entries read (≤ ${bound})`);
  }
  // Through the store, a ledger long enough to page: the pages around both ends.
  const store = createMemoryStore();
  t.teardown(() => store.close());
  const ids: string[] = [];
  for (let i = 0; i < 2000; i++) ids.push((await store.grant('long', 1, undefined, undefined, '2026-11-22T10:00:00.000Z')).entry_id);
  t.strictSame(
    (await store.ledger('long', ids[1997], 100)).map((e) => e.id),
    ids.slice(1998),
    'the entries after the id, oldest first',
  );
  t.strictSame(
    (await store.ledgerBefore('long', ids[2], 100)).map((e) => e.id),
    [ids[1], ids[0]],
    'the entries before the id, newest first',
  );
  t.strictSame(
    (await store.ledger('long', ids[999], 3)).map((e) => e.id),
    ids.slice(1000, 1003),
    'a page from the middle',
  );
  t.strictSame(await store.ledger('long', '99999999999999-0', 100), [], 'after the last entry: none');
  t.equal((await store.ledgerBefore('long', '0-0', 100)).length, 0, 'before the first entry: none');
});
