// The lease book (credit-lease.ts) on its own: when a lease is taken and how large, how draws use it,
// and that whatever it did not lend goes back (when spent, at the end of its bucket's window, at close).
// The Redis side is test/store/lease.test.ts.
import { setTimeout as sleep } from 'node:timers/promises';
import { waitFor } from '../helpers/wait.ts';
import t from 'tap';
import { createLeaseBook, LEASE_AFTER, LEASE_HOLDS, LEASE_MAX_HOLDS, LEASE_SHARE, type LeaseDeps } from '../../src/store/credit-lease.ts';

const FAR_DUE = 9_000_000_000_000;

function book(o: Partial<LeaseDeps> & { refuse?: boolean } = {}) {
  const taken: { id: string; amount: number; due: number }[] = [];
  const given: { id: string; amount: number }[] = [];
  const errors: Error[] = [];
  const b = createLeaseBook({
    holdTtlMs: 660_000,
    keepMs: 60_000,
    now: Date.now,
    onError: (e) => errors.push(e),
    idPrefix: 'Ltest',
    take: async (_acct, due, id, amount) => {
      taken.push({ id, amount, due });
      return { ok: !o.refuse };
    },
    giveBack: async (_acct, _due, id, amount) => void given.push({ id, amount }),
    ...o,
  });
  return { b, taken, given, errors };
}

t.test('a lease after LEASE_AFTER holds, 32 of the asking size; spent, the rest goes back and the next is twice as large', async (t) => {
  const { b, taken, given } = book();
  for (let i = 1; i < LEASE_AFTER; i++) b.held('a', FAR_DUE, 100, 1e12);
  await sleep(0);
  t.same(taken, [], `no lease before ${LEASE_AFTER} holds`);
  t.equal(b.draw('a', FAR_DUE, 'r0', 100), undefined, 'nothing to draw from');
  b.held('a', FAR_DUE, 100, 1e12);
  await sleep(0);
  t.same(taken, [{ id: 'Ltest.1', amount: LEASE_HOLDS * 100, due: FAR_DUE }]);
  t.equal(b.open, 1);
  for (let i = 0; i < LEASE_HOLDS - 1; i++) t.equal(b.draw('a', FAR_DUE, `r${i}`, 100), 'Ltest.1');
  t.equal(b.draw('a', FAR_DUE, 'big', 150), undefined, 'a draw larger than what is left: a hold of its own');
  t.same(given, [{ id: 'Ltest.1', amount: 100 }], 'the spent lease gives back its rest');
  t.same([b.taken, b.draws], [1, LEASE_HOLDS - 1], 'counted for /metrics: one lease, its draws');
  t.equal(b.open, 0);
  t.same(b.leaseOf('a', 'r3', FAR_DUE), { id: 'Ltest.1', amount: 100 }, 'its requests still settle through it, with their draw');
  t.equal(b.leaseOf('a', 'r3', FAR_DUE - 1), undefined, 'only in its own bucket');
  b.held('a', FAR_DUE, 100, 1e12);
  await sleep(0);
  t.same(taken.at(-1), { id: 'Ltest.2', amount: 2 * LEASE_HOLDS * 100, due: FAR_DUE }, 'the next one at the next hold, twice as large');
  b.settled('a', 'r3');
  t.equal(b.leaseOf('a', 'r3', FAR_DUE), undefined, 'a settled request is forgotten');
  await b.close();
  t.same(given.at(-1), { id: 'Ltest.2', amount: 2 * LEASE_HOLDS * 100 }, 'close gives back the open lease');
});

t.test('a draw is once per request id; other accounts and buckets have their own', async (t) => {
  const { b } = book();
  for (let i = 0; i < LEASE_AFTER; i++) b.held('a', FAR_DUE, 10, 1e12);
  await sleep(0);
  t.equal(b.draw('a', FAR_DUE, 'x', 10), 'Ltest.1');
  t.equal(b.draw('a', FAR_DUE, 'x', 10), 'Ltest.1', 'repeated: the same draw');
  t.equal(b.draw('b', FAR_DUE, 'y', 10), undefined, 'another account');
  t.equal(b.leaseOf('b', 'x', FAR_DUE), undefined, 'the same request id of another account did not draw');
  t.equal(b.draw('a', FAR_DUE + 1000, 'z', 10), undefined, 'another bucket');
  // 32 holds of 10; one drawn (twice asked): 31 more fit, the 32nd does not.
  for (let i = 0; i < LEASE_HOLDS - 1; i++) t.ok(b.draw('a', FAR_DUE, `d${i}`, 10));
  t.equal(b.draw('a', FAR_DUE, 'over', 10), undefined);
  await b.close();
});

t.test("a lease's size: at most 1/64 of the available credit, none below 8 holds, at most 1024 holds", async (t) => {
  const small = book();
  for (let i = 0; i < LEASE_AFTER; i++) small.b.held('a', FAR_DUE, 100, 64 * 1000);
  await sleep(0);
  t.same(
    small.taken.map((x) => x.amount),
    [1000],
    '1/64 of 64,000 available',
  );
  const poor = book();
  for (let i = 0; i < 3 * LEASE_AFTER; i++) poor.b.held('a', FAR_DUE, 100, LEASE_SHARE * 799);
  await sleep(0);
  t.same(poor.taken, [], 'not even 8 holds to spare: no lease');
  const free = book();
  for (let i = 0; i < 3 * LEASE_AFTER; i++) free.b.held('a', FAR_DUE, 0, 1e12);
  await sleep(0);
  t.same(free.taken, [], 'holds of 0 (a free model) take none');
  const grow = book();
  const sizes: number[] = [];
  for (let round = 0; round < 8; round++) {
    for (let i = 0; i < LEASE_AFTER; i++) grow.b.held('a', FAR_DUE, 1, 1e12);
    await sleep(0);
    sizes.push(grow.taken.at(-1)!.amount);
    // Spend it: the next per-request hold asks for the next lease.
    while (grow.b.draw('a', FAR_DUE, `r${round}_${Math.random()}`, 1)) {}
  }
  t.same(sizes, [32, 64, 128, 256, 512, 1024, 1024, 1024], `doubling up to ${LEASE_MAX_HOLDS} holds`);
  await Promise.all([small.b.close(), poor.b.close(), free.b.close(), grow.b.close()]);
});

t.test('a refused lease is asked for again only after as many holds', async (t) => {
  const { b, taken } = book({ refuse: true });
  for (let i = 0; i < LEASE_AFTER; i++) b.held('a', FAR_DUE, 100, 1e12);
  await sleep(0);
  t.equal(taken.length, 1);
  for (let i = 0; i < LEASE_AFTER - 1; i++) b.held('a', FAR_DUE, 100, 1e12);
  await sleep(0);
  t.equal(taken.length, 1, 'not at every hold');
  b.held('a', FAR_DUE, 100, 1e12);
  await sleep(0);
  t.equal(taken.length, 2);
  t.equal(b.draw('a', FAR_DUE, 'r', 100), undefined);
  t.equal(b.taken, 0, 'a refused lease is not counted as taken');
});

t.test("the bucket's window ends: the lease stops lending and gives back its rest by itself", async (t) => {
  // A hold TTL of 1 s: a bucket due 1.6 s from now takes requests for another ~600 ms (room for a slow machine).
  const { b, given } = book({ holdTtlMs: 1000 });
  const due = Date.now() + 1600;
  for (let i = 0; i < LEASE_AFTER; i++) b.held('a', due, 10, 1e12);
  await sleep(0);
  t.equal(b.draw('a', due, 'x', 10), 'Ltest.1');
  await sleep(700);
  t.equal(b.draw('a', due, 'y', 10), undefined, 'past the window');
  await waitFor(() => given.length > 0, 2000, 'the give-back (the next sweep)');
  t.same(given, [{ id: 'Ltest.1', amount: (LEASE_HOLDS - 1) * 10 }], 'the rest given back');
  t.same(b.leaseOf('a', 'x', due), { id: 'Ltest.1', amount: 10 }, 'its draw still settles through it');
  b.held('a', due, 10, 1e12);
  await sleep(0);
  t.equal(b.open, 0, 'no new lease for a bucket whose window is over');
});

t.test('a draw still unsettled keepMs after its bucket was due is forgotten', async (t) => {
  const { b } = book({ holdTtlMs: 1000, keepMs: 100 });
  const due = Date.now() + 1600;
  for (let i = 0; i < LEASE_AFTER; i++) b.held('a', due, 10, 1e12);
  await sleep(0);
  t.equal(b.draw('a', due, 'x', 10), 'Ltest.1');
  t.ok(b.leaseOf('a', 'x', due));
  await waitFor(() => b.leaseOf('a', 'x', due) === undefined, 3000, 'the draw forgotten');
  t.ok(Date.now() >= due + 100, 'not before its bucket was due and keepMs more');
});

t.test('a lease taken on an earlier connection is not drawn from', async (t) => {
  let generation = 1;
  const { b, taken, given } = book({ generation: () => generation });
  for (let i = 0; i < LEASE_AFTER; i++) b.held('a', FAR_DUE, 10, 1e12);
  await sleep(0);
  t.equal(b.draw('a', FAR_DUE, 'x', 10), 'Ltest.1');
  generation = 2;
  t.equal(b.draw('a', FAR_DUE, 'y', 10), undefined, 'a new connection: a hold of its own');
  t.same(given, [{ id: 'Ltest.1', amount: (LEASE_HOLDS - 1) * 10 }], 'the old lease closed, its rest given back');
  b.held('a', FAR_DUE, 10, 1e12);
  await sleep(0);
  t.equal(taken.length, 2, 'and a new lease asked for at the next hold');
  t.equal(b.draw('a', FAR_DUE, 'z', 10), 'Ltest.2');
  await b.close();
});

t.test('a closed lease whose draws all settled is not kept', async (t) => {
  const { b } = book({ holdTtlMs: 1000, keepMs: 60_000 });
  const due = Date.now() + 1600;
  for (let i = 0; i < LEASE_AFTER; i++) b.held('a', due, 10, 1e12);
  await sleep(0);
  t.equal(b.draw('a', due, 'x', 10), 'Ltest.1');
  t.equal(b.draw('a', due, 'y', 10), 'Ltest.1');
  b.settled('a', 'x');
  // The window ends (~600 ms): closed; 'y' still drawn, so the lease is still known for its settle.
  await waitFor(() => b.open === 0, 2000, 'the window ends');
  await sleep(600);
  t.same(b.leaseOf('a', 'y', due), { id: 'Ltest.1', amount: 10 }, 'a draw still to settle keeps its lease');
  t.equal(b.remembered, 1);
  b.settled('a', 'y');
  t.equal(b.leaseOf('a', 'y', due), undefined);
  await waitFor(() => b.remembered === 0, 2000, 'the settled, closed lease dropped at the next sweep');
  await b.close();
});
