// `usage rebuild` from the ledger (SPEC §10) on a real Redis and a signature-checking S3:
// - it folds entries into cells as it reads them: an account with 150,000 debits in the range rebuilds in a
//   process whose heap is capped at 40 MB (before, every entry of the range was kept: ~470 bytes each, so
//   an account with millions of entries could take the gateway's heap, every tenant with it);
// - it holds the account's export lease: an export pass (and its trim) during the rebuild leaves the
//   account alone, so no entry leaves Redis between the objects read and the Redis read (before, entries
//   exported and trimmed meanwhile were counted by neither, and the rebuild wrote too low a bill);
// - it reads Redis to the end: a debit appended days after its billing instant (a spooled settle replayed
//   late) counts on its day (before, Redis was read to a day past the range, and such a debit was lost);
// - without the bucket (export turned off after it trimmed) a range whose entries may be trimmed is refused
//   (before, the cells were replaced by what Redis kept);
// - each entry once, over trimmed objects, exported-but-kept entries (in objects and Redis), unexported
//   ones and a conflict copy (an object written beside another after Redis lost writes).
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import type { Redis } from 'ioredis';
import { conflictKey, decodeObject } from '../../src/ledger/entries.ts';
import { createLedgerExporter } from '../../src/ledger/exporter.ts';
import type { LedgerSink } from '../../src/ledger/sink.ts';
import { createLogger } from '../../src/obs/logger.ts';
import * as K from '../../src/store/redis-keys.ts';
import type { Store, UsageCell } from '../../src/store/types.ts';
import { rebuildUsage } from '../../src/usage/rebuild.ts';
import { startRedis } from '../helpers/redis.ts';
import { startS3 } from '../helpers/s3.ts';
import { openRedisStore, PREFIX, sinkFor } from '../ledger/support.ts';
import { keyRecordOf } from '../store/harness.ts';

const CHILD = fileURLToPath(new URL('./rebuild-child.ts', import.meta.url));
const today = () => new Date().toISOString().slice(0, 10);

/**
 * `n` debit entries appended to the account's ledger as settle.lua writes them (the `d` layout that
 * redis-records.ts parses), ts now; key `k<i % keys>`, model `m<i % 2>`. Returns the expected cells.
 */
async function debits(redis: Redis, account: string, n: number, from = 0, keys = 3): Promise<Map<string, UsageCell>> {
  const want = new Map<string, UsageCell>();
  let p = redis.pipeline();
  for (let i = from; i < from + n; i++) {
    const [key, model, prompt, completion, cached, cost] = [`k${i % keys}`, `m${i % 2}`, 10 + (i % 7), i % 5, i % 3, 7 + (i % 11)];
    const ts = new Date().toISOString();
    p.xadd(
      K.ledger(account),
      '*',
      'd',
      JSON.stringify([-cost, ts, `req-${i}`, key, model, prompt, completion, 'upstream', cached]),
      'h',
      String(cost),
    );
    const id = `${ts.slice(0, 10)}|${key}|${model}`;
    const c = want.get(id) ?? {
      day: ts.slice(0, 10),
      key_id: key,
      model,
      requests: 0,
      prompt_tokens: 0,
      completion_tokens: 0,
      cost_micros: 0,
      cached_tokens: 0,
    };
    want.set(id, c);
    c.requests += 1;
    c.prompt_tokens += prompt;
    c.completion_tokens += completion;
    c.cost_micros += cost;
    c.cached_tokens += cached;
    if (i % 5000 === 4999) {
      await p.exec();
      p = redis.pipeline();
    }
  }
  await p.exec();
  return want;
}

function merge(...maps: Map<string, UsageCell>[]): UsageCell[] {
  const out = new Map<string, UsageCell>();
  for (const m of maps)
    for (const [id, c] of m) {
      const have = out.get(id);
      if (!have) out.set(id, { ...c });
      else for (const f of ['requests', 'prompt_tokens', 'completion_tokens', 'cost_micros', 'cached_tokens'] as const) have[f] += c[f];
    }
  return [...out.values()].sort((a, b) => `${a.key_id}|${a.model}`.localeCompare(`${b.key_id}|${b.model}`));
}

const exporterOf = (store: Store, sink: LedgerSink, retentionDays: number) =>
  createLedgerExporter({
    store,
    sink,
    logger: createLogger('silent'),
    now: Date.now,
    prefix: PREFIX,
    batchSize: 7,
    retentionDays,
    intervalSeconds: 3600,
  });

const redis = await startRedis(t);
if (redis) {
  t.test('150,000 debits rebuild in a 40 MB heap: cells are kept, not entries', async (t) => {
    const want = await debits(redis.client, 'huge', 150_000, 0, 20);
    const child = spawn(process.execPath, ['--max-old-space-size=40', CHILD, redis.url, 'huge', today()], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (c) => (out += c));
    child.stderr.on('data', (c) => (err += c));
    const [code] = await once(child, 'exit');
    t.equal(code, 0, 'the rebuild finished within the heap cap', { stderr: err.slice(-2000) });
    if (code !== 0) return;
    const { report } = JSON.parse(out);
    t.equal(report.entries, 150_000, 'every debit counted');
    t.equal(report.cells, want.size, 'one cell per key × model');
    const stored = await (await openRedisStore(t, redis.url)).usageCells('huge', today(), today());
    t.same(stored, merge(want), 'the stored cells are the ledger sums');
  });

  t.test('objects, Redis and their overlap, a conflict copy: each entry once', async (t) => {
    await redis.client.flushdb(); // the exporter below exports every account it finds
    const s3 = await startS3(t, 'rebuild-parts');
    const store = await openRedisStore(t, redis.url);
    const sink = sinkFor(s3);
    const trimmed = await debits(redis.client, 'parts', 30);
    t.equal((await exporterOf(store, sink, 0).runOnce()).trimmed, 30, '30 exported and trimmed: in objects only');
    const kept = await debits(redis.client, 'parts', 20, 30);
    const r = await exporterOf(store, sink, 7).runOnce();
    t.equal(r.entries, 20, '20 exported and kept (retention 7): in objects and Redis');
    const fresh = await debits(redis.client, 'parts', 10, 50);
    // A conflict copy of an object of the trimmed part, as the export writes after Redis lost writes.
    const keys = await sink.list(`${PREFIX}dt=${today()}/parts/`);
    const firstKey = keys.sort()[0]!;
    const copy = await sink.get(firstKey);
    const firstId = (await decodeObject(copy))[0]!.id;
    await sink.put(conflictKey(PREFIX, today(), 'parts', firstId, 'abcdef12'), Buffer.from(copy), AbortSignal.timeout(10_000));

    await redis.client.hset(K.usageDay('parts', today()), 'k0|m0|r', '999');
    const report = await rebuildUsage({ store, sink, prefix: PREFIX, retentionDays: 400 }, 'parts', today(), today());
    t.equal(report.entries, 60, 'every debit counted once');
    t.equal(report.from_objects, 30, 'the objects supply what Redis no longer holds, and only that');
    t.same(await store.usageCells('parts', today(), today()), merge(trimmed, kept, fresh), 'the cells are the ledger sums');
  });

  t.test('an export pass (retention 0) during the rebuild trims nothing the rebuild has yet to read', async (t) => {
    await redis.client.flushdb();
    const s3 = await startS3(t, 'rebuild-race');
    const store = await openRedisStore(t, redis.url);
    const real = sinkFor(s3);
    const first = await debits(redis.client, 'race', 14);
    t.equal((await exporterOf(store, real, 0).runOnce()).trimmed, 14, 'a first part exported and trimmed');
    const rest = await debits(redis.client, 'race', 21, 14);
    // Another instance's export pass runs while the rebuild reads an object.
    let during: Promise<unknown> | undefined;
    const sink: LedgerSink = {
      ...real,
      get: async (key) => {
        during ??= exporterOf(store, real, 0).runOnce();
        await during;
        return real.get(key);
      },
    };
    const report = await rebuildUsage({ store, sink, prefix: PREFIX, retentionDays: 400, leaseWaitMs: 5000 }, 'race', today(), today());
    t.equal(report.entries, 35, 'every debit counted: none lost to the trim meanwhile');
    t.same(await store.usageCells('race', today(), today()), merge(first, rest), 'the cells are the ledger sums');
    t.ok(during, 'an export pass ran during the rebuild');
    // The lease is given back: the next pass exports (and trims) the rest.
    const after = await exporterOf(store, real, 0).runOnce();
    t.equal(after.busy, 0, 'the rebuild released the lease');
    t.equal((await store.ledger('race', undefined, 100)).length, 0, 'the account is exported and trimmed once the rebuild is done');
  });

  t.test('a debit appended days after its billing instant (a settle replayed from the spool) is counted', async (t) => {
    await redis.client.flushdb();
    const store = await openRedisStore(t, redis.url);
    await store.createKey('hash-late', keyRecordOf('late', 'k0', { env: 'live' }));
    // Billed 4 days ago, landed now: every instance was down until now, its settle spooled, its hold bucket
    // waiting unreaped. Its ts is the billing instant, its id Redis' clock when it landed.
    const billed = new Date(Date.now() - 4 * 86_400_000).toISOString();
    const day = billed.slice(0, 10);
    await redis.client.xadd(K.ledger('late'), '*', 'd', JSON.stringify([-40, billed, 'req-1', 'k0', 'm0', 10, 5, 'upstream']), 'h', '40');
    const cell: UsageCell = {
      day,
      key_id: 'k0',
      model: 'm0',
      requests: 1,
      prompt_tokens: 10,
      completion_tokens: 5,
      cost_micros: 40,
      cached_tokens: 0,
    };
    // Its usage flush, spooled beside it, replayed too: the aggregates are right before the rebuild.
    await store.flushUsage({ cells: [{ account: 'late', ...cell }], lastUsed: [], ledgerAccounts: [], retentionDays: 400 });
    const report = await rebuildUsage({ store, sink: undefined, prefix: PREFIX, retentionDays: 400 }, 'late', day, day);
    t.equal(report.entries, 1, 'the debit counted');
    t.same(await store.usageCells('late', day, day), [cell], 'the cell is still the ledger sum (before: emptied)');
  });

  t.test('the export turned off after it trimmed: a rebuild of the trimmed days is refused, nothing replaced', async (t) => {
    await redis.client.flushdb();
    const s3 = await startS3(t, 'rebuild-off');
    const store = await openRedisStore(t, redis.url);
    const trimmed = await debits(redis.client, 'off', 10);
    t.equal((await exporterOf(store, sinkFor(s3), 0).runOnce()).trimmed, 10, 'exported and trimmed while the export was on');
    const kept = await debits(redis.client, 'off', 4, 10);
    const right = merge(trimmed, kept);
    await store.replaceUsage('off', today(), ['k0', 'k1', 'k2'], right, 400);
    // ledger.export.enabled: false from now on: the gateway hands the rebuild no bucket.
    await t.rejects(
      rebuildUsage({ store, sink: undefined, prefix: PREFIX, retentionDays: 400 }, 'off', today(), today()),
      { code: 'invalid_request', message: /exported and trimmed/ },
      'refused: Redis holds 4 of its 14 debits (before: the cells were replaced by those 4)',
    );
    t.same(await store.usageCells('off', today(), today()), right, 'the cells are left as they were');
    t.equal(await redis.client.get(K.exportLease('off')), null, 'the lease is released');
  });

  t.test('a trim the lease did not stop (an exporter that lost its lease to a pause): refused, nothing replaced', async (t) => {
    await redis.client.flushdb();
    const real = await openRedisStore(t, redis.url);
    await debits(redis.client, 'stale', 2500);
    const cell = K.usageDay('stale', today());
    await redis.client.hset(cell, 'k0|m0|r', '7');
    let reads = 0;
    const store: Store = {
      ...real,
      ledger: async (account, after, limit) => {
        // After the first page: a stale exporter trims entries the rebuild has not read yet.
        if (limit > 1 && reads++ === 1) {
          const ids = (await redis.client.xrange(K.ledger(account), '-', '+', 'COUNT', 2000)) as [string, string[]][];
          await redis.client.xtrim(K.ledger(account), 'MINID', ids.at(-1)![0]);
        }
        return real.ledger(account, after, limit);
      },
    };
    await t.rejects(
      rebuildUsage({ store, sink: undefined, prefix: PREFIX, retentionDays: 400 }, 'stale', today(), today()),
      { code: 'overloaded' },
      'the rebuild fails: it cannot tell what it missed',
    );
    t.equal(await redis.client.hget(cell, 'k0|m0|r'), '7', 'the cells are left as they were');
    t.equal(await redis.client.get(K.exportLease('stale')), null, 'the lease is released');
  });
}
