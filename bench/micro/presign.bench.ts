/**
 * Cost of the shares building blocks, per operation: presigning (why GET URLs are cached until
 * half-life), a cache hit, slug generation and slug validation. Signing is local with static
 * credentials, so the endpoint is never contacted. Run: `node bench/micro/presign.bench.ts`.
 * Prints one line per case and, last, a JSON object { case: µs/op } for a results collector.
 */
import { GetObjectCommand } from '@aws-sdk/client-s3';
import { getSignedUrl } from '@aws-sdk/s3-request-presigner';
import { createS3Client } from '../../src/s3/client.ts';
import { createGetUrlCache, createPresigner } from '../../src/shares/presign.ts';
import { newSlug } from '../../src/shares/slug.ts';
import { validateSlug } from '../../src/shares/validate.ts';

const cfg = {
  endpoint: 'http://127.0.0.1:9',
  region: 'us-east-1',
  bucket: 'shares',
  forcePathStyle: true,
  accessKeyId: 'AKIDEXAMPLE',
  secretAccessKey: 'secret',
};
const presigner = createPresigner(cfg, Date.now);
const sdkClient = createS3Client(cfg);

/** Mean µs per call of fn over n calls, after `warm` untimed calls. */
async function measure(n: number, warm: number, fn: (i: number) => unknown): Promise<number> {
  for (let i = 0; i < warm; i++) await fn(i);
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < n; i++) await fn(i);
  return Number(process.hrtime.bigint() - t0) / 1e3 / n;
}

const results: Record<string, number> = {};
async function run(name: string, n: number, warm: number, fn: (i: number) => unknown): Promise<void> {
  const us = await measure(n, warm, fn);
  results[name] = Number(us.toFixed(3));
  console.log(`${name.padEnd(28)} ${us.toFixed(3).padStart(10)} µs/op   (${n} ops)`);
}

// presignGet signs through S3RequestPresigner with the endpoint resolved once (src/shares/presign.ts);
// getSignedUrl, which it replaced for GETs, runs the SDK's whole command pipeline per URL.
await run('presignGet', 5_000, 1_000, (i) => presigner.presignGet(`shares/slug/file-${i}.txt`, 900, 'attachment; filename="a"'));
await run('GET via getSignedUrl (SDK)', 5_000, 1_000, (i) =>
  getSignedUrl(
    sdkClient,
    new GetObjectCommand({ Bucket: cfg.bucket, Key: `shares/slug/file-${i}.txt`, ResponseContentDisposition: 'attachment; filename="a"' }),
    { expiresIn: 900 },
  ),
);
await run('presignPut (getSignedUrl)', 5_000, 1_000, (i) => presigner.presignPut(`shares/slug/file-${i}.txt`, 'text/plain', 1234, 900));
const cache = createGetUrlCache(presigner, Date.now, 900);
await cache.get('shares/slug/hot.txt');
await run('GetUrlCache hit', 200_000, 10_000, () => cache.get('shares/slug/hot.txt'));
await run('newSlug', 200_000, 10_000, () => newSlug());
const slug = newSlug();
await run('validateSlug (valid)', 200_000, 10_000, () => validateSlug(slug));
console.log(JSON.stringify(results));
