// An exporter in a process of its own, for the kill test: it exports with a sink that reports "PUT <key>"
// on stdout after each acknowledged object and then stops forever (before the cursor moves), so the
// parent can SIGKILL it between the S3 write and the commit. Args: redisUrl endpoint bucket leaseMs batchSize.
import { createRedisStore } from '../../src/store/redis-store.ts';
import { createLedgerExporter } from '../../src/ledger/exporter.ts';
import { createS3Sink } from '../../src/ledger/sink.ts';
import { createLogger } from '../../src/obs/logger.ts';

const [redisUrl, endpoint, bucket, leaseMs, batchSize] = process.argv.slice(2);
const store = await createRedisStore({ url: redisUrl!, commandTimeoutMs: 2000, settledTtlSeconds: 3600 });
const s3 = createS3Sink({
  endpoint: endpoint!,
  region: 'us-east-1',
  bucket: bucket!,
  forcePathStyle: true,
  accessKeyId: 'S3RVER',
  secretAccessKey: 'S3RVER',
});
const exporter = createLedgerExporter({
  store,
  sink: {
    ...s3,
    async put(key, body, signal) {
      await s3.put(key, body, signal);
      process.stdout.write(`PUT ${key}\n`);
      await new Promise(() => {});
    },
  },
  logger: createLogger('silent'),
  now: Date.now,
  prefix: 'ledger/',
  batchSize: Number(batchSize),
  retentionDays: 0,
  intervalSeconds: 60,
  leaseMs: Number(leaseMs),
});
await exporter.runOnce();
