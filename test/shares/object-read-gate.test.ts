import t from 'tap';
import { createObjectReadGate, type Release } from '../../src/shares/object-read-gate.ts';

/** Lets every settled promise's callbacks run. */
const settle = () => new Promise((r) => setImmediate(r));

t.test("an account's reads past the bound wait, in order, and go as earlier ones finish", async (t) => {
  const gate = createObjectReadGate(2_000);
  const order: number[] = [];
  const releases: Release[] = [];
  for (let i = 0; i < 5; i++)
    void gate.acquire('a', 1_000).then((r) => {
      order.push(i);
      releases.push(r);
    });
  await settle();
  t.strictSame(order, [0, 1], 'two of 1,000 bytes fit in 2,000');
  t.strictSame(gate.load('a'), { inFlight: 2_000, waiting: 3 });
  releases[0]!();
  releases[0]!(); // a second call gives nothing back twice
  await settle();
  t.strictSame(order, [0, 1, 2], 'one finished, the next in line goes');
  t.strictSame(gate.load('a'), { inFlight: 2_000, waiting: 2 });
  for (const r of releases.slice(1)) r();
  await settle();
  for (const r of releases.slice(3)) r();
  await settle();
  t.strictSame(order, [0, 1, 2, 3, 4], 'every read went, none was refused');
  for (const r of releases) r();
  t.strictSame(gate.load('a'), { inFlight: 0, waiting: 0 }, 'an idle account leaves nothing behind');
});

t.test("another account's reads never wait behind a busy one", async (t) => {
  const gate = createObjectReadGate(1_000);
  const busy = await gate.acquire('noisy', 1_000);
  let queued = false;
  void gate.acquire('noisy', 1_000).then(() => (queued = true));
  const other = await gate.acquire('quiet', 1_000);
  await settle();
  t.equal(queued, false, "the busy account's second read waits");
  other();
  busy();
  await settle();
  t.equal(queued, true);
});

t.test('a read larger than the bound goes when its account has nothing in flight, alone', async (t) => {
  const gate = createObjectReadGate(1_000);
  const big = await gate.acquire('a', 5_000);
  let small = false;
  void gate.acquire('a', 10).then(() => (small = true));
  await settle();
  t.equal(small, false, 'nothing joins an oversized read');
  big();
  await settle();
  t.equal(small, true);
});

t.test('order holds across thousands of grants while the queue never empties', async (t) => {
  const gate = createObjectReadGate(1);
  const granted: number[] = [];
  const waiting: Promise<Release>[] = [];
  const enqueue = (i: number) => waiting.push(gate.acquire('a', 1).then((r) => (granted.push(i), r)));
  let held = await gate.acquire('a', 1);
  for (let i = 0; i < 3; i++) enqueue(i);
  // Each round: the one in flight finishes, the next goes, one more joins: 3 always wait.
  for (let i = 3; i < 3_003; i++) {
    held();
    held = await waiting.shift()!;
    enqueue(i);
  }
  t.strictSame(gate.load('a'), { inFlight: 1, waiting: 3 }, 'three waiting at the end, as all along');
  t.strictSame(
    granted,
    Array.from({ length: 3_000 }, (_, i) => i),
    'granted first come, first served',
  );
  held();
  for (const w of waiting) (await w)();
  t.strictSame(gate.load('a'), { inFlight: 0, waiting: 0 });
});
