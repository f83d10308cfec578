import t from 'tap';
import { GatewayError } from '../../src/http/errors.ts';
import { createShareCache } from '../../src/shares/share-cache.ts';
import { createShareService } from '../../src/shares/service.ts';
import { liveShare } from '../../src/shares/share-cache.ts';
import { createMemorySnapshotObjects, type SnapshotObjects } from '../../src/shares/snapshot-objects.ts';
import type { FileLink, FileUrls, Upload } from '../../src/shares/file-urls.ts';
import { createMemoryStore } from '../../src/store/memory-store.ts';
import type { ShareFile, Store } from '../../src/store/types.ts';
import { waitFor } from '../helpers/wait.ts';

const NOW = Date.parse('2026-11-22T10:00:00.000Z');
const SLUG = 'AbCdEfGhJkLmNpQrStUvWx';

/** Fake S3 URLs that record what was asked, and can fail. */
function fakeFiles() {
  const calls: string[] = [];
  const state = { fail: false };
  const files: FileUrls = {
    async uploads(slug, fs) {
      calls.push(`put ${slug} ${fs.length}`);
      if (state.fail) throw new GatewayError('store_unavailable', 'File storage is unavailable');
      return fs.map((f): Upload => ({
        name: f.name,
        url: `s3://put/${f.name}`,
        method: 'PUT',
        headers: { 'content-type': f.content_type },
        expires_at: 'later',
      }));
    },
    async downloads(slug, fs) {
      calls.push(`get ${slug} ${fs.length}`);
      return fs.map((f): FileLink => ({ ...f, url: `s3://get/${f.name}`, expires_at: 'later' }));
    },
    forget(slug, fs) {
      calls.push(`forget ${slug} ${fs.length}`);
    },
  };
  return { files, calls, state };
}

function build(o: { store?: Store; files?: FileUrls | undefined; objects?: SnapshotObjects } = {}) {
  const store = o.store ?? createMemoryStore();
  const objects = o.objects ?? createMemorySnapshotObjects(store.snapshotTexts);
  const cache = createShareCache({ store, objects, ttlMs: 10_000, negativeTtlMs: 1_000 });
  const service = createShareService({
    store,
    cache,
    objects,
    files: 'files' in o ? o.files : fakeFiles().files,
    now: () => NOW,
    slug: () => SLUG,
  });
  return { store, cache, service, objects };
}

const files: ShareFile[] = [
  { name: 'a.png', content_type: 'image/png', size: 3 },
  { name: 'b.txt', content_type: 'text/plain', size: 0 },
];

t.test('create stores the record as published and returns one upload per file', async (t) => {
  const f = fakeFiles();
  const { store, service, cache, objects } = build({ files: f.files });
  const created = await service.create('acme', { snapshotText: '{ "messages": [{}] }', files });
  t.same(created, {
    slug: SLUG,
    created_at: '2026-11-22T10:00:00.000Z',
    uploads: [
      { name: 'a.png', url: 's3://put/a.png', method: 'PUT', headers: { 'content-type': 'image/png' }, expires_at: 'later' },
      { name: 'b.txt', url: 's3://put/b.txt', method: 'PUT', headers: { 'content-type': 'text/plain' }, expires_at: 'later' },
    ],
  });
  t.same(await store.getShare(SLUG), {
    slug: SLUG,
    account: 'acme',
    created_at: '2026-11-22T10:00:00.000Z',
    bytes: 20,
    files,
    revoked_at: null,
  });
  t.equal(await objects.get(SLUG), '{ "messages": [{}] }', 'the snapshot is an object, not part of the record');
  t.equal(cache.peek(SLUG)?.status, 'live', 'primed');
});

t.test('a signing failure on create stores nothing', async (t) => {
  const f = fakeFiles();
  f.state.fail = true;
  const { store, service, objects } = build({ files: f.files });
  await t.rejects(service.create('acme', { snapshotText: '{}', files }), { code: 'store_unavailable' });
  t.equal(await store.getShare(SLUG), null);
  t.equal(await objects.confirm(SLUG, '{}'), false, 'no object either');
});

t.test('read splices the stored snapshot text into the body, with file links', async (t) => {
  const f = fakeFiles();
  const { service } = build({ files: f.files });
  await service.create('acme', { snapshotText: '{"n": 1.0, "messages":[{}]}', files });
  const text = await service.read(SLUG);
  t.equal(
    text,
    `{"slug":"${SLUG}","created_at":"2026-11-22T10:00:00.000Z","snapshot":{"n": 1.0, "messages":[{}]},"files":[` +
      '{"name":"a.png","content_type":"image/png","size":3,"url":"s3://get/a.png","expires_at":"later"},' +
      '{"name":"b.txt","content_type":"text/plain","size":0,"url":"s3://get/b.txt","expires_at":"later"}]}',
  );
  t.same(JSON.parse(text).snapshot, { n: 1, messages: [{}] });
});

t.test('a share with files read where S3 is not configured lists them with null URLs', async (t) => {
  const store = createMemoryStore();
  await store.putShare({ slug: SLUG, account: 'acme', created_at: 'x', bytes: 2, files, revoked_at: null });
  const objects = createMemorySnapshotObjects();
  await objects.put(SLUG, '{}');
  const { service } = build({ store, files: undefined, objects });
  t.same(
    JSON.parse(await service.read(SLUG)).files,
    files.map((f) => ({ ...f, url: null, expires_at: null })),
  );
});

t.test('unknown → share_not_found, revoked → share_revoked', async (t) => {
  const { service } = build();
  await t.rejects(service.read(SLUG), { code: 'share_not_found', status: 404 });
  await service.create('acme', { snapshotText: '{}', files: [] });
  await service.revoke(SLUG, 'acme');
  await t.rejects(service.read(SLUG), { code: 'share_revoked', status: 410 });
});

t.test('revoke: owner only (others get the unknown-slug 404), idempotent, admin may revoke any', async (t) => {
  const f = fakeFiles();
  const { service, store } = build({ files: f.files });
  await t.rejects(service.revoke(SLUG, 'acme'), { code: 'share_not_found' });
  await t.rejects(service.revoke(SLUG, undefined), { code: 'share_not_found' }, 'admin: unknown is 404 too');
  await service.create('acme', { snapshotText: '{}', files });
  await t.rejects(service.revoke(SLUG, 'other'), { code: 'share_not_found', message: 'No share exists with this slug.' });
  t.equal((await store.getShare(SLUG))?.revoked_at, null, 'untouched');
  await service.revoke(SLUG, 'acme');
  const first = (await store.getShare(SLUG))?.revoked_at;
  t.equal(first, '2026-11-22T10:00:00.000Z');
  await service.revoke(SLUG, 'acme');
  await service.revoke(SLUG, undefined);
  t.equal((await store.getShare(SLUG))?.revoked_at, first, 'revoked once');
  await t.rejects(service.revoke(SLUG, 'other'), { code: 'share_not_found' }, 'still no oracle once revoked');
  t.ok(f.calls.includes(`forget ${SLUG} 2`), 'cached GET links of the share are dropped');
});

t.test('revoke publishes an invalidation that other caches on the store apply', async (t) => {
  const store = createMemoryStore();
  const a = build({ store });
  const b = build({ store });
  await a.service.create('acme', { snapshotText: '{}', files: [] });
  await b.service.read(SLUG); // cached as live on B
  await a.service.revoke(SLUG, 'acme');
  // Delivery is asynchronous (a setImmediate in the embedded store; a loaded loop can run a short timer first).
  await waitFor(() => b.cache.peek(SLUG)?.status === 'revoked');
  t.equal(b.cache.peek(SLUG)?.status, 'revoked');
});

t.test('the ready body escapes slug and created_at as JSON strings', async (t) => {
  const live = liveShare({ slug: 'a"b', account: 'x', created_at: 'c\\d', bytes: 3, files: [], revoked_at: null }, '[1]');
  t.same(JSON.parse(live.text), { slug: 'a"b', created_at: 'c\\d', snapshot: [1], files: [] });
});

t.test('without an object store (Redis without shares.s3) publishing is a 503 that stores nothing', async (t) => {
  const store = createMemoryStore();
  const cache = createShareCache({ store, objects: undefined, ttlMs: 10_000, negativeTtlMs: 1_000 });
  const service = createShareService({ store, cache, objects: undefined, files: undefined, now: () => NOW, slug: () => SLUG });
  await t.rejects(service.create('acme', { snapshotText: '{}', files: [] }), { code: 'store_unavailable', message: /shares\.s3/ });
  t.equal(await store.getShare(SLUG), null);
});
