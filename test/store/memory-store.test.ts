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
