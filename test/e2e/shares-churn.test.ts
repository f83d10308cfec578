// SPEC §13 "Redis memory per share ≤ 300 B" under create/revoke churn. Before, revoking gave the count and
// bytes quota back but kept the record (files JSON included) and its index field: with
// shares.max_per_account 5, 200 create/revoke cycles all succeeded and Redis grew by 201 keys and
// 13,731 bytes per revoked share, without bound (a full Redis under noeviction refuses every hold: 503 for
// every tenant). Now a revoke leaves a tombstone (account, created_at, revoked_at) that answers 410 for
// shares.revoked_retention_seconds, an account remembers at most shares.max_revoked_per_account of them,
// the index field goes, and the snapshot object is deleted.
import t from 'tap';
import { HeadObjectCommand } from '@aws-sdk/client-s3';
import { startRedis } from '../helpers/redis.ts';
import { startGateway } from '../helpers/gateway.ts';
import { sharesS3Config, startS3, testS3Client } from '../helpers/s3.ts';

const KEEP = 20;
const redis = await startRedis(t);
if (redis) {
  const s3 = await startS3(t);
  const client = testS3Client(s3);
  const gw = await startGateway(t, {
    redisUrl: redis.url,
    config: {
      shares: {
        max_per_account: 5,
        create_per_minute: 100_000,
        max_revoked_per_account: KEEP,
        janitor_interval_ms: 3_600_000,
        s3: sharesS3Config(s3),
      },
    },
  });

  t.test('create + revoke in a loop: Redis stays bounded, recent revokes answer 410', async (t) => {
    const { key } = await gw.createKey({ account: 'churn', env: 'live' });
    await gw.grant('churn', 1);
    // As the audit's: 20 files whose names and types are as long as allowed (user text the record used to keep).
    const files = Array.from({ length: 20 }, (_, i) => ({
      name: `${String(i).padStart(2, '0')}-${'n'.repeat(250)}`,
      content_type: `application/${'x'.repeat(243)}`,
      size: 0,
    }));
    const body = JSON.stringify({ snapshot: { messages: [{ role: 'user', content: 'hi' }] }, files });
    const mem = async () => Number(/used_memory:(\d+)/.exec(await redis.client.info('memory'))![1]);
    const cycle = async () => {
      const r = await fetch(`${gw.url}/v1/shares`, {
        method: 'POST',
        headers: { ...gw.auth(key), 'content-type': 'application/json' },
        body,
      });
      const j = (await r.json()) as { slug: string };
      if (r.status !== 201) throw new Error(`create: ${r.status} ${JSON.stringify(j)}`);
      const d = await fetch(`${gw.url}/v1/shares/${j.slug}`, { method: 'DELETE', headers: gw.auth(key) });
      if (d.status !== 204) throw new Error(`revoke: ${d.status}`);
      return j.slug;
    };
    // Past the remembered revoked shares once, so the baseline has the account's steady keys.
    const slugs: string[] = [];
    for (let i = 0; i < KEEP + 5; i++) slugs.push(await cycle());
    const keys0 = await redis.client.dbsize();
    const mem0 = await mem();
    const N = 200;
    for (let i = 0; i < N; i++) slugs.push(await cycle());
    const keys1 = await redis.client.dbsize();
    const mem1 = await mem();
    t.comment(`after ${N} more cycles: Redis keys ${keys0} → ${keys1}, used_memory ${mem0} → ${mem1} (${mem1 - mem0} B)`);
    t.ok(keys1 - keys0 <= 2, `no key per revoked share past the ${KEEP} remembered (${keys1 - keys0} more)`);
    // The audit measured +2,746,248 B for 200 cycles; a few KB of allocator noise is all that may remain.
    t.ok(mem1 - mem0 < 32 * 1024, `used_memory grew ${mem1 - mem0} B over ${N} cycles (was 13,731 B per cycle)`);
    t.equal(await redis.client.hlen('{acct:churn}:shares'), 2, 'the quota hash holds its totals only, no field per revoked share');
    t.equal(await redis.client.zcard('{acct:churn}:shares-revoked'), KEEP, `${KEEP} revoked shares remembered`);

    const newest = slugs[slugs.length - 1]!;
    const record = await redis.client.hgetall(`tg:share:${newest}`);
    t.same(Object.keys(record).sort(), ['a', 'c', 'r'], 'a revoked record is a tombstone: account, created_at, revoked_at');
    t.ok((await redis.client.pttl(`tg:share:${newest}`)) > 0, 'which expires (shares.revoked_retention_seconds)');
    const usage = Number(await redis.client.call('MEMORY', 'USAGE', `tg:share:${newest}`));
    t.ok(usage < 300, `a tombstone takes ${usage} B (MEMORY USAGE)`);

    const read = async (slug: string) => (await fetch(`${gw.url}/v1/shares/${slug}`)).status;
    t.equal(await read(newest), 410, 'the latest revoked share answers 410');
    t.equal(await read(slugs[slugs.length - KEEP]!), 410, `so does the ${KEEP}th latest`);
    t.equal(
      (await redis.client.exists(`tg:share:${slugs[0]}`)) + (await redis.client.exists(`tg:share:${slugs[100]}`)),
      0,
      'older tombstones are deleted',
    );

    const head = (slug: string) =>
      client.send(new HeadObjectCommand({ Bucket: s3.bucket, Key: `shares/${slug}/snapshot.json` })).then(
        () => 200,
        (e: { $metadata?: { httpStatusCode?: number } }) => e.$metadata?.httpStatusCode ?? 0,
      );
    t.same([await head(newest), await head(slugs[0]!)], [404, 404], 'revoked snapshot objects are deleted from the bucket');
    t.equal(await redis.client.zcard('tg:share-pending'), 0, 'no revoke left work for the orphan sweep');

    // The quota counts live shares only: five live fit, the sixth does not.
    for (let i = 0; i < 5; i++) {
      const r = await fetch(`${gw.url}/v1/shares`, {
        method: 'POST',
        headers: { ...gw.auth(key), 'content-type': 'application/json' },
        body,
      });
      t.equal(r.status, 201, `live share ${i + 1} of 5`);
      await r.arrayBuffer();
    }
    const over = await fetch(`${gw.url}/v1/shares`, {
      method: 'POST',
      headers: { ...gw.auth(key), 'content-type': 'application/json' },
      body,
    });
    t.equal(over.status, 429, 'the sixth live share is over shares.max_per_account');
    await over.arrayBuffer();
  });
}
