import t from 'tap';
import { createFileUrls, filesConfigured } from '../../src/shares/file-urls.ts';
import type { S3Config } from '../../src/config/schema.ts';
import { startS3 } from '../helpers/s3.ts';

const SLUG = 'AbCdEfGhJkLmNpQrStUvWx';
const base: S3Config = {
  endpoint: undefined,
  region: 'us-east-1',
  bucket: 'shares',
  forcePathStyle: true,
  accessKeyId: undefined,
  secretAccessKey: undefined,
};

t.test('files need an endpoint or static credentials', async (t) => {
  t.equal(filesConfigured(base), false);
  t.equal(createFileUrls({ s3: base, ttlSeconds: 900, now: Date.now }), undefined);
  t.equal(filesConfigured({ ...base, endpoint: 'http://127.0.0.1:9000' }), true);
  t.equal(filesConfigured({ ...base, accessKeyId: 'AK', secretAccessKey: 'SK' }), true);
});

t.test('uploads and downloads against a signature-checking S3, timed per signing', async (t) => {
  const s3 = await startS3(t);
  let clock = Date.now(); // the S3 server checks expiry against its own clock
  const timings: string[] = [];
  const urls = createFileUrls({
    s3: { ...base, endpoint: s3.endpoint, bucket: s3.bucket, accessKeyId: s3.accessKeyId, secretAccessKey: s3.secretAccessKey },
    ttlSeconds: 900,
    now: () => clock,
    observe: (m, s) => timings.push(`${m}:${s >= 0 && s < 5}`),
  })!;
  const files = [
    { name: 'notes.txt', content_type: 'text/plain', size: 5 },
    { name: 'é x.bin', content_type: 'application/octet-stream', size: 3 },
  ];
  const ups = await urls.uploads(SLUG, files);
  t.same(
    ups.map((u) => [u.name, u.method, u.headers]),
    [
      ['notes.txt', 'PUT', { 'content-type': 'text/plain', 'content-length': '5' }],
      ['é x.bin', 'PUT', { 'content-type': 'application/octet-stream', 'content-length': '3' }],
    ],
  );
  for (const u of ups) t.notMatch(u.url, /x-amz-checksum|x-amz-sdk-checksum/i, 'no checksum baked into the upload URL');
  t.equal(ups[0]!.expires_at, new Date(Math.floor(clock / 1000) * 1000 + 900_000).toISOString());
  const bodies = [Buffer.from('hello'), Buffer.from([0, 1, 2])];
  for (const [i, u] of ups.entries()) {
    const res = await fetch(u.url, { method: 'PUT', headers: { 'content-type': u.headers['content-type']! }, body: bodies[i]! });
    t.equal(res.status, 200, `upload ${u.name}`);
  }
  const links = await urls.downloads(SLUG, files);
  t.same(
    links.map((l) => [l.name, l.content_type, l.size]),
    files.map((f) => [f.name, f.content_type, f.size]),
  );
  for (const [i, l] of links.entries()) {
    const res = await fetch(l.url!);
    t.equal(res.status, 200);
    t.same(Buffer.from(await res.arrayBuffer()), bodies[i]);
  }
  t.same(timings, ['PUT:true', 'PUT:true', 'GET:true', 'GET:true']);

  const again = await urls.downloads(SLUG, files);
  t.same(
    again.map((l) => l.url),
    links.map((l) => l.url),
    'GET links reused before half their lifetime',
  );
  t.equal(timings.length, 4, 'no new signing');
  clock += 451_000;
  const later = await urls.downloads(SLUG, files);
  t.not(later[0]!.url, links[0]!.url, 'a new link past half its lifetime');
  urls.forget(SLUG, files);
  await urls.downloads(SLUG, files);
  t.equal(timings.length, 8, 'forget drops cached links');
});
