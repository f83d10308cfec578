// Hold bucket arithmetic (docs/ledger.md): which bucket a hold belongs to, and how large buckets are.
import t from 'tap';
import { bucketDue, bucketMsFor, settleBucketDue } from '../../src/store/hold-bucket.ts';

t.test('a bucket is due at the end of the span its expiry falls in, the end included', async (t) => {
  t.equal(bucketDue(1000, 1000), 1000, 'an expiry on the boundary is due then, not a bucket later');
  t.equal(bucketDue(1001, 1000), 2000);
  t.equal(bucketDue(19_999, 10_000), 20_000);
  t.equal(bucketDue(20_001, 10_000), 30_000);
});

t.test('bucket size: a 60th of the hold TTL in whole seconds, between 1 s and 10 s', async (t) => {
  t.equal(bucketMsFor(660_000), 10_000, 'the default TTL (600 s upstream timeout + 60 s margin)');
  t.equal(bucketMsFor(300_000), 5_000);
  t.equal(bucketMsFor(60_000), 1_000);
  t.equal(bucketMsFor(800), 1_000, 'never below 1 s');
  t.equal(bucketMsFor(86_400_000), 10_000, 'never above 10 s');
});

t.test('a settle finds the bucket of the expiry it names, else one fixed by its own ts', async (t) => {
  t.equal(settleBucketDue({ holdExpiresAtMs: 12_345, ts: '2026-11-22T10:00:00.000Z' }, 60_000, 1000), 13_000);
  const ts = '2026-11-22T10:00:00.500Z';
  t.equal(settleBucketDue({ ts }, 60_000, 1000), Date.parse(ts) + 60_500, 'ts + TTL, rounded up to the bucket');
  t.equal(settleBucketDue({ ts }, 60_000, 1000), settleBucketDue({ ts }, 60_000, 1000), 'the same for every repeat');
});

t.test("a settle that carries its hold bucket looks there, whatever this process's bucket size", async (t) => {
  const ts = '2026-11-22T10:00:00.000Z';
  // Held at a 10 s bucket size (660 s TTL), applied by a process at 6 s (360 s TTL).
  t.equal(settleBucketDue({ holdBucketDue: 20_000, holdExpiresAtMs: 12_345, ts }, 360_000, 6000), 20_000, 'the carried due time');
  t.equal(settleBucketDue({ holdExpiresAtMs: 12_345, ts }, 360_000, 6000), 18_000, 'without it (an older spool line): this size');
  // A spool line is not type-checked: a carried value that is not a positive whole number is ignored.
  for (const bad of [0, -10_000, 1.5, Number.NaN, '20000' as unknown as number])
    t.equal(settleBucketDue({ holdBucketDue: bad, holdExpiresAtMs: 12_345, ts }, 360_000, 6000), 18_000, `ignored: ${String(bad)}`);
});
