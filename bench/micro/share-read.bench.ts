/**
 * Cost of a share read on a cache hit (the path every page render takes): slug check, cache lookup,
 * GET links from the half-life cache, and the body assembled as text around the stored snapshot, for
 * a small and a 1 MiB snapshot, against a parse + stringify round trip of the same record. Also the
 * one-time cost on publish of cutting the snapshot text out of a 1 MiB body. Buffer.byteLength (the
 * route's content-length) is included: it flattens the concatenated string, as writing it would.
 * Then the cold read (SPEC §13: the snapshot is an object): a cache miss that reads the record (the
 * embedded store here, so the figure is the object's part) and the snapshot from a real S3 server on
 * loopback (@20minutes/s3rver, scripts/local-s3.ts), checksum verified.
 * Run: `node bench/micro/share-read.bench.ts`. The hot cases touch no network: static S3 credentials sign locally.
 */
import { createMemoryStore } from '../../src/store/memory-store.ts';
import { createShareCache } from '../../src/shares/share-cache.ts';
import { createMemorySnapshotObjects } from '../../src/shares/snapshot-objects.ts';
import { createShareService } from '../../src/shares/service.ts';
import { createFileUrls } from '../../src/shares/file-urls.ts';
import { memberText } from '../../src/shares/snapshot-text.ts';
import { validateSlug } from '../../src/shares/validate.ts';
import { createReport, nsPerOp } from './timing.ts';
import { startLocalS3 } from '../../scripts/local-s3.ts';
import { createS3Client } from '../../src/s3/client.ts';
import { createS3SnapshotObjects } from '../../src/shares/snapshot-objects.ts';

/** Mean µs per awaited call, best of 3 rounds. */
async function usPerOp(fn: () => Promise<unknown>, n: number): Promise<number> {
  for (let i = 0; i < Math.min(n, 2_000); i++) await fn();
  let best = Infinity;
  for (let r = 0; r < 3; r++) {
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < n; i++) await fn();
    best = Math.min(best, Number(process.hrtime.bigint() - t0) / 1e3 / n);
  }
  return best;
}

const store = createMemoryStore();
const objects = createMemorySnapshotObjects();
const cache = createShareCache({ store, objects, ttlMs: 60_000, negativeTtlMs: 60_000 });
const files = createFileUrls({
  s3: {
    endpoint: 'http://127.0.0.1:9',
    region: 'us-east-1',
    bucket: 'shares',
    forcePathStyle: true,
    accessKeyId: 'AKIDEXAMPLE',
    secretAccessKey: 'secret',
  },
  ttlSeconds: 900,
  now: Date.now,
});
const service = createShareService({ store, cache, objects, files, now: Date.now });
const report = createReport();

const small = JSON.stringify({
  title: 'Trip',
  messages: Array.from({ length: 8 }, (_, i) => ({ role: i % 2 ? 'assistant' : 'user', content: 'x'.repeat(400) })),
});
const big = JSON.stringify({ messages: Array.from({ length: 256 }, () => ({ role: 'user', content: 'y'.repeat(4_000) })) });
const twoFiles = [
  { name: 'a.png', content_type: 'image/png', size: 1000 },
  { name: 'b.txt', content_type: 'text/plain', size: 10 },
];

for (const [name, snapshotText, fs] of [
  ['~3.5 KB, no files', small, []],
  ['~3.5 KB, 2 files', small, twoFiles],
  ['~1 MiB, no files', big, []],
] as const) {
  const { slug } = await service.create('acme', { snapshotText, files: [...fs] });
  await service.read(slug);
  report.add(
    `read, cache hit, ${name}`,
    await usPerOp(async () => Buffer.byteLength(await service.read(validateSlug(slug))), name.startsWith('~1') ? 300 : 20_000),
    'µs/op',
    'validateSlug + cache + links + body text + byteLength',
  );
}
const record = { slug: 'x', created_at: 'y', snapshot: JSON.parse(big) as unknown, files: [] };
report.add(
  'JSON.stringify of the same 1 MiB record',
  nsPerOp(() => Buffer.byteLength(JSON.stringify(record)), 300, 50, 3) / 1e3,
  'µs/op',
  'what splicing the stored text avoids',
);
// Cold reads: every read a miss (each slug read once), records in memory, snapshots in S3 on loopback.
const s3 = await startLocalS3('shares');
try {
  const cold = createMemoryStore();
  const s3Objects = createS3SnapshotObjects(
    createS3Client({ endpoint: s3.endpoint, region: 'us-east-1', forcePathStyle: true, accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER' }),
    s3.bucket,
  );
  const writer = createShareService({
    store: cold,
    cache: createShareCache({ store: cold, objects: s3Objects, ttlMs: 60_000, negativeTtlMs: 60_000 }),
    objects: s3Objects,
    files: undefined,
    now: Date.now,
  });
  const slugs: string[] = [];
  for (let i = 0; i < 260; i++) slugs.push((await writer.create('acme', { snapshotText: small, files: [] })).slug);
  const reader = createShareService({
    store: cold,
    cache: createShareCache({ store: cold, objects: s3Objects, ttlMs: 60_000, negativeTtlMs: 60_000 }),
    objects: s3Objects,
    files: undefined,
    now: Date.now,
  });
  for (const slug of slugs.slice(0, 60)) await reader.read(slug); // warm-up: JIT, the client's sockets
  const t0 = process.hrtime.bigint();
  for (const slug of slugs.slice(60)) Buffer.byteLength(await reader.read(slug));
  report.add(
    'read, cache miss, ~3.5 KB, S3 on loopback',
    Number(process.hrtime.bigint() - t0) / 1e3 / 200,
    'µs/op',
    'record + GET object + sha256 check + body (one reader at a time)',
  );
} finally {
  await s3.close();
}

const body = `{"snapshot": ${big}, "files": []}`;
report.add('memberText on a 1 MiB body (publish only)', nsPerOp(() => memberText(body, 'snapshot'), 300, 50, 3) / 1e3, 'µs/op');
report.print();
