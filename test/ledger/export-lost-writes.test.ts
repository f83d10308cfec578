// The ledger export when Redis is behind S3 (docs/ledger-export.md "When Redis lost writes"), against a
// real Redis and a signature-checking S3: a restore from an older snapshot (DUMP/RESTORE of the account's
// keys, as a restore or an async-replica failover leaves them) must not make the next pass overwrite the
// object that holds the lost, already exported entries; a crash-retry with a smaller batch still replaces
// its orphan whole; and an exporter whose reads outlived half its lease writes nothing.
import { Writable } from 'node:stream';
import { gunzipSync } from 'node:zlib';
import t from 'tap';
import { createLedgerExporter, type LedgerExporterDeps } from '../../src/ledger/exporter.ts';
import { decodeObject } from '../../src/ledger/entries.ts';
import type { LedgerSink } from '../../src/ledger/sink.ts';
import { createLogger } from '../../src/obs/logger.ts';
import * as K from '../../src/store/redis-keys.ts';
import type { LedgerEntry, Store } from '../../src/store/types.ts';
import { startRedis } from '../helpers/redis.ts';
import { startS3 } from '../helpers/s3.ts';
import { checkExactlyOnce, exportedLines, openRedisStore, PREFIX, sinkFor } from './support.ts';

/** An object's line count, at once (the trace keeps the order requests were made in). */
const linesOf = (body: Buffer) =>
  gunzipSync(body)
    .toString('utf8')
    .split('\n')
    .filter((l) => l !== '').length;
const logs: string[] = [];
const logger = createLogger('warn', new Writable({ write: (c, _e, cb) => void (logs.push(String(c)), cb()) }));
const errorLines = () => logs.map((l) => JSON.parse(l) as { level: number; msg: string; lost_ids?: string[] }).filter((l) => l.level >= 50);

function exporter(store: Store, o: Partial<LedgerExporterDeps> & Pick<LedgerExporterDeps, 'sink'>) {
  return createLedgerExporter({
    store,
    logger,
    now: Date.now,
    prefix: PREFIX,
    batchSize: 10_000,
    retentionDays: 7,
    intervalSeconds: 60,
    ...o,
  });
}

async function ledgerOf(store: Store, account: string): Promise<LedgerEntry[]> {
  return store.ledger(account, undefined, 10_000);
}

/** The account's keys a restore brings back (ledger, balance, export cursor). */
const keysOf = (a: string) => [K.ledger(a), K.balance(a), K.exportState(a)];

const grant = (store: Store, a: string, note: string) => store.grant(a, 100, undefined, note, new Date().toISOString());

const redis = await startRedis(t);
if (redis) {
  const snapshot = async (a: string) => Promise.all(keysOf(a).map((k) => redis.client.dumpBuffer(k)));
  const restore = async (a: string, snap: (Buffer | null)[]) => {
    const keys = keysOf(a);
    for (let i = 0; i < keys.length; i++) {
      const dump = snap[i];
      if (dump) await redis.client.restore(keys[i]!, 0, dump, 'REPLACE');
      else await redis.client.del(keys[i]!);
    }
  };

  for (const appended of [true, false]) {
    t.test(
      `Redis restored from before an exported pass${appended ? ', then a new entry' : ''}: the exported entries stay in S3`,
      async (t) => {
        await redis.client.flushdb();
        logs.length = 0;
        const s3 = await startS3(t, appended ? 'ledger-restore-new' : 'ledger-restore');
        const sink = sinkFor(s3);
        const store = await openRedisStore(t, redis.url);
        const ex = exporter(store, { sink });
        for (let i = 1; i <= 3; i++) await grant(store, 'acct', `g${i}`);
        const snap = await snapshot('acct');
        for (let i = 4; i <= 6; i++) await grant(store, 'acct', `g${i}`);
        const before = await ledgerOf(store, 'acct');
        t.equal((await ex.runOnce()).entries, 6, 'pass 1 exports g1..g6');
        const [first] = await sink.list(PREFIX);

        await restore('acct', snap); // Redis lost g4..g6 and the cursor move
        t.same(
          (await ledgerOf(store, 'acct')).map((e) => e.note),
          ['g1', 'g2', 'g3'],
        );
        await new Promise((r) => setTimeout(r, 5));
        if (appended) await grant(store, 'acct', 'g7');
        const r2 = await ex.runOnce();
        t.equal(r2.failed, 0, 'pass 2 succeeds', { logs });
        t.equal(r2.conflicts, 1, 'and reports the conflict');

        const firstNow = (await decodeObject(await sink.get(first!))).map((e) => e.note);
        t.same(firstNow, ['g1', 'g2', 'g3', 'g4', 'g5', 'g6'], 'the object holding g4..g6 was not replaced');
        const notes = new Set((await exportedLines(sink)).map((l) => l.entry.note));
        t.same([...notes].sort(), appended ? ['g1', 'g2', 'g3', 'g4', 'g5', 'g6', 'g7'] : ['g1', 'g2', 'g3', 'g4', 'g5', 'g6']);
        // Every entry Redis has now and every entry it ever had is in S3; by account + id each is one entry.
        const byId = new Map<string, string>();
        for (const { entry } of await exportedLines(sink)) {
          const line = JSON.stringify(entry);
          t.ok(!byId.has(entry.id) || byId.get(entry.id) === line, `${entry.id}: its copies are identical`);
          byId.set(entry.id, line);
        }
        for (const e of [...before, ...(await ledgerOf(store, 'acct'))]) t.ok(byId.has(e.id), `${e.note} is in S3`);
        const errs = errorLines();
        t.equal(errs.length, 1, 'one error line for the operator');
        t.match(errs[0]!.msg, /Reconcile/);
        t.same(
          errs[0]!.lost_ids,
          before.slice(3).map((e) => e.id),
          'naming the entries only S3 has',
        );
        t.ok(
          (await sink.list(PREFIX)).every((k) => k.endsWith('.ndjson.gz')),
          'the batch written beside it is still read by a *.ndjson.gz glob',
        );
        t.equal((await ex.runOnce()).conflicts, 0, 'the next pass has nothing more to write');
      },
    );
  }

  t.test('a crash between write and commit, retried with a smaller batch size: the orphan is replaced, no conflict', async (t) => {
    await redis.client.flushdb();
    logs.length = 0;
    const s3 = await startS3(t, 'ledger-shrink');
    const s3sink = sinkFor(s3);
    const store = await openRedisStore(t, redis.url);
    for (let i = 0; i < 10; i++) await grant(store, 'acct', `n${i}`);
    // S3 acknowledges, then the process "dies" before its commit: the cursor stays.
    const crashing: LedgerSink = {
      ...s3sink,
      put: async (key, body, signal) => {
        await s3sink.put(key, body, signal);
        throw new Error('killed after the write');
      },
    };
    t.equal((await exporter(store, { sink: crashing, batchSize: 10 }).runOnce()).failed, 1);
    t.equal((await store.exportState('acct')).cursor, null);
    t.equal((await s3sink.list(PREFIX)).length, 1, 'an orphan with all 10 entries');
    const small = exporter(store, { sink: s3sink, batchSize: 4 });
    for (let i = 0; i < 4; i++) {
      const r = await small.runOnce();
      t.equal(r.conflicts + r.failed, 0, `pass ${i + 1}: no conflict, no failure`, { logs });
    }
    t.same(errorLines(), [], 'no error line');
    await checkExactlyOnce(t, s3sink, new Map([['acct', await ledgerOf(store, 'acct')]]));
  });

  t.test('reads that outlive half the lease: nothing is written after that point', async (t) => {
    await redis.client.flushdb();
    logs.length = 0;
    const s3 = await startS3(t, 'ledger-late');
    const s3sink = sinkFor(s3);
    const store = await openRedisStore(t, redis.url);
    for (let i = 0; i < 3; i++) await grant(store, 'acct', `g${i}`);
    const LEASE = 300;
    // A's first ledger read stalls past its whole lease (a GC pause, a slow Redis); B's does not.
    let stall = true;
    let stalled!: () => void;
    const stallStarted = new Promise<void>((r) => (stalled = r));
    const slow: Store = {
      ...store,
      ledger: async (...a: Parameters<Store['ledger']>) => {
        const page = await store.ledger(...a);
        if (stall) {
          stall = false;
          stalled();
          await new Promise((r) => setTimeout(r, LEASE + 100));
        }
        return page;
      },
    };
    const requests: string[] = [];
    const traced = (name: string): LedgerSink => ({
      ...s3sink,
      find: (key, signal) => (requests.push(`${name} find`), s3sink.find(key, signal)),
      put: (key, body, signal) => (requests.push(`${name} put ${linesOf(body)}`), s3sink.put(key, body, signal)),
    });
    const a = exporter(slow, { sink: traced('A'), leaseMs: LEASE, retentionDays: 0 });
    const b = exporter(store, { sink: traced('B'), leaseMs: LEASE, retentionDays: 0 });
    const runA = a.runOnce();
    // Counted from A's stall, not from runOnce(): on a loaded machine taking the lease can itself take a
    // while, and B, started too early, found A's lease still held (busy: 0 entries).
    await stallStarted;
    await new Promise((r) => setTimeout(r, LEASE + 20)); // A's lease has lapsed in Redis
    for (let i = 3; i < 5; i++) await grant(store, 'acct', `g${i}`);
    const all = await ledgerOf(store, 'acct');
    const rb = await b.runOnce();
    t.equal(rb.entries, 5, 'B took over and exported all five');
    const ra = await runA;
    t.equal(ra.failed, 1, 'A gave up');
    t.same(
      requests.filter((r) => r.startsWith('A')),
      [],
      'A sent S3 nothing after its deadline',
    );
    t.equal(rb.trimmed, 5, 'retention 0: B trimmed what it exported');
    await checkExactlyOnce(t, s3sink, new Map([['acct', all]]));
  });
}
