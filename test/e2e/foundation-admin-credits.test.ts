// Credit grants over HTTP (SPEC §2, §2a, §4), on Redis and on the embedded store: exact bodies,
// idempotent replays (also 50 at once), corrections, balance = Σ ledger, and ledger paging.
import t from 'tap';
import { startGateway, type TestGateway } from '../helpers/gateway.ts';
import { startRedis } from '../helpers/redis.ts';

const ENTRY_ID = /^\d+-\d+$/;
const ISO_UTC = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,3})?Z$/;

/** Compares stream ids `<ms>-<seq>` numerically. */
function idLess(a: string, b: string): boolean {
  const [am, as] = a.split('-').map(Number) as [number, number];
  const [bm, bs] = b.split('-').map(Number) as [number, number];
  return am < bm || (am === bm && as < bs);
}

async function allEntries(
  gw: TestGateway,
  account: string,
): Promise<{ id: string; ts: string; amount_micros: number; kind: string; note?: string }[]> {
  const r = await gw.admin(`/admin/accounts/${account}/ledger?limit=1000`);
  return r.body.entries;
}

for (const storeKind of ['redis', 'memory'] as const) {
  t.test(`credits on the ${storeKind} store`, async (t) => {
    const redis = storeKind === 'redis' ? await startRedis(t) : undefined;
    if (redis === null) return;
    const gw = await startGateway(t, redis ? { redisUrl: redis.url } : {});
    const grant = (account: string, body: Record<string, unknown>) => gw.admin(`/admin/accounts/${account}/credits`, { body });

    t.test('an account never granted reads as zeros', async (t) => {
      const r = await gw.admin('/admin/accounts/never-seen');
      t.equal(r.status, 200);
      t.same(r.body, { id: 'never-seen', balance_micros: 0, held_micros: 0 });
      const l = await gw.admin('/admin/accounts/never-seen/ledger');
      t.equal(l.status, 200);
      t.same(l.body, { entries: [], next_after: null, archived_before: null });
    });

    t.test('a grant is 201 with the account state and the ledger entry id', async (t) => {
      const r = await grant('g1', { amount_micros: 1_500_000, note: 'welcome credit' });
      t.equal(r.status, 201);
      t.same(Object.keys(r.body).sort(), ['account', 'balance_micros', 'entry_id', 'held_micros']);
      t.equal(r.body.account, 'g1');
      t.equal(r.body.balance_micros, 1_500_000);
      t.equal(r.body.held_micros, 0);
      t.match(r.body.entry_id, ENTRY_ID);
      t.same((await gw.admin('/admin/accounts/g1')).body, { id: 'g1', balance_micros: 1_500_000, held_micros: 0 });
      const [e, ...others] = await allEntries(gw, 'g1');
      t.same(others, []);
      t.same(Object.keys(e!).sort(), ['amount_micros', 'id', 'kind', 'note', 'ts']);
      t.equal(e!.id, r.body.entry_id);
      const { id: _id, ts, ...rest } = e!;
      t.same(rest, { kind: 'grant', amount_micros: 1_500_000, note: 'welcome credit' });
      t.match(ts, ISO_UTC);
      const noNote = await grant('g1', { amount_micros: 1 });
      const last = (await allEntries(gw, 'g1')).at(-1)!;
      t.equal(last.id, noNote.body.entry_id);
      t.same(Object.keys(last).sort(), ['amount_micros', 'id', 'kind', 'ts'], 'no note, no note field');
    });

    t.test('a replayed idempotency key is 200 with the original entry and credits nothing', async (t) => {
      const first = await grant('g2', { amount_micros: 700, idempotency_key: 'invoice-42' });
      t.equal(first.status, 201);
      const again = await grant('g2', { amount_micros: 700, idempotency_key: 'invoice-42' });
      t.equal(again.status, 200);
      t.same(again.body, first.body, 'same account, balance, held and entry_id');
      const differentAmount = await grant('g2', { amount_micros: 999, idempotency_key: 'invoice-42' });
      t.equal(differentAmount.status, 200, 'the key identifies the grant, whatever the amount says');
      t.equal(differentAmount.body.entry_id, first.body.entry_id);
      t.equal((await gw.admin('/admin/accounts/g2')).body.balance_micros, 700);
      t.equal((await allEntries(gw, 'g2')).length, 1);
      const other = await grant('g2', { amount_micros: 300, idempotency_key: 'invoice-43' });
      t.equal(other.status, 201);
      t.not(other.body.entry_id, first.body.entry_id);
      t.equal(other.body.balance_micros, 1000);
      const plain1 = await grant('g2', { amount_micros: 5 });
      const plain2 = await grant('g2', { amount_micros: 5 });
      t.equal(plain1.status, 201);
      t.equal(plain2.status, 201, 'without an idempotency key every grant credits');
      t.equal(plain2.body.balance_micros, 1010);
    });

    t.test('50 concurrent grants with one idempotency key credit once', async (t) => {
      const rs = await Promise.all(Array.from({ length: 50 }, () => grant('g3', { amount_micros: 12_345, idempotency_key: 'same' })));
      t.equal(rs.filter((r) => r.status === 201).length, 1, 'one 201');
      t.equal(rs.filter((r) => r.status === 200).length, 49, '49 replays');
      t.equal(new Set(rs.map((r) => r.body.entry_id)).size, 1, 'one entry id');
      for (const r of rs) t.equal(r.body.balance_micros, 12_345);
      t.same((await gw.admin('/admin/accounts/g3')).body, { id: 'g3', balance_micros: 12_345, held_micros: 0 });
      const entries = await allEntries(gw, 'g3');
      t.equal(entries.length, 1);
      t.equal(entries[0]!.id, rs[0]!.body.entry_id);
    });

    t.test('negative amounts are corrections; the balance always equals the ledger sum', async (t) => {
      const amounts = [1_000_000, -250_000, 42, -42, 3, -1_000_000, 7];
      let expected = 0;
      for (const amount of amounts) {
        expected += amount;
        const r = await grant('g4', { amount_micros: amount });
        t.equal(r.status, 201);
        t.equal(r.body.balance_micros, expected);
        const entries = await allEntries(gw, 'g4');
        const sum = entries.reduce((s, e) => s + e.amount_micros, 0);
        t.equal(sum, r.body.balance_micros, `balance = Σ ledger after ${amount}`);
      }
      const entries = await allEntries(gw, 'g4');
      t.same(
        entries.map((e) => e.amount_micros),
        amounts,
        'signed amounts, in order',
      );
      t.same(new Set(entries.map((e) => e.kind)), new Set(['grant']));
      t.same((await gw.admin('/admin/accounts/g4')).body, { id: 'g4', balance_micros: expected, held_micros: 0 });
    });

    t.test('a grant that would take the balance past 9 × 10^15 is refused, and every read stays exact', async (t) => {
      // Each grant is within ±10^15, but their sum was not bounded: 10 × 10^15 + 1 was kept in Redis
      // (int64) as 10000000000000001 while the API, a JSON number, said 10000000000000000.
      const MAX = 9e15;
      for (let i = 0; i < 8; i++) t.equal((await grant('huge', { amount_micros: 1e15 })).status, 201);
      t.equal((await grant('huge', { amount_micros: 1e15 - 1 })).body.balance_micros, MAX - 1);
      t.equal((await grant('huge', { amount_micros: 1 })).body.balance_micros, MAX, 'up to the bound exactly');
      const over = await grant('huge', { amount_micros: 1, idempotency_key: 'over' });
      t.equal(over.status, 422);
      t.same(over.body.detail[0].loc, ['body', 'amount_micros']);
      t.equal(over.body.detail[0].type, 'value_error');
      t.same(over.body.detail[0].ctx, { balance_micros: MAX, max_balance_micros: MAX });
      t.equal((await grant('huge', { amount_micros: 1e15 })).status, 422);
      t.same((await gw.admin('/admin/accounts/huge')).body, { id: 'huge', balance_micros: MAX, held_micros: 0 }, 'nothing credited');
      t.equal((await allEntries(gw, 'huge')).length, 10, 'no ledger entry for a refused grant');
      t.equal((await grant('huge', { amount_micros: -1, idempotency_key: 'over' })).status, 201, 'the refused key was not spent');
      t.equal((await gw.admin('/admin/accounts/huge')).body.balance_micros, MAX - 1);
      if (redis) t.equal(await redis.client.hget('{acct:huge}:bal', 'balance'), String(MAX - 1), 'Redis holds what the API says');
      // The same bound below zero.
      for (let i = 0; i < 9; i++) await grant('deep', { amount_micros: -1e15 });
      t.equal((await grant('deep', { amount_micros: -1 })).status, 422);
      t.equal((await gw.admin('/admin/accounts/deep')).body.balance_micros, -MAX);
    });

    t.test('accounts are independent', async (t) => {
      await grant('iso-a', { amount_micros: 10, idempotency_key: 'k' });
      const b = await grant('iso-b', { amount_micros: 20, idempotency_key: 'k' });
      t.equal(b.status, 201, 'idempotency keys are per account');
      t.equal((await gw.admin('/admin/accounts/iso-a')).body.balance_micros, 10);
      t.equal((await gw.admin('/admin/accounts/iso-b')).body.balance_micros, 20);
    });

    t.test('ledger paging: oldest first, after is exclusive, next_after chains the pages', async (t) => {
      const ids: string[] = [];
      for (let i = 1; i <= 5; i++) ids.push((await grant('g5', { amount_micros: i, note: `n${i}` })).body.entry_id);
      for (let i = 1; i < ids.length; i++) t.ok(idLess(ids[i - 1]!, ids[i]!), 'entry ids increase');
      const all = await gw.admin('/admin/accounts/g5/ledger');
      t.same(
        all.body.entries.map((e: { id: string }) => e.id),
        ids,
        'default limit returns them all, oldest first',
      );
      t.equal(all.body.next_after, null);

      const p1 = await gw.admin('/admin/accounts/g5/ledger?limit=2');
      t.same(
        p1.body.entries.map((e: { amount_micros: number }) => e.amount_micros),
        [1, 2],
      );
      t.equal(p1.body.next_after, ids[1]);
      const p2 = await gw.admin(`/admin/accounts/g5/ledger?limit=2&after=${p1.body.next_after}`);
      t.same(
        p2.body.entries.map((e: { amount_micros: number }) => e.amount_micros),
        [3, 4],
      );
      t.equal(p2.body.next_after, ids[3]);
      const p3 = await gw.admin(`/admin/accounts/g5/ledger?limit=2&after=${p2.body.next_after}`);
      t.same(
        p3.body.entries.map((e: { amount_micros: number }) => e.amount_micros),
        [5],
      );
      t.equal(p3.body.next_after, null, 'a short page ends the chain');

      const fromMiddle = await gw.admin(`/admin/accounts/g5/ledger?after=${ids[2]}`);
      t.same(
        fromMiddle.body.entries.map((e: { id: string }) => e.id),
        ids.slice(3),
        'after is exclusive',
      );
      const pastEnd = await gw.admin(`/admin/accounts/g5/ledger?after=${ids[4]}`);
      t.same(pastEnd.body, { entries: [], next_after: null, archived_before: null });
      const beforeAll = await gw.admin('/admin/accounts/g5/ledger?after=0-0&limit=1');
      t.same(
        beforeAll.body.entries.map((e: { id: string }) => e.id),
        [ids[0]],
      );
      t.same(beforeAll.body.entries[0].note, 'n1');
    });
  });
}
