// SPEC §12 "Shares have quotas": the attacks of the hostile-clients issue, reproduced.
//   - a zero-balance key filled Redis with megabytes of shares (no quota): with noeviction every hold
//     then failed; with allkeys-* balances and the ledger were evicted
//   - a text/html or image/svg+xml share file was served inline from the S3 origin (stored XSS)
//   - unauthenticated reads of random slugs cost a store read each, without limit
import t from 'tap';
import { request } from 'node:http';
import { startRedis } from '../helpers/redis.ts';
import { sharesS3Config, startS3 } from '../helpers/s3.ts';
import { startGateway, type TestGateway } from '../helpers/gateway.ts';

const snapshot = (bytes: number) => ({ snapshot: { title: 't', messages: [{ role: 'user', content: 'x'.repeat(bytes) }] } });

async function publish(gw: TestGateway, key: string, body: object): Promise<{ status: number; body: any; headers: Headers }> {
  const res = await fetch(`${gw.url}/v1/shares`, {
    method: 'POST',
    headers: { ...gw.auth(key), 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return { status: res.status, body: await res.json(), headers: res.headers };
}

/** GET a share from a chosen loopback source address. */
function readFrom(url: string, localAddress: string): Promise<number> {
  return new Promise((resolve, reject) => {
    request(url, { localAddress, agent: false }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode!));
    })
      .on('error', reject)
      .end();
  });
}

async function quotas(t: import('tap').Test, gw: TestGateway, tag: string): Promise<void> {
  t.test('live shares per account: past max_per_account 429 share_quota_exceeded; a revoke gives one back', async (t) => {
    const { key } = await gw.createKey({ account: `${tag}-count`, env: 'live' });
    const made = [];
    for (let i = 0; i < 3; i++) made.push((await publish(gw, key, snapshot(10))).body.slug);
    const over = await publish(gw, key, snapshot(10));
    t.equal(over.status, 429);
    t.equal(over.body.error.code, 'share_quota_exceeded');
    t.match(over.body.error.message, /3 live shares/);
    const del = await fetch(`${gw.url}/v1/shares/${made[0]}`, { method: 'DELETE', headers: gw.auth(key) });
    t.equal(del.status, 204);
    const again = await fetch(`${gw.url}/v1/shares/${made[0]}`, { method: 'DELETE', headers: gw.auth(key) });
    t.equal(again.status, 204, 'a repeated revoke is fine ...');
    t.equal((await publish(gw, key, snapshot(10))).status, 201, 'the revoked share freed its place');
    t.equal((await publish(gw, key, snapshot(10))).status, 429, '... and gave it back only once');
  });

  t.test('bytes per account: snapshot bytes count against max_bytes_per_account', async (t) => {
    const { key } = await gw.createKey({ account: `${tag}-bytes`, env: 'live' });
    t.equal((await publish(gw, key, snapshot(3000))).status, 201);
    const over = await publish(gw, key, snapshot(3000));
    t.equal(over.status, 429);
    t.match(over.body.error.message, /bytes/);
    t.equal((await publish(gw, key, snapshot(100))).status, 201, 'a small one still fits');
  });
}

const CONFIG = { shares: { max_per_account: 3, max_bytes_per_account: 5000, create_per_minute: 2 } };

t.test('creations per key a minute: past create_per_minute 429 with retry-after; another key of the account is not limited', async (t) => {
  const gw = await startGateway(t, { config: CONFIG });
  const tag = 'mem';
  const { key } = await gw.createKey({ account: `${tag}-rate`, env: 'live' });
  const other = await gw.createKey({ account: `${tag}-rate`, env: 'live' });
  for (let i = 0; i < 2; i++) t.equal((await publish(gw, key, snapshot(5))).status, 201);
  const over = await publish(gw, key, snapshot(5));
  t.equal(over.status, 429);
  t.equal(over.body.error.code, 'share_quota_exceeded');
  t.ok(Number(over.headers.get('retry-after')) >= 1);
  t.equal((await publish(gw, other.key, snapshot(5))).status, 201);
});

t.test('embedded store', async (t) => {
  const gw = await startGateway(t, { config: { shares: { ...CONFIG.shares, create_per_minute: 100 } } });
  await quotas(t, gw, 'mem');
});

const redis = await startRedis(t);
if (redis) {
  t.test('redis store', async (t) => {
    const s3 = await startS3(t);
    const gw = await startGateway(t, {
      redisUrl: redis.url,
      config: { shares: { ...CONFIG.shares, create_per_minute: 100, s3: sharesS3Config(s3) } },
    });
    await quotas(t, gw, 'redis');

    t.test('concurrent creates cannot pass the quota; refused creates add nothing to Redis', async (t) => {
      const { key } = await gw.createKey({ account: 'redis-race', env: 'live' });
      const statuses = await Promise.all(Array.from({ length: 20 }, () => publish(gw, key, snapshot(10)).then((r) => r.status)));
      t.equal(statuses.filter((s) => s === 201).length, 3, 'exactly max_per_account succeed');
      // Refused creates store nothing: no key and no quota field more (used_memory moves with client
      // buffers by tens of KB, so keys are counted instead).
      const quota = `{acct:redis-race}:shares`;
      const [keysBefore, fieldsBefore] = [await redis.client.dbsize(), await redis.client.hlen(quota)];
      for (let i = 0; i < 20; i++) t.equal((await publish(gw, key, snapshot(1000))).status, 429);
      t.equal(await redis.client.dbsize(), keysBefore, '20 refused 1 KB creates added no key');
      t.equal(await redis.client.hlen(quota), fieldsBefore, 'nor a quota field');
      t.equal(fieldsBefore, 5, 'the quota hash: count, bytes and one field per live share');
    });
  });

  t.test('per-key rate on its own gateway', async (t) => {
    const s3 = await startS3(t);
    const gw = await startGateway(t, { redisUrl: redis.url, config: { ...CONFIG, shares: { ...CONFIG.shares, s3: sharesS3Config(s3) } } });
    const { key } = await gw.createKey({ account: 'redis-rate2', env: 'live' });
    for (let i = 0; i < 2; i++) t.equal((await publish(gw, key, snapshot(5))).status, 201);
    t.equal((await publish(gw, key, snapshot(5))).status, 429);
  });
}

t.test('share files download as attachments unless their type may render inline', async (t) => {
  const s3 = await startS3(t);
  const gw = await startGateway(t, { config: { shares: { s3: sharesS3Config(s3) } } });
  const { key } = await gw.createKey({ account: 'xss', env: 'live' });
  const files = [
    { name: 'page.html', content_type: 'text/html', bytes: '<script>alert(document.cookie)</script>' },
    { name: 'logo.svg', content_type: 'image/svg+xml', bytes: '<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"/>' },
    { name: 'chart.png', content_type: 'image/png', bytes: '\x89PNG fake' },
    { name: 'rapport été.pdf', content_type: 'application/pdf', bytes: '%PDF-1.7' },
  ];
  const created = await publish(gw, key, {
    ...snapshot(5),
    files: files.map((f) => ({ name: f.name, content_type: f.content_type, size: Buffer.byteLength(f.bytes) })),
  });
  t.equal(created.status, 201);
  for (const u of created.body.uploads) {
    const f = files.find((x) => x.name === u.name)!;
    t.equal((await fetch(u.url, { method: 'PUT', headers: u.headers, body: f.bytes })).status, 200, `uploaded ${f.name}`);
  }
  const read = (await (await fetch(`${gw.url}/v1/shares/${created.body.slug}`)).json()) as { files: Array<{ name: string; url: string }> };
  for (const f of read.files) {
    const res = await fetch(f.url);
    t.equal(res.status, 200, `${f.name}: the signed URL is valid`);
    await res.arrayBuffer();
    const cd = res.headers.get('content-disposition');
    if (f.name === 'chart.png') t.equal(cd, null, 'a PNG may render inline');
    else t.match(cd, /^attachment; filename="/, `${f.name}: ${cd}`);
  }
  t.match(read.files.find((f) => f.name === 'rapport été.pdf')!.url, /response-content-disposition=attachment/);
});

t.test('failed share reads are limited per address; a throttled address still reads a live slug', async (t) => {
  const gw = await startGateway(t, { config: { shares: { failed_reads_per_minute: 5 } } });
  const { key } = await gw.createKey({ account: 'probe', env: 'live' });
  const real = (await publish(gw, key, snapshot(5))).body.slug as string;
  const unknown = 'A'.repeat(22);
  const statuses = [];
  for (let i = 0; i < 5; i++) statuses.push(await readFrom(`${gw.url}/v1/shares/${i % 2 ? unknown : 'short'}`, '127.0.0.1'));
  t.same(statuses, [422, 404, 422, 404, 422], '404s and 422s count');
  t.equal(await readFrom(`${gw.url}/v1/shares/${unknown}`, '127.0.0.1'), 429, 'past the limit: a failed read is 429');
  t.equal(await readFrom(`${gw.url}/v1/shares/${'short'}`, '127.0.0.1'), 429, 'a malformed slug too');
  t.equal(await readFrom(`${gw.url}/v1/shares/${real}`, '127.0.0.1'), 200, 'a live slug is served to the throttled address (SPEC §13)');
  t.equal(await readFrom(`${gw.url}/v1/shares/${real}`, '127.0.0.2'), 200, 'another address reads it');
  t.equal(await readFrom(`${gw.url}/v1/shares/${unknown}`, '127.0.0.2'), 404);
});
