import t from 'tap';
import { startS3 } from '../helpers/s3.ts';
import { GetObjectCommand } from '@aws-sdk/client-s3';
import { getSignedUrl } from '@aws-sdk/s3-request-presigner';
import {
  createGetUrlCache,
  createPresigner,
  objectKey,
  type Presigner,
  type PresignedGet,
  type PresignerConfig,
} from '../../src/shares/presign.ts';
import { createS3Client } from '../../src/s3/client.ts';
import { attachmentDisposition } from '../../src/shares/file-urls.ts';

const s3 = await startS3(t);
const cfg = {
  endpoint: s3.endpoint,
  region: 'us-east-1',
  bucket: s3.bucket,
  forcePathStyle: true,
  accessKeyId: s3.accessKeyId,
  secretAccessKey: s3.secretAccessKey,
};
const live = createPresigner(cfg, () => Date.now());
const SLUG = '7Yq3mZ2pKcR8vNwXhT4sLb';
const NAMES = ['a b.txt', '100%+#?&=;.md', "it's (1) [x] {y} ~!*.txt", 'résumé 履歴書 😀.pdf', '.hidden', '...', 'x%2Fy', 'tab\u00a0nbsp'];

async function upload(p: Presigner, key: string, bytes: Uint8Array, contentType: string): Promise<Response> {
  const put = await p.presignPut(key, contentType, bytes.byteLength, 900);
  return fetch(put.url, { method: put.method, headers: put.headers, body: bytes });
}

t.test('a presigned PUT uploads, a presigned GET downloads the same bytes', async (t) => {
  const bytes = new Uint8Array(70_000).map((_, i) => (i * 31) & 0xff);
  const key = objectKey(SLUG, 'report.bin');
  const put = await live.presignPut(key, 'application/octet-stream', bytes.byteLength, 900);
  t.equal(put.method, 'PUT');
  t.same(put.headers, { 'content-type': 'application/octet-stream', 'content-length': '70000' });
  const up = await fetch(put.url, { method: 'PUT', headers: put.headers, body: bytes });
  t.equal(up.status, 200, await up.text());

  const get = await live.presignGet(key, 900);
  const down = await fetch(get.url);
  t.equal(down.status, 200);
  t.equal(down.headers.get('content-type'), 'application/octet-stream', 'stored with the signed content type');
  t.same(new Uint8Array(await down.arrayBuffer()), bytes);
});

t.test('names with URL-special and non-ASCII characters round-trip', async (t) => {
  for (const name of NAMES) {
    const key = objectKey(SLUG, name);
    const bytes = new TextEncoder().encode(`content of ${name}`);
    const up = await upload(live, key, bytes, 'text/plain; charset=utf-8');
    t.equal(up.status, 200, `PUT ${name}: ${await up.text()}`);
    const down = await fetch((await live.presignGet(key, 900)).url);
    t.equal(down.status, 200, `GET ${name}`);
    t.equal(await down.text(), `content of ${name}`, name);
  }
});

t.test('objectKey puts the name under the slug unchanged', async (t) => {
  t.equal(objectKey(SLUG, 'a b.txt'), `shares/${SLUG}/a b.txt`);
});

t.test('upload URLs carry no checksum parameters; GET URLs no checksum mode', async (t) => {
  const put = new URL((await live.presignPut(objectKey(SLUG, 'x'), 'text/plain', 5, 60)).url);
  const names = [...put.searchParams.keys()].map((k) => k.toLowerCase());
  t.same(
    names.filter((k) => k.startsWith('x-amz-checksum') || k.startsWith('x-amz-sdk-checksum')),
    [],
  );
  t.equal(put.searchParams.get('X-Amz-SignedHeaders'), 'content-length;content-type;host');
  const get = new URL((await live.presignGet(objectKey(SLUG, 'x'), 60)).url);
  t.same(
    [...get.searchParams.keys()].filter((k) => k.toLowerCase().startsWith('x-amz-checksum')),
    [],
  );
});

t.test('the server refuses an upload whose size or type differs from the signed ones', async (t) => {
  const put = await live.presignPut(objectKey(SLUG, 'sized.txt'), 'text/plain', 5, 900);
  const bigger = await fetch(put.url, { method: 'PUT', headers: { 'content-type': 'text/plain' }, body: 'hello world' });
  t.equal(bigger.status, 403, 'wrong length');
  t.match(await bigger.text(), /SignatureDoesNotMatch/);
  const otherType = await fetch(put.url, { method: 'PUT', headers: { 'content-type': 'text/html' }, body: 'hello' });
  t.equal(otherType.status, 403, 'wrong content type');
  await otherType.text();
  const ok = await fetch(put.url, { method: 'PUT', headers: { 'content-type': 'text/plain' }, body: 'hello' });
  t.equal(ok.status, 200, 'exact length and type');
  await ok.text();
});

t.test('an empty file can be announced and uploaded', async (t) => {
  const up = await upload(live, objectKey(SLUG, 'empty'), new Uint8Array(0), 'application/octet-stream');
  t.equal(up.status, 200, await up.text());
});

t.test('a tampered signature is refused', async (t) => {
  const key = objectKey(SLUG, 'tamper.txt');
  t.equal((await upload(live, key, new TextEncoder().encode('x'), 'text/plain')).status, 200);
  const flip = (u: string): string => {
    const url = new URL(u);
    const sig = url.searchParams.get('X-Amz-Signature')!;
    url.searchParams.set('X-Amz-Signature', (sig[0] === '0' ? '1' : '0') + sig.slice(1));
    return url.toString();
  };
  const get = await fetch(flip((await live.presignGet(key, 900)).url));
  t.equal(get.status, 403);
  t.match(await get.text(), /SignatureDoesNotMatch/);
  const put = await live.presignPut(key, 'text/plain', 1, 900);
  const res = await fetch(flip(put.url), { method: 'PUT', headers: put.headers, body: 'y' });
  t.equal(res.status, 403);
  await res.text();
  const other = createPresigner({ ...cfg, secretAccessKey: 'not-the-secret' }, () => Date.now());
  const wrongKey = await fetch((await other.presignGet(key, 900)).url);
  t.equal(wrongKey.status, 403, 'signed with the wrong secret');
  await wrongKey.text();
});

t.test('an expired URL is refused', async (t) => {
  // Sign "an hour ago" with a 60 s lifetime: the server compares X-Amz-Date + X-Amz-Expires with its
  // own clock, so the URL is already 59 minutes past expiry. No sleeping, no flake.
  const past = createPresigner(cfg, () => Date.now() - 3_600_000);
  const key = objectKey(SLUG, 'expired.txt');
  t.equal((await upload(live, key, new TextEncoder().encode('x'), 'text/plain')).status, 200);
  const get = await past.presignGet(key, 60);
  t.ok(Date.parse(get.expires_at) < Date.now(), 'expires_at is in the past');
  const res = await fetch(get.url);
  t.equal(res.status, 403);
  t.match(await res.text(), /Request has expired/);
  const put = await past.presignPut(key, 'text/plain', 1, 60);
  const up = await fetch(put.url, { method: 'PUT', headers: put.headers, body: 'y' });
  t.equal(up.status, 403);
  t.match(await up.text(), /Request has expired/);
});

t.test('X-Amz-Date and expires_at follow the injected clock, from the whole signing second', async (t) => {
  const at = Date.UTC(2026, 10, 21, 12, 0, 0, 750);
  const p = createPresigner(cfg, () => at);
  const get = await p.presignGet('k', 900);
  t.equal(new URL(get.url).searchParams.get('X-Amz-Date'), '20261121T120000Z');
  t.equal(new URL(get.url).searchParams.get('X-Amz-Expires'), '900');
  t.equal(get.expires_at, '2026-11-21T12:15:00.000Z');
  const put = await p.presignPut('k', 'text/plain', 3, 60);
  t.equal(put.expires_at, '2026-11-21T12:01:00.000Z');
});

t.test('bad configuration and lifetimes are refused', async (t) => {
  t.throws(() => createPresigner({ region: 'us-east-1', bucket: 'b', forcePathStyle: false, accessKeyId: 'A' }, Date.now), /both/);
  await t.rejects(live.presignGet('k', 0), RangeError);
  await t.rejects(live.presignGet('k', 604_801), RangeError);
  await t.rejects(live.presignPut('k', 'text/plain', 1, 1.5), RangeError);
  t.throws(() => createGetUrlCache(live, Date.now, 0), RangeError);
});

t.test('without an endpoint the URL is AWS S3 for the region', async (t) => {
  const p = createPresigner(
    { region: 'eu-west-1', bucket: 'tollgate-shares', forcePathStyle: false, accessKeyId: 'A', secretAccessKey: 'B' },
    Date.now,
  );
  t.match((await p.presignGet('shares/x/y', 60)).url, /^https:\/\/tollgate-shares\.s3\.eu-west-1\.amazonaws\.com\/shares\/x\/y\?/);
});

t.test("GET URLs are byte for byte the SDK's getSignedUrl, on every kind of endpoint", async (t) => {
  const at = Date.UTC(2026, 10, 21, 12, 0, 7);
  const endpoints: PresignerConfig[] = [
    cfg,
    { ...cfg, endpoint: 'http://s3.example.test:9000', forcePathStyle: false },
    { ...cfg, endpoint: 'https://minio.example.test', forcePathStyle: true },
    { region: 'eu-west-1', bucket: 'tollgate-shares', forcePathStyle: false, accessKeyId: 'A', secretAccessKey: 'B' },
    { region: 'us-east-1', bucket: 'tollgate-shares', forcePathStyle: true, accessKeyId: 'A', secretAccessKey: 'B' },
  ];
  for (const c of endpoints) {
    const p = createPresigner(c, () => at);
    const client = createS3Client(c);
    for (const name of NAMES) {
      for (const disposition of [undefined, attachmentDisposition(name), 'inline']) {
        const key = objectKey(SLUG, name);
        const sdk = await getSignedUrl(
          client,
          new GetObjectCommand({
            Bucket: c.bucket,
            Key: key,
            ...(disposition !== undefined && { ResponseContentDisposition: disposition }),
          }),
          { expiresIn: 900, signingDate: new Date(at) },
        );
        t.equal((await p.presignGet(key, 900, disposition)).url, sdk, `${c.endpoint ?? c.region} ${name} ${disposition ?? ''}`);
      }
    }
  }
});

/** A presigner that counts calls and can be held open to test coalescing. */
function counting(inner: Presigner): Presigner & { calls: number } {
  const c = {
    calls: 0,
    presignPut: inner.presignPut,
    async presignGet(key: string, ttl: number): Promise<PresignedGet> {
      c.calls++;
      return inner.presignGet(key, ttl);
    },
  };
  return c;
}

t.test('GET-URL cache: same URL before half its lifetime, a new one from then on', async (t) => {
  const start = Date.UTC(2026, 10, 21, 12, 0, 0, 400); // signing second is 12:00:00.000
  let now = start;
  const clock = (): number => now;
  const p = counting(createPresigner(cfg, clock));
  const cache = createGetUrlCache(p, clock, 900);

  const first = await cache.get('shares/a/f');
  t.equal(p.calls, 1);
  now = start + 60_000;
  t.equal(await cache.get('shares/a/f'), first, 'reused a minute later');
  now = Date.UTC(2026, 10, 21, 12, 7, 29, 999); // 449.999 s after the signing second
  t.equal(await cache.get('shares/a/f'), first, 'reused just before half-life');
  t.equal(p.calls, 1);
  now = Date.UTC(2026, 10, 21, 12, 7, 30, 0); // exactly half of 900 s
  const second = await cache.get('shares/a/f');
  t.equal(p.calls, 2);
  t.not(second.url, first.url, 're-signed at half-life');
  t.equal(second.expires_at, '2026-11-21T12:22:30.000Z');
  t.ok(Date.parse(second.expires_at) - now >= 450_000, 'a served URL always has half its lifetime left');

  const other = await cache.get('shares/a/g');
  t.not(other.url, second.url, 'keys are cached separately');
  t.equal(p.calls, 3);
});

t.test('GET-URL cache: concurrent misses sign once; delete forgets; entries are bounded', async (t) => {
  const clock = (): number => 1_700_000_000_000;
  const p = counting(createPresigner(cfg, clock));
  const cache = createGetUrlCache(p, clock, 900, 2);
  const all = await Promise.all([cache.get('k1'), cache.get('k1'), cache.get('k1')]);
  t.equal(p.calls, 1);
  t.equal(all[1], all[0]);
  t.equal(all[2], all[0]);

  cache.delete('k1');
  await cache.get('k1');
  t.equal(p.calls, 2, 'deleted entries are signed again');

  await cache.get('k2');
  await cache.get('k3');
  t.equal(cache.size, 2, 'bounded by max');
});

t.test('GET-URL cache: a failed signing is not cached and is retried', async (t) => {
  let fail = true;
  const clock = (): number => 1_700_000_000_000;
  const inner = createPresigner(cfg, clock);
  const p: Presigner = {
    presignPut: inner.presignPut,
    presignGet: (k, ttl) => (fail ? Promise.reject(new Error('no credentials')) : inner.presignGet(k, ttl)),
  };
  const cache = createGetUrlCache(p, clock, 900);
  await t.rejects(cache.get('k'), /no credentials/);
  t.equal(cache.size, 0);
  fail = false;
  t.match((await cache.get('k')).url, /X-Amz-Signature=/);
});
