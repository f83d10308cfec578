// Ledger entry ids in order (src/ledger/entries.ts compareIds): stream ids `<ms>-<seq>` numerically, and a
// packed pass's debits `<ms>-<seq>.<k>` (docs/ledger.md "Packed passes") after their entry's id and before
// the next entry, k numerically (string order would put `.10` before `.9`).
import t from 'tap';
import { compareIds } from '../../src/ledger/entries.ts';
import { ENTRY_ID } from '../../src/admin/accounts.ts';

t.test('ids sort numerically, packed debits inside their entry', async (t) => {
  const ids = ['10-0', '9-1', '9-0.10', '9-0', '9-0.9', '9-0.1', '9-10', '9-2'];
  t.strictSame([...ids].sort(compareIds), ['9-0', '9-0.1', '9-0.9', '9-0.10', '9-1', '9-2', '9-10', '10-0']);
  t.equal(compareIds('9-0.3', '9-0.3'), 0);
});

t.test('the ledger API and the console take either id as a cursor', async (t) => {
  for (const id of ['1764740000000-0', '1764740000000-12.3', '1-0.128']) t.ok(ENTRY_ID.test(id), id);
  for (const id of ['1-0.', '1-0.1.2', '1-0.x', '.1', '1.1-0']) t.notOk(ENTRY_ID.test(id), id);
});
