// Snapshots in the object store, records in Redis (SPEC §1.4, §13; docs/shares.md "Storage"): the
// layout and its Redis cost, cold reads from S3, checksums, S3 outages, orphan objects, the unfunded
// quota, and the migration of shares stored by the previous layout (snapshot inside Redis).
import t from 'tap';
import { setTimeout as sleep } from 'node:timers/promises';
import { DeleteObjectCommand, GetObjectCommand, HeadObjectCommand, PutObjectCommand } from '@aws-sdk/client-s3';
import { startGateway, type TestGateway } from '../helpers/gateway.ts';
import { startRedis } from '../helpers/redis.ts';
import { sharesS3Config, startS3, testS3Client } from '../helpers/s3.ts';
import { createRedisStore } from '../../src/store/redis-store.ts';
import type { Store } from '../../src/store/types.ts';
import { GatewayError } from '../../src/http/errors.ts';
import { waitFor } from '../helpers/wait.ts';

const redis = await startRedis(t);
if (!redis) {
  t.comment('redis-server not available');
} else {
  const r = redis.client;
  const s3 = await startS3(t);
  const client = testS3Client(s3);
  const objectKey = (slug: string) => `shares/${slug}/snapshot.json`;
  const base = {
    store: { command_timeout_ms: 3_000 },
    shares: { s3: sharesS3Config(s3), max_snapshot_bytes: 1024 * 1024, create_per_minute: 100_000, janitor_interval_ms: 3_600_000 },
  };

  const publish = async (gw: TestGateway, key: string, body: string) => {
    const res = await fetch(`${gw.url}/v1/shares`, {
      method: 'POST',
      headers: { ...gw.auth(key), 'content-type': 'application/json' },
      body,
    });
    return { status: res.status, body: (await res.json()) as any };
  };
  const read = async (gw: TestGateway, slug: string) => {
    const res = await fetch(`${gw.url}/v1/shares/${slug}`);
    return { status: res.status, text: await res.text() };
  };
  const snapshotOf = (n: number, tag = 'x') => `{"title": "big", "messages": [{"role": "user", "content": "${tag.repeat(n)}"}]}`;
  const usedMemory = async () => Number(/used_memory:(\d+)/.exec(await r.info('memory'))![1]);

  const gw = await startGateway(t, { redisUrl: redis.url, config: base });
  const { key } = await gw.createKey({ account: 'funded', env: 'live' });
  await gw.grant('funded', 1_000_000);

  t.test('a 500 KB share: the snapshot is an object, the record a few hundred bytes; a cold instance reads it byte-exact', async (t) => {
    const snapshot = snapshotOf(500 * 1024);
    const created = await publish(gw, key, `{"snapshot": ${snapshot}}`);
    t.equal(created.status, 201);
    const slug = created.body.slug as string;
    const head = await client.send(new HeadObjectCommand({ Bucket: s3.bucket, Key: objectKey(slug) }));
    t.equal(head.ContentType, 'application/json');
    t.equal(head.ContentLength, Buffer.byteLength(snapshot));
    t.match(head.Metadata, { sha256: /^[0-9a-f]{64}$/ }, 'with the checksum the read verifies');
    const record = await r.hgetall(`tg:share:${slug}`);
    t.strictSame(Object.keys(record).sort(), ['a', 'b', 'c'], 'the record: owner, created_at, bytes');
    t.equal(record.b, String(Buffer.byteLength(snapshot)));
    const usage = Number(await r.memory('USAGE', `tg:share:${slug}`));
    t.ok(usage <= 300, `MEMORY USAGE of the record: ${usage} B`);

    const cold = await startGateway(t, { redisUrl: redis.url, config: base });
    const text = (await read(cold, slug)).text;
    t.ok(text.includes(`"snapshot":${snapshot},`), 'read back byte for byte from S3 after a restart (cold cache)');
  });

  t.test('Redis grows by records only: 60 shares of 50 KB cost < 300 B each', async (t) => {
    const { key: k } = await gw.createKey({ account: 'mem', env: 'live' });
    await gw.grant('mem', 1_000_000);
    await publish(gw, k, `{"snapshot": ${snapshotOf(10)}}`); // the account's index exists
    const before = await usedMemory();
    const n = 60;
    for (let i = 0; i < n; i++) t.equal((await publish(gw, k, `{"snapshot": ${snapshotOf(50 * 1024, String(i % 10))}}`)).status, 201);
    const per = ((await usedMemory()) - before) / n;
    t.ok(per < 300, `used_memory grew ${per.toFixed(0)} B per 50 KB share`);
  });

  t.test('a record whose object is missing or corrupt answers 503 store_unavailable (reported), never 500', async (t) => {
    const cold = await startGateway(t, { redisUrl: redis.url, config: base });
    const a = (await publish(gw, key, `{"snapshot": ${snapshotOf(100)}}`)).body.slug as string;
    const b = (await publish(gw, key, `{"snapshot": ${snapshotOf(100)}}`)).body.slug as string;
    // Overwritten out of band (same length, other bytes, no checksum), and deleted.
    await client.send(
      new PutObjectCommand({ Bucket: s3.bucket, Key: objectKey(a), Body: snapshotOf(100, 'y'), ContentType: 'application/json' }),
    );
    await client.send(new DeleteObjectCommand({ Bucket: s3.bucket, Key: objectKey(b) }));
    for (const slug of [a, b]) {
      const res = await read(cold, slug);
      t.equal(res.status, 503);
      t.equal(JSON.parse(res.text).error.code, 'store_unavailable');
    }
    t.ok(cold.logs.some((l) => l.includes('share record without a readable snapshot object') && l.includes('"checksum"')));
    t.ok(cold.logs.some((l) => l.includes('share record without a readable snapshot object') && l.includes('"missing"')));
    t.notOk(
      cold.logs.some((l) => l.includes(a) || l.includes(b)),
      'no whole slug in the log',
    );
    const metrics = await (await fetch(`${cold.adminUrl}/metrics`)).text();
    t.match(metrics, /tollgate_share_objects_total\{outcome="corrupt"\} 1/);
    t.match(metrics, /tollgate_share_objects_total\{outcome="missing"\} 1/);
  });

  t.test('S3 down: publish is 503 and stores nothing; cached reads keep working, uncached ones 503', async (t) => {
    const down = await startS3(t, 'other');
    const cfg = { ...base, shares: { ...base.shares, s3: sharesS3Config(down) } };
    const a = await startGateway(t, { redisUrl: redis.url, config: cfg });
    const { key: k } = await a.createKey({ account: 'outage', env: 'live' });
    await a.grant('outage', 1_000_000);
    const cached = (await publish(a, k, `{"snapshot": ${snapshotOf(10)}}`)).body.slug as string;
    const quotaBefore = await r.hgetall('{acct:outage}:shares');
    const recordsBefore = (await r.keys('tg:share:*')).length;
    await down.close();

    const refused = await publish(a, k, `{"snapshot": ${snapshotOf(10)}}`);
    t.equal(refused.status, 503);
    t.equal(refused.body.error.code, 'store_unavailable');
    t.strictSame(await r.hgetall('{acct:outage}:shares'), quotaBefore, 'nothing counted against the quota');
    t.equal((await r.keys('tg:share:*')).length, recordsBefore, 'no record without its object');
    // The upload's fate is unknown (S3 refused the delete too): its intent stays for the sweep, which
    // deletes whatever landed once S3 is back (tested below).
    t.ok((await r.zcard('tg:share-pending')) <= 1, 'at most the one intent');
    await r.del('tg:share-pending');

    t.equal((await read(a, cached)).status, 200, 'a cached share is still served');
    const b = await startGateway(t, { redisUrl: redis.url, config: cfg });
    const cold = await read(b, cached);
    t.equal(cold.status, 503, 'an uncached one is 503');
    t.equal(JSON.parse(cold.text).error.code, 'store_unavailable');
  });

  t.test('an orphan object (record write failed after the upload) is deleted, inline or by the sweep', async (t) => {
    const inner = await createRedisStore({ url: redis.url, commandTimeoutMs: 3_000, settledTtlSeconds: 60 });
    t.teardown(() => inner.close());
    const fail = { put: false, get: false };
    const attempted: string[] = [];
    const store: Store = {
      ...inner,
      async putShare(rec) {
        attempted.push(rec.slug);
        if (fail.put) throw new GatewayError('store_unavailable', 'OOM command not allowed when used memory > maxmemory');
        return inner.putShare(rec);
      },
      async getShare(slug) {
        if (fail.get) throw new GatewayError('store_unavailable', 'down');
        return inner.getShare(slug);
      },
    };
    const cfg = base;
    const g = await startGateway(t, { store, config: cfg });
    const { key: k } = await g.createKey({ account: 'orphans', env: 'live' });
    await g.grant('orphans', 1_000_000);
    const exists = (slug: string) =>
      client.send(new HeadObjectCommand({ Bucket: s3.bucket, Key: objectKey(slug) })).then(
        () => true,
        () => false,
      );

    fail.put = true;
    t.equal((await publish(g, k, `{"snapshot": ${snapshotOf(10)}}`)).status, 503, 'the record write fails');
    t.equal(attempted.length, 1);
    t.equal(await exists(attempted[0]!), false, 'the store answered that no record exists: the object is deleted at once');
    t.equal(await r.hget('{acct:orphans}:shares', 'count'), '0', 'and the quota given back');

    fail.get = true; // the store is down for the check too: the sweep decides later
    t.equal((await publish(g, k, `{"snapshot": ${snapshotOf(10)}}`)).status, 503);
    t.equal(await exists(attempted[1]!), true, 'the object is left for the sweep');
    t.equal(await r.zcard('tg:share-pending'), 1, 'with its intent');
    fail.put = false;
    fail.get = false;
    // Any instance sweeps: one with a short janitor tick, and a clock past the grace (300 s; it cannot be
    // shorter than a create may take), so the intent is due at once.
    await startGateway(t, {
      redisUrl: redis.url,
      config: { ...cfg, shares: { ...cfg.shares, janitor_interval_ms: 50 } },
      now: () => Date.now() + 301_000,
    });
    await waitFor(async () => (await r.zcard('tg:share-pending')) === 0, 10_000);
    t.equal(await exists(attempted[1]!), false, 'the sweep deleted the orphan object');
    t.equal(await r.hget('{acct:orphans}:shares', 'count'), '0', 'and gave its quota back once');
  });

  t.test('accounts never granted credit: shares.unfunded_max_per_account → 429 share_quota_exceeded', async (t) => {
    const g = await startGateway(t, { redisUrl: redis.url, config: { ...base, shares: { ...base.shares, unfunded_max_per_account: 2 } } });
    const { key: k } = await g.createKey({ account: 'free', env: 'test' });
    for (let i = 0; i < 2; i++) t.equal((await publish(g, k, `{"snapshot": ${snapshotOf(10)}}`)).status, 201);
    const over = await publish(g, k, `{"snapshot": ${snapshotOf(10)}}`);
    t.equal(over.status, 429);
    t.equal(over.body.error.code, 'share_quota_exceeded');
    t.match(over.body.error.message, /never granted credit/);
    await g.grant('free', 1);
    t.equal((await publish(g, k, `{"snapshot": ${snapshotOf(10)}}`)).status, 201, 'a granted account has the ordinary quota');
  });

  t.test('migration: shares of the previous layout move to S3 while readable, by two instances at once', async (t) => {
    // The previous layout, as main at 78dee2a wrote it: the snapshot in the record's hash, `s:<slug>` in
    // the quota hash and a creation-time list for the console.
    const ALPHABET = '123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz';
    const slugs = Array.from({ length: 30 }, (_, i) => `Mig${ALPHABET[i]!}`.padEnd(22, 'z'));
    const texts = new Map<string, string>();
    for (const [i, slug] of slugs.entries()) {
      const text = `{"messages": [{"content": "legacy ${i} ${'m'.repeat(20_000)}"}], "n": 1.0}`;
      texts.set(slug, text);
      await r.hset(`tg:share:${slug}`, {
        slug,
        account: 'legacy',
        created_at: new Date(Date.UTC(2026, 0, 1, 0, 0, i)).toISOString(),
        snapshot: text,
        files: '[]',
        revoked_at: i === 0 ? '2026-02-01T00:00:00.000Z' : '',
      });
      if (i > 0) await r.hset('{acct:legacy}:shares', `s:${slug}`, Buffer.byteLength(text));
      await r.zadd('{acct:legacy}:share-list', Date.UTC(2026, 0, 1, 0, 0, i), slug);
    }
    await r.hset(
      '{acct:legacy}:shares',
      'count',
      29,
      'bytes',
      [...texts.values()].slice(1).reduce((n, x) => n + Buffer.byteLength(x), 0),
    );
    await r.del('tg:share-migration', 'tg:share-migration:lease');
    const memBefore = await usedMemory();

    const cfg = { ...base, shares: { ...base.shares, janitor_interval_ms: 30, migrate_batch: 4, cache_ttl_ms: 1 } };
    const [m1, m2] = [
      await startGateway(t, { redisUrl: redis.url, config: cfg }),
      await startGateway(t, { redisUrl: redis.url, config: cfg }),
    ];
    const wrong: string[] = [];
    // Readable throughout: cold reads (1 ms cache) from both instances while the walk runs.
    for (let round = 0; round < 200; round++) {
      for (const [i, slug] of slugs.entries()) {
        if (round % 10 !== i % 10) continue;
        const res = await read(round % 2 ? m1 : m2, slug);
        if (i === 0 ? res.status !== 410 : res.status !== 200 || !res.text.includes(`"snapshot":${texts.get(slug)},`))
          wrong.push(`${slug} ${res.status}`);
      }
      if ((await r.hget('tg:share-migration', 'done')) === '1') break;
      await sleep(5);
    }
    await waitFor(async () => (await r.hget('tg:share-migration', 'done')) === '1', 20_000);
    t.strictSame(wrong, [], 'every read during the migration answered as before');
    for (const slug of slugs) {
      const h = await r.hgetall(`tg:share:${slug}`);
      t.notOk('snapshot' in h, `${slug}: the snapshot left Redis`);
      const o = await client.send(new GetObjectCommand({ Bucket: s3.bucket, Key: objectKey(slug) }));
      t.equal(await o.Body!.transformToString(), texts.get(slug), `${slug}: its object holds it byte for byte`);
    }
    t.equal((await r.hgetall(`tg:share:${slugs[0]}`)).r, '2026-02-01T00:00:00.000Z', 'the revoked share stays revoked');
    const freed = memBefore - (await usedMemory());
    t.ok(freed > 30 * 15_000, `Redis freed ${freed} B (30 snapshots of 20 KB)`);
    t.match(
      (await (await fetch(`${m1.adminUrl}/metrics`)).text()) + (await (await fetch(`${m2.adminUrl}/metrics`)).text()),
      /tollgate_share_objects_total\{outcome="migrated"\}/,
    );
    // The migrated shares behave as before: reads, revoke, the quota given back (the old field).
    const { key: lk } = await m1.createKey({ account: 'legacy', env: 'live' });
    const del = await fetch(`${m1.url}/v1/shares/${slugs[1]}`, { method: 'DELETE', headers: m1.auth(lk) });
    t.equal(del.status, 204);
    t.equal(await r.hget('{acct:legacy}:shares', 'count'), '28');
    await waitFor(async () => (await read(m2, slugs[1]!)).status === 410);
  });
}
