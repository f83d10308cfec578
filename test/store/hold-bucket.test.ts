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
  t.equal(settleBucketDue(12_345, '2026-11-22T10:00:00.000Z', 60_000, 1000), 13_000);
  const ts = '2026-11-22T10:00:00.500Z';
  t.equal(settleBucketDue(undefined, ts, 60_000, 1000), Date.parse(ts) + 60_500, 'ts + TTL, rounded up to the bucket');
  t.equal(settleBucketDue(undefined, ts, 60_000, 1000), settleBucketDue(undefined, ts, 60_000, 1000), 'the same for every repeat');
});
