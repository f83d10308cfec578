// A usage rebuild in a process of its own, run by rebuild.test.ts under a small heap
// (--max-old-space-size): the rebuild must hold cells, not entries. Args: redisUrl account day.
// Prints the rebuild's report as JSON on stdout.
import { createRedisStore } from '../../src/store/redis-store.ts';
import { rebuildUsage } from '../../src/usage/rebuild.ts';

const [redisUrl, account, day] = process.argv.slice(2);
const store = await createRedisStore({ url: redisUrl!, commandTimeoutMs: 10_000, settledTtlSeconds: 3600 });
const report = await rebuildUsage({ store, sink: undefined, prefix: 'ledger/', retentionDays: 400 }, account!, day!, day!);
process.stdout.write(`${JSON.stringify({ report, heapUsed: process.memoryUsage().heapUsed })}\n`);
await store.close();
