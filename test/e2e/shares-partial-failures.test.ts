// Shares whose create or revoke fails half-way (docs/shares.md "Revoke", "Storage"): the intent comes
// first, so the orphan sweep finishes whatever a failed request left behind, and the quota never drifts.
//
// A revoke whose tombstone is written, then whose account's quota release fails. Redis here refuses the account's keys by ACL, a stand-in for the account's slot on
// a Cluster node that is down while the share's is up, or a command that timed out. The share must
// still answer 410 on every instance within 1 s (the store says revoked), and the orphan sweep must
// give its quota back and delete its snapshot object, whether or not the caller retries. Before: every
// instance served it as live until its cache TTL, and the quota and the object stayed for good.
import t from 'tap';
import { HeadObjectCommand } from '@aws-sdk/client-s3';
import { startGateway } from '../helpers/gateway.ts';
import { startRedis } from '../helpers/redis.ts';
import { sharesS3Config, startS3, testS3Client } from '../helpers/s3.ts';
import { waitFor } from '../helpers/wait.ts';
import { createRedisStore } from '../../src/store/redis-store.ts';
import type { Store } from '../../src/store/types.ts';
import { GatewayError } from '../../src/http/errors.ts';

// A server of its own (restartable: never a shared REDIS_URL): the test changes its ACL.
const redis = await startRedis(t, { restartable: true });
if (redis) {
  const s3 = await startS3(t);
  const config = {
    store: { command_timeout_ms: 3_000 },
    // The cache TTL far above the 1 s bound: only the invalidation can turn B to 410 in time.
    // A sweep takes the oldest 3 intents (the batch), so a few failing intents can fill it. Only the
    // sweeper sweeps (below).
    shares: { s3: sharesS3Config(s3), cache_ttl_ms: 60_000, janitor_interval_ms: 3_600_000, migrate_batch: 3 },
  };
  const a = await startGateway(t, { redisUrl: redis.url, config });
  const b = await startGateway(t, { redisUrl: redis.url, config });
  // The sweep's grace (shares.orphan_grace_seconds, 300 s here) cannot be shorter than a create may take
  // (docs/shares.md "Storage"): intents are aged by this instance's clock instead, moved past the grace
  // once a test has left its intents behind, and back at the end of each test.
  const clock = { ahead: 0 };
  const GRACE_MS = 300_000;
  await startGateway(t, {
    redisUrl: redis.url,
    config: { ...config, shares: { ...config.shares, janitor_interval_ms: 50 } },
    now: () => Date.now() + clock.ahead,
  });
  t.beforeEach(() => {
    clock.ahead = 0;
  });
  const { key } = await a.createKey({ account: 'acme', env: 'live' });
  const status = async (url: string) => (await fetch(url)).status;

  t.test('a revoke whose quota release fails: 410 everywhere within 1 s, quota and object cleaned by the sweep', async (t) => {
    const created = await fetch(`${a.url}/v1/shares`, {
      method: 'POST',
      headers: { ...a.auth(key), 'content-type': 'application/json' },
      body: '{"snapshot":{"messages":[{"role":"user","content":"hi"}]}}',
    });
    t.equal(created.status, 201);
    const { slug } = (await created.json()) as { slug: string };
    t.equal(await status(`${b.url}/v1/shares/${slug}`), 200, 'cached as live on B');
    t.equal(await redis.client.hget('{acct:acme}:shares', 'count'), '1');

    // The gateway's user may touch tg:* keys only: the tombstone is written, the account's quota is not.
    await redis.client.call('ACL', 'SETUSER', 'default', 'resetkeys', '~tg:*');
    try {
      const del = await fetch(`${a.url}/v1/shares/${slug}`, { method: 'DELETE', headers: a.auth(key) });
      t.equal(del.status, 503, 'the failure is reported');
      t.equal((await redis.client.hgetall(`tg:share:${slug}`)).r !== undefined, true, 'the record is a tombstone');
    } finally {
      await redis.client.call('ACL', 'SETUSER', 'default', 'allkeys');
    }
    // Within 1 s by the docs; 3 s of slack for a loaded box, far below the 60 s cache TTL.
    for (const gw of [a, b]) {
      await waitFor(async () => (await status(`${gw.url}/v1/shares/${slug}`)) === 410, 3_000, `410 from ${gw === a ? 'A' : 'B'}`);
    }

    // Nobody retries the DELETE: the sweep finishes the revoke (its intent aged past the grace).
    clock.ahead = GRACE_MS + 1_000;
    const objectThere = () =>
      testS3Client(s3)
        .send(new HeadObjectCommand({ Bucket: s3.bucket, Key: `shares/${slug}/snapshot.json` }))
        .then(
          () => true,
          () => false,
        );
    await waitFor(
      async () => (await redis.client.hget('{acct:acme}:shares', 'count')) === '0' && !(await objectThere()),
      15_000,
      'the sweep',
      50,
    );
    t.same(await redis.client.hgetall('{acct:acme}:shares'), { count: '0', bytes: '0' }, 'the quota given back');
    t.equal(await objectThere(), false, 'the snapshot object deleted');
    t.same(await redis.client.zrange('{acct:acme}:shares-revoked', '0', '-1'), [slug], 'remembered as revoked');
    await waitFor(async () => (await redis.client.zcard('tg:share-pending')) === 0, 5_000, 'the intent cleared', 50);
    t.equal(await status(`${a.url}/v1/shares/${slug}`), 410);
  });

  // Redis goes away right after a create's quota was reserved (an outage that starts mid-request): every
  // later store call of the create fails, its cleanup included. Before, the quota was reserved before the
  // intent was written: neither the intent nor the release got through, nothing told the sweep, and the
  // account's count and bytes kept the share that was never stored, for good.
  t.test('Redis lost right after the quota reserve: the sweep gives the quota back', async (t) => {
    const inner = await createRedisStore({ url: redis.url, commandTimeoutMs: 3_000, settledTtlSeconds: 60 });
    t.teardown(() => inner.close());
    let down = false;
    let reserved: string | undefined;
    const unavailable = () => new GatewayError('store_unavailable', 'Connection is closed.');
    const store: Store = {
      ...inner,
      async reserveShareQuota(account, slug, ...rest) {
        const r = await inner.reserveShareQuota(account, slug, ...rest);
        reserved = slug;
        down = true;
        return r;
      },
      async markSharePending(p, at) {
        if (down) throw unavailable();
        return inner.markSharePending(p, at);
      },
      async clearSharePending(p) {
        if (down) throw unavailable();
        return inner.clearSharePending(p);
      },
      async releaseShareQuota(...args) {
        if (down) throw unavailable();
        return inner.releaseShareQuota(...args);
      },
      async putShare(r) {
        if (down) throw unavailable();
        return inner.putShare(r);
      },
      async getShare(slug) {
        if (down) throw unavailable();
        return inner.getShare(slug);
      },
    };
    const c = await startGateway(t, { store, config: { ...config, shares: { ...config.shares, janitor_interval_ms: 3_600_000 } } });
    const { key: k } = await c.createKey({ account: 'outage', env: 'live' });
    const res = await fetch(`${c.url}/v1/shares`, {
      method: 'POST',
      headers: { ...c.auth(k), 'content-type': 'application/json' },
      body: '{"snapshot":{"messages":[{"role":"user","content":"hi"}]}}',
    });
    t.equal(res.status, 503);
    t.ok(reserved, 'the quota was reserved');
    t.equal(await redis.client.hget('{acct:outage}:shares', 'count'), '1', 'and is still held when Redis comes back');
    down = false;
    clock.ahead = GRACE_MS + 1_000;
    await waitFor(
      async () =>
        (await redis.client.hget('{acct:outage}:shares', 'count')) === '0' && (await redis.client.zcard('tg:share-pending')) === 0,
      15_000,
      'the sweep',
      50,
    );
    t.same(await redis.client.hgetall('{acct:outage}:shares'), { count: '0', bytes: '0' }, 'the quota given back');
    const there = await testS3Client(s3)
      .send(new HeadObjectCommand({ Bucket: s3.bucket, Key: `shares/${reserved}/snapshot.json` }))
      .then(
        () => true,
        () => false,
      );
    t.equal(there, false, 'no snapshot object left behind');
  });

  // One account whose slot stays unreachable (a Cluster node down) must not hold up every other account's
  // cleanup: intents are swept oldest first, and before, the first one that failed ended the whole sweep,
  // tick after tick.
  t.test("an intent that cannot be swept does not block the others'", async (t) => {
    const { key: badKey } = await a.createKey({ account: 'stuck', env: 'live' });
    const { key: goodKey } = await a.createKey({ account: 'fine', env: 'live' });
    const publish = async (k: string) => {
      const res = await fetch(`${a.url}/v1/shares`, {
        method: 'POST',
        headers: { ...a.auth(k), 'content-type': 'application/json' },
        body: '{"snapshot":{"messages":[{}]}}',
      });
      return ((await res.json()) as { slug: string }).slug;
    };
    const [bad, good] = [await publish(badKey), await publish(goodKey)];
    try {
      // No account slot reachable: both revokes stop after their tombstone, the older intent is 'stuck''s.
      await redis.client.call('ACL', 'SETUSER', 'default', 'resetkeys', '~tg:*');
      t.equal((await fetch(`${a.url}/v1/shares/${bad}`, { method: 'DELETE', headers: a.auth(badKey) })).status, 503);
      t.equal((await fetch(`${a.url}/v1/shares/${good}`, { method: 'DELETE', headers: a.auth(goodKey) })).status, 503);
      // 'fine''s slot is back, 'stuck''s is not; both intents past the grace.
      await redis.client.call('ACL', 'SETUSER', 'default', 'resetkeys', '~tg:*', '~{acct:fine}*');
      clock.ahead = GRACE_MS + 1_000;
      await waitFor(async () => (await redis.client.hget('{acct:fine}:shares', 'count')) === '0', 10_000, "'fine' swept", 50);
      t.pass("'fine''s quota given back while 'stuck''s slot is unreachable");
    } finally {
      await redis.client.call('ACL', 'SETUSER', 'default', 'allkeys');
    }
    // 'stuck''s intent was put off (due again a minute later): past that too.
    clock.ahead = GRACE_MS + 62_000;
    await waitFor(async () => (await redis.client.hget('{acct:stuck}:shares', 'count')) === '0', 10_000, "'stuck' swept", 50);
    t.pass("and 'stuck''s once it is back");
  });

  // More failing intents than a sweep takes (shares.migrate_batch): before, a failing intent kept its
  // time, so the oldest `batch` intents, all of one account whose slot stayed down, filled every sweep
  // and no other account's intent was ever reached. A failed intent is now put off (its time moved on).
  t.test("more failing intents than a sweep's batch do not starve another account's", async (t) => {
    const slug = (i: number) => `Stuck${String(i).padStart(17, '1')}`.replace(/0/g, 'z');
    const stuck = [1, 2, 3, 4, 5].map((i) => slug(i) + 'stuck');
    const fine = slug(9).replace('Stuck', 'Finez') + 'fine';
    try {
      // 'stuck''s slot unreachable; its five intents older than 'fine''s one.
      await redis.client.call('ACL', 'SETUSER', 'default', 'resetkeys', '~tg:*', '~{acct:fine}*');
      await redis.client.zadd('tg:share-pending', ...stuck.flatMap((m, i) => [i + 1, m]), 100, fine);
      await waitFor(async () => (await redis.client.zscore('tg:share-pending', fine)) === null, 10_000, "'fine''s intent swept", 50);
      t.pass("'fine''s intent swept while 'stuck''s five fail");
      const scores = await Promise.all(stuck.map((m) => redis.client.zscore('tg:share-pending', m)));
      t.ok(
        scores.every((s) => s !== null && Number(s) > 100),
        `'stuck''s intents are still there, put off behind 'fine''s (${scores.join(', ')})`,
      );
    } finally {
      await redis.client.call('ACL', 'SETUSER', 'default', 'allkeys');
    }
    // Put off by a minute: the clock past that.
    clock.ahead = 62_000;
    await waitFor(async () => (await redis.client.zcard('tg:share-pending')) === 0, 10_000, "'stuck''s swept once its slot is back", 50);
    t.pass("and 'stuck''s once its slot is back");
  });
}
