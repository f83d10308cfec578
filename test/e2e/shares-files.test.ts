// A share's file list is user content (names up to 255 characters): it lives in the object store next to the
// snapshot (`shares/<slug>.files.json`), and the Redis record keeps only how many files there are (SPEC §13
// "Redis holds no user content … Redis memory per share ≤ 300 B whatever its size"; docs/shares.md
// "Storage"). Before, a share with 20 files of 255-character names took 12,640 B of Redis (MEMORY USAGE).
// Real Redis, the signature-checking S3 server, and a counting proxy in front of it (to see which objects a
// read fetches, and to refuse one kind of request).
import t, { type Test } from 'tap';
import { createServer, request } from 'node:http';
import type { AddressInfo } from 'node:net';
import { DeleteObjectCommand, GetObjectCommand, HeadObjectCommand } from '@aws-sdk/client-s3';
import { startGateway, type TestGateway } from '../helpers/gateway.ts';
import { startRedis } from '../helpers/redis.ts';
import { sharesS3Config, startS3, type TestS3, testS3Client } from '../helpers/s3.ts';
import { createRedisStore } from '../../src/store/redis-store.ts';
import type { Store } from '../../src/store/types.ts';
import { GatewayError } from '../../src/http/errors.ts';
import { shareRow } from '../../src/console/pages/shares.ts';
import { waitFor } from '../helpers/wait.ts';

/**
 * A pass-through HTTP proxy to the S3 server that logs `METHOD /path` (and, in `finished`, each request S3
 * has answered), and can answer 500 instead (`refuse`) or hold a request until a promise settles (`hold`).
 */
async function s3Proxy(t: Test, s3: TestS3) {
  const target = new URL(s3.endpoint);
  const seen: string[] = [];
  const finished: string[] = [];
  const refuse: { match: RegExp | undefined } = { match: undefined };
  const hold: { match: RegExp | undefined; until: Promise<unknown> } = { match: undefined, until: Promise.resolve() };
  const server = createServer((req, res) => {
    const line = `${req.method} ${decodeURIComponent(new URL(req.url!, 'http://x').pathname)}`;
    seen.push(line);
    if (refuse.match?.test(line)) {
      req.resume();
      res.writeHead(500, { 'content-type': 'application/xml' });
      res.end('<?xml version="1.0" encoding="UTF-8"?><Error><Code>InternalError</Code><Message>refused</Message></Error>');
      return;
    }
    // The Host header is passed as signed (the proxy's address): the server checks the signature against it.
    const forward = () => {
      const up = request({ host: target.hostname, port: target.port, method: req.method, path: req.url, headers: req.headers }, (r) => {
        res.writeHead(r.statusCode!, r.headers);
        r.on('end', () => finished.push(line));
        r.pipe(res);
      });
      up.on('error', () => res.destroy());
      req.pipe(up);
    };
    if (hold.match?.test(line)) void hold.until.finally(forward);
    else forward();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => {
    server.closeAllConnections();
    server.close();
  });
  return { endpoint: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, seen, finished, refuse, hold };
}

const redis = await startRedis(t);
if (!redis) {
  t.comment('redis-server not available');
} else {
  const r = redis.client;
  const s3 = await startS3(t);
  const proxy = await s3Proxy(t, s3);
  const client = testS3Client(s3);
  const snapshotKey = (slug: string) => `shares/${slug}/snapshot.json`;
  const filesKey = (slug: string) => `shares/${slug}.files.json`;
  const exists = (key: string) =>
    client.send(new HeadObjectCommand({ Bucket: s3.bucket, Key: key })).then(
      () => true,
      () => false,
    );
  const base = {
    store: { command_timeout_ms: 3_000 },
    shares: {
      s3: { ...sharesS3Config(s3), endpoint: proxy.endpoint },
      create_per_minute: 100_000,
      janitor_interval_ms: 3_600_000,
      max_files: 20,
    },
  };

  // 20 files of 255-character names (the most a share may declare), long content types.
  const FILES = Array.from({ length: 20 }, (_, i) => ({
    name: `${String(i).padStart(2, '0')}-${'n'.repeat(248)}.bin`,
    content_type: `application/vnd.tollgate.test-${i}-${'t'.repeat(60)}`,
    size: 1000 + i,
  }));
  const SNAPSHOT = '{"title": "files", "messages": [{"role": "user", "content": "see attached"}], "n": 1.0}';
  const body = (files = FILES) => `{"snapshot": ${SNAPSHOT}, "files": ${JSON.stringify(files)}}`;

  const publish = async (gw: TestGateway, key: string, text: string) => {
    const res = await fetch(`${gw.url}/v1/shares`, {
      method: 'POST',
      headers: { ...gw.auth(key), 'content-type': 'application/json' },
      body: text,
    });
    return { status: res.status, body: (await res.json()) as any };
  };
  const read = async (gw: TestGateway, slug: string) => {
    const res = await fetch(`${gw.url}/v1/shares/${slug}`);
    return { status: res.status, text: await res.text() };
  };
  /** The read body with each signed link replaced: what must be identical whichever instance answers. */
  const unsigned = (text: string) => text.replace(/"url":"[^"]*","expires_at":"[^"]*"/g, '"url":"…","expires_at":"…"');

  const gw = await startGateway(t, { redisUrl: redis.url, config: base });
  const { key } = await gw.createKey({ account: 'files', env: 'live' });
  await gw.grant('files', 1_000_000);

  t.test('20 files of 255-character names: the record holds their count only, ≤ 300 B; the list is an object', async (t) => {
    t.ok(
      FILES.every((f) => Buffer.byteLength(f.name) === 255),
      'names of 255 characters',
    );
    const created = await publish(gw, key, body());
    t.equal(created.status, 201);
    const slug = created.body.slug as string;
    t.equal(created.body.uploads.length, 20);

    const record = await r.hgetall(`tg:share:${slug}`);
    t.strictSame(Object.keys(record).sort(), ['a', 'b', 'c', 'n'], 'owner, created_at, snapshot bytes, number of files');
    t.equal(record.n, '20');
    const raw = Object.values(record).join('\n');
    t.notOk(
      FILES.some((f) => raw.includes(f.name.slice(0, 20)) || raw.includes(f.content_type)),
      'no file name or content type in Redis',
    );
    const usage = Number(await r.memory('USAGE', `tg:share:${slug}`));
    t.ok(usage <= 300, `MEMORY USAGE of the record: ${usage} B (was 12,640 B)`);

    // The console's list shows the number of files from the record alone.
    const store = await createRedisStore({ url: redis.url, commandTimeoutMs: 3_000, settledTtlSeconds: 60 });
    t.teardown(() => store.close());
    t.match(String(shareRow('files', (await store.getShare(slug))!)), /<td class="hide-sm num">20<\/td>/, 'the console counts 20 files');

    const list = await client.send(new GetObjectCommand({ Bucket: s3.bucket, Key: filesKey(slug) }));
    t.equal(list.ContentType, 'application/json');
    t.match(list.Metadata, { sha256: /^[0-9a-f]{64}$/ }, 'with the checksum a read verifies');
    t.strictSame(JSON.parse(await list.Body!.transformToString()), FILES, 'the list, in order');
    t.ok(await exists(snapshotKey(slug)), 'beside the snapshot');
  });

  t.test('a cold read fetches snapshot and list once however many readers wait; a hit fetches nothing; same body', async (t) => {
    const slug = (await publish(gw, key, body())).body.slug as string;
    const warm = await read(gw, slug); // served from the creating instance's cache
    t.equal(warm.status, 200);
    t.same(
      JSON.parse(warm.text).files.map((f: any) => ({ name: f.name, content_type: f.content_type, size: f.size })),
      FILES,
    );

    const cold = await startGateway(t, { redisUrl: redis.url, config: base });
    const from = proxy.seen.length;
    const answers = await Promise.all(Array.from({ length: 20 }, () => read(cold, slug)));
    t.strictSame(
      answers.map((a) => a.status),
      Array(20).fill(200),
    );
    for (const a of answers) t.equal(unsigned(a.text), unsigned(warm.text), 'byte for byte the body of the creating instance');
    const gets = proxy.seen.slice(from).filter((l) => l.startsWith('GET '));
    t.strictSame(gets.sort(), [`GET /${s3.bucket}/${filesKey(slug)}`, `GET /${s3.bucket}/${snapshotKey(slug)}`].sort(), 'one GET of each');

    const before = proxy.seen.length;
    for (let i = 0; i < 5; i++) t.equal(unsigned((await read(cold, slug)).text), unsigned(warm.text));
    t.strictSame(proxy.seen.slice(before), [], 'cache hits make no S3 request');

    // The cached entry holds the list: gone from the bucket, a hit still serves it; a cold instance cannot.
    await client.send(new DeleteObjectCommand({ Bucket: s3.bucket, Key: filesKey(slug) }));
    t.equal((await read(cold, slug)).status, 200, 'a hit needs no object');
    const other = await startGateway(t, { redisUrl: redis.url, config: base });
    const missing = await read(other, slug);
    t.equal(missing.status, 503, 'a record whose list object is missing answers 503, as for a missing snapshot');
    t.equal(JSON.parse(missing.text).error.code, 'store_unavailable');
    t.match(await (await fetch(`${other.adminUrl}/metrics`)).text(), /tollgate_share_objects_total\{outcome="missing"\} 1/);
  });

  t.test('a share without files has no list object and no count; its read fetches only the snapshot', async (t) => {
    const slug = (await publish(gw, key, `{"snapshot": ${SNAPSHOT}}`)).body.slug as string;
    t.strictSame(Object.keys(await r.hgetall(`tg:share:${slug}`)).sort(), ['a', 'b', 'c']);
    t.notOk(await exists(filesKey(slug)));
    const cold = await startGateway(t, { redisUrl: redis.url, config: base });
    const from = proxy.seen.length;
    const res = await read(cold, slug);
    t.equal(res.status, 200);
    t.ok(res.text.endsWith(`"snapshot":${SNAPSHOT},"files":[]}`));
    t.strictSame(
      proxy.seen.slice(from).filter((l) => l.startsWith('GET ')),
      [`GET /${s3.bucket}/${snapshotKey(slug)}`],
    );
  });

  t.test('S3 refuses the list at create: 503, and nothing stays (record, quota, snapshot, intent)', async (t) => {
    const quotaBefore = await r.hgetall('{acct:files}:shares');
    const recordsBefore = (await r.keys('tg:share:*')).length;
    const from = proxy.seen.length;
    proxy.refuse.match = /^PUT .*\.files\.json$/;
    t.teardown(() => (proxy.refuse.match = undefined));
    const refused = await publish(gw, key, body());
    proxy.refuse.match = undefined;
    t.equal(refused.status, 503);
    t.equal(refused.body.error.code, 'store_unavailable');
    t.strictSame(await r.hgetall('{acct:files}:shares'), quotaBefore, 'nothing counted against the quota');
    t.equal((await r.keys('tg:share:*')).length, recordsBefore, 'no record');
    const put = proxy.seen.slice(from).find((l) => l.startsWith('PUT ') && l.endsWith('/snapshot.json'));
    t.ok(put, 'the snapshot was written');
    t.notOk(await exists(put!.slice(`PUT /${s3.bucket}/`.length)), 'and deleted again');
    t.equal(await r.zcard('tg:share-pending'), 0, 'the intent cleared');
  });

  t.test('the snapshot refused while the list is still being written: the list does not stay behind', async (t) => {
    // The list's PUT is held until the create has answered (or 3 s at most); the snapshot's PUT is refused.
    // A create that cleaned up as soon as the first write failed deleted the list before it landed.
    const from = proxy.seen.length;
    let answered: () => void = () => {};
    const released = new Promise<void>((resolve) => {
      answered = resolve;
      setTimeout(resolve, 3_000).unref();
    });
    proxy.refuse.match = /^PUT .*\/snapshot\.json$/;
    proxy.hold.match = /^PUT .*\.files\.json$/;
    proxy.hold.until = released;
    t.teardown(() => {
      proxy.refuse.match = undefined;
      proxy.hold.match = undefined;
    });
    const refused = await publish(gw, key, body());
    answered();
    t.equal(refused.status, 503);
    const put = proxy.seen.slice(from).find((l) => l.startsWith('PUT ') && l.endsWith('.files.json'))!;
    t.ok(put, 'the list was being written');
    await waitFor(() => proxy.finished.includes(put), 10_000, 'the held PUT to land');
    t.notOk(await exists(put.slice(`PUT /${s3.bucket}/`.length)), 'no list object without a share');
    t.equal(await r.zcard('tg:share-pending'), 0, 'the intent cleared');
  });

  t.test('revoke deletes the list with the snapshot; a failed create leaves both to the sweep', async (t) => {
    const slug = (await publish(gw, key, body())).body.slug as string;
    t.ok(await exists(filesKey(slug)));
    const del = await fetch(`${gw.url}/v1/shares/${slug}`, { method: 'DELETE', headers: gw.auth(key) });
    t.equal(del.status, 204);
    t.notOk(await exists(filesKey(slug)), 'the list object is deleted at the revoke');
    t.notOk(await exists(snapshotKey(slug)), 'with the snapshot');
    t.equal((await read(gw, slug)).status, 410);

    // The record write fails and the store is down for the check: both objects stay, with the intent.
    const inner = await createRedisStore({ url: redis.url, commandTimeoutMs: 3_000, settledTtlSeconds: 60 });
    t.teardown(() => inner.close());
    const attempted: string[] = [];
    const store: Store = {
      ...inner,
      async putShare(rec) {
        attempted.push(rec.slug);
        throw new GatewayError('store_unavailable', 'OOM command not allowed when used memory > maxmemory');
      },
      async getShare() {
        throw new GatewayError('store_unavailable', 'down');
      },
    };
    const cfg = base;
    const g = await startGateway(t, { store, config: cfg });
    const { key: k } = await g.createKey({ account: 'orphan-files', env: 'live' });
    await g.grant('orphan-files', 1_000_000);
    t.equal((await publish(g, k, body())).status, 503);
    const orphan = attempted[0]!;
    t.ok(await exists(filesKey(orphan)), 'the list object is left for the sweep');
    t.ok(await exists(snapshotKey(orphan)), 'as is the snapshot');
    // A sweeper whose clock is past the grace (300 s; it cannot be shorter than a create may take).
    await startGateway(t, {
      redisUrl: redis.url,
      config: { ...cfg, shares: { ...cfg.shares, janitor_interval_ms: 50 } },
      now: () => Date.now() + 301_000,
    });
    await waitFor(async () => (await r.zcard('tg:share-pending')) === 0, 10_000, 'the sweep');
    t.notOk(await exists(filesKey(orphan)), 'the sweep deleted the list object');
    t.notOk(await exists(snapshotKey(orphan)), 'and the snapshot');
    t.equal(await r.hget('{acct:orphan-files}:shares', 'count'), '0', 'and gave the quota back');
  });

  t.test('records that carry the list (`f`) are read as they are, then moved out by the migration', async (t) => {
    // The layout before this one: the compact record with the files JSON in `f`, the snapshot an object.
    // Written by the gateway itself (with its list) and then rewritten the old way, so its snapshot object
    // and quota are real.
    const made = await Promise.all(Array.from({ length: 6 }, () => publish(gw, key, body())));
    const slugs = made.map((m) => m.body.slug as string);
    for (const slug of slugs) {
      await r.hdel(`tg:share:${slug}`, 'n');
      await r.hset(`tg:share:${slug}`, 'f', JSON.stringify(FILES));
      await client.send(new DeleteObjectCommand({ Bucket: s3.bucket, Key: filesKey(slug) }));
    }
    const revoked = slugs[5]!;
    await r.hset(`tg:share:${revoked}`, 'r', '2026-02-01T00:00:00.000Z');
    const oldUsage = Number(await r.memory('USAGE', `tg:share:${slugs[0]}`));
    t.ok(oldUsage > 5_000, `an old record with 20 long names: ${oldUsage} B`);

    const reader = await startGateway(t, { redisUrl: redis.url, config: base });
    const before = new Map<string, string>();
    for (const slug of slugs.slice(0, 5)) {
      const res = await read(reader, slug);
      t.equal(res.status, 200, 'an old record reads from `f`');
      t.same(
        JSON.parse(res.text).files.map((f: any) => f.name),
        FILES.map((f) => f.name),
      );
      before.set(slug, unsigned(res.text));
    }

    // And one record of the layout before both (snapshot and files JSON in the hash).
    const oldest = 'Fi1es'.padEnd(22, 'z');
    await r.hset(`tg:share:${oldest}`, {
      slug: oldest,
      account: 'files',
      created_at: '2026-01-01T00:00:00.000Z',
      snapshot: SNAPSHOT,
      files: JSON.stringify(FILES.slice(0, 2)),
      revoked_at: '',
    });
    const oldBefore = unsigned((await read(reader, oldest)).text);
    t.same(
      JSON.parse(oldBefore).files.map((f: any) => f.name),
      FILES.slice(0, 2).map((f) => f.name),
    );

    // A deployment whose snapshot migration was over walks once more, for the lists.
    await r.del('tg:share-migration:lease');
    await r.hset('tg:share-migration', { cursor: '', moved: 0, done: '1' });
    await r.hdel('tg:share-migration', 'files');
    const cfg = { ...base, shares: { ...base.shares, janitor_interval_ms: 30, migrate_batch: 4 } };
    const m = await startGateway(t, { redisUrl: redis.url, config: cfg });
    await waitFor(async () => (await r.hget('tg:share-migration', 'files')) === '1', 20_000, 'the migration');
    for (const slug of slugs) {
      const h = await r.hgetall(`tg:share:${slug}`);
      t.notOk('f' in h, `${slug}: the list left Redis`);
      t.equal(h.n, '20');
      const usage = Number(await r.memory('USAGE', `tg:share:${slug}`));
      t.ok(usage <= 300, `${slug}: MEMORY USAGE ${usage} B`);
      const o = await client.send(new GetObjectCommand({ Bucket: s3.bucket, Key: filesKey(slug) }));
      t.strictSame(JSON.parse(await o.Body!.transformToString()), FILES, `${slug}: its list object`);
    }
    t.equal((await r.hgetall(`tg:share:${revoked}`)).r, '2026-02-01T00:00:00.000Z', 'the revoked share stays revoked');
    t.strictSame(Object.keys(await r.hgetall(`tg:share:${oldest}`)).sort(), ['a', 'b', 'c', 'n'], 'the oldest layout, compacted');
    t.equal((await r.hgetall(`tg:share:${oldest}`)).n, '2');
    const oldList = await client.send(new GetObjectCommand({ Bucket: s3.bucket, Key: filesKey(oldest) }));
    t.strictSame(JSON.parse(await oldList.Body!.transformToString()), FILES.slice(0, 2), 'its list object');
    const oldSnap = await client.send(new GetObjectCommand({ Bucket: s3.bucket, Key: snapshotKey(oldest) }));
    t.equal(await oldSnap.Body!.transformToString(), SNAPSHOT, 'and its snapshot object');
    const cold = await startGateway(t, { redisUrl: redis.url, config: base });
    t.equal(unsigned((await read(cold, oldest)).text), oldBefore, 'read as before');
    for (const slug of slugs.slice(0, 5))
      t.equal(unsigned((await read(cold, slug)).text), before.get(slug), 'the same body after the move');
    t.match(await (await fetch(`${m.adminUrl}/metrics`)).text(), /tollgate_share_objects_total\{outcome="migrated"\} [1-9]/);
  });

  t.test('the embedded store keeps the list in memory as before', async (t) => {
    const mem = await startGateway(t, { config: { shares: base.shares } });
    const { key: k } = await mem.createKey({ account: 'embedded', env: 'live' });
    const from = proxy.seen.length;
    const created = await publish(mem, k, body(FILES.slice(0, 2)));
    t.equal(created.status, 201);
    t.strictSame(proxy.seen.slice(from), [], 'nothing written to S3 (presigning is local)');
    const res = await read(mem, created.body.slug);
    t.equal(res.status, 200);
    t.same(
      JSON.parse(res.text).files.map((f: any) => f.name),
      FILES.slice(0, 2).map((f) => f.name),
    );
  });
}
