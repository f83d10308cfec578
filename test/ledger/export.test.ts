// The ledger export against a real Redis and a signature-checking S3 (SPEC §4, §10): each entry lands in
// exactly one object under two concurrent exporters and across an exporter killed between its S3 write
// and its commit; objects gunzip and parse complete; trimming never removes an unexported entry.
import { spawn } from 'node:child_process';
import { Writable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import { createLedgerExporter, type ExportReport, type LedgerExporterDeps } from '../../src/ledger/exporter.ts';
import { createLogger } from '../../src/obs/logger.ts';
import type { LedgerEntry, Store } from '../../src/store/types.ts';
import { LEASE_AFTER } from '../../src/store/credit-lease.ts';
import { createRedisStore } from '../../src/store/redis-store.ts';
import * as K from '../../src/store/redis-keys.ts';
import { startRedis } from '../helpers/redis.ts';
import { startS3 } from '../helpers/s3.ts';
import { waitFor } from '../helpers/wait.ts';
import { settleOf } from '../store/harness.ts';
import { checkExactlyOnce, exportedLines, openRedisStore, PREFIX, sinkFor } from './support.ts';

const CHILD = fileURLToPath(new URL('./export-child.ts', import.meta.url));
const DAYS = ['2026-11-20T23:59:59.000Z', '2026-11-21T00:00:00.000Z', '2026-11-22T12:00:00.000Z'];

/** Every entry of an account, oldest first. */
async function ledgerOf(store: Store, account: string): Promise<LedgerEntry[]> {
  const out: LedgerEntry[] = [];
  for (;;) {
    const page = await store.ledger(account, out.at(-1)?.id, 1000);
    out.push(...page);
    if (page.length < 1000) return out;
  }
}

/** `n` grants to `account`, their ts cycling through three UTC days (so batches span days). */
async function grants(store: Store, account: string, n: number, from = 0): Promise<void> {
  for (let i = from; i < from + n; i++) await store.grant(account, i + 1, undefined, `n${i}`, DAYS[i % DAYS.length]!);
}

/** What the exporters logged (warnings name the account and the error), shown when a test fails. */
const logs: string[] = [];
const logger = createLogger('warn', new Writable({ write: (c, _e, cb) => void (logs.push(String(c)), cb()) }));

function exporter(store: Store, o: Partial<LedgerExporterDeps> & Pick<LedgerExporterDeps, 'sink'>) {
  return createLedgerExporter({
    store,
    logger,
    now: Date.now,
    prefix: PREFIX,
    batchSize: 7,
    retentionDays: 7,
    intervalSeconds: 60,
    ...o,
  });
}

/** A pass that found nothing left to export and nothing failing. */
const done = (r: ExportReport) => r.entries === 0 && r.failed === 0 && r.busy === 0;

const redis = await startRedis(t, { restartable: true });
if (redis) {
  t.test('two exporters at once, entries appended meanwhile: each entry in exactly one object', async (t) => {
    await redis.client.flushdb();
    const s3 = await startS3(t, 'ledger-concurrent');
    const [storeA, storeB] = [await openRedisStore(t, redis.url), await openRedisStore(t, redis.url)];
    const accounts = ['alpha', 'beta', 'gamma.eu-1', 'delta:x', 'eps', 'zeta'];
    for (const a of accounts) await grants(storeA, a, 20);
    const a = exporter(storeA, { sink: sinkFor(s3) });
    const b = exporter(storeB, { sink: sinkFor(s3) });
    const appending = Promise.all(accounts.map((acct) => grants(storeB, acct, 15, 20)));
    const [ra, rb] = await Promise.all([a.runOnce(), b.runOnce(), appending]);
    t.equal(ra.failed + rb.failed, 0, 'no account failed', { logs });
    t.ok(ra.accounts + rb.accounts + ra.busy + rb.busy >= accounts.length * 2, 'every account was visited by both');
    // Whatever the interleaving, later passes finish what arrived meanwhile.
    await waitFor(async () => done(await a.runOnce()), 10_000, 'a pass with nothing left');
    const ledgers = new Map<string, LedgerEntry[]>();
    for (const acct of accounts) ledgers.set(acct, await ledgerOf(storeA, acct));
    t.equal(
      [...ledgers.values()].reduce((n, l) => n + l.length, 0),
      accounts.length * 35,
    );
    await checkExactlyOnce(t, sinkFor(s3), ledgers);
    for (const acct of accounts)
      t.equal((await storeA.exportState(acct)).cursor, ledgers.get(acct)!.at(-1)!.id, `${acct}: cursor at its last entry`);
  });

  t.test('an exporter killed between its S3 write and its commit: the next one rewrites that object, nothing doubles', async (t) => {
    await redis.client.flushdb();
    const s3 = await startS3(t, 'ledger-killed');
    const store = await openRedisStore(t, redis.url);
    await grants(store, 'acme', 12);
    const child = spawn(process.execPath, [CHILD, redis.url, s3.endpoint, s3.bucket, '1500', '5'], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    t.teardown(() => void child.kill('SIGKILL'));
    let out = '';
    child.stdout.on('data', (b: Buffer) => (out += b.toString()));
    await waitFor(() => out.includes('PUT '), 20_000, "the child's first acknowledged object");
    child.kill('SIGKILL');
    const orphan = /PUT (\S+)/.exec(out)![1]!;
    t.same(await sinkFor(s3).list(PREFIX), [orphan], 'the killed exporter left one object');
    t.equal((await store.exportState('acme')).cursor, null, 'and did not move the cursor');
    await grants(store, 'acme', 4, 12);

    const next = exporter(store, { sink: sinkFor(s3), batchSize: 5, leaseMs: 1500 });
    t.equal((await next.runOnce()).busy, 1, "the dead exporter's lease holds until it expires");
    await waitFor(async () => (await next.runOnce()).entries > 0, 10_000, 'the lease to expire and the export to run');
    await waitFor(async () => done(await next.runOnce()), 10_000, 'a pass with nothing left');
    await checkExactlyOnce(t, sinkFor(s3), new Map([['acme', await ledgerOf(store, 'acme')]]));
    t.ok((await sinkFor(s3).list(PREFIX)).includes(orphan), "the orphan's name was written again, whole");
  });

  t.test('trimming: exported and older than retention goes; unexported never, whatever its age', async (t) => {
    await redis.client.flushdb();
    const s3 = await startS3(t, 'ledger-trim');
    const store = await openRedisStore(t, redis.url);
    await grants(store, 'fine', 9);
    await grants(store, 'broken', 9);
    const full = new Map([
      ['fine', await ledgerOf(store, 'fine')],
      ['broken', await ledgerOf(store, 'broken')],
    ]);
    const s3sink = sinkFor(s3);
    // S3 refuses every object of one account: its entries are never acknowledged.
    const sink = {
      ...s3sink,
      put: (key: string, body: Buffer, signal: AbortSignal) =>
        key.includes('/broken/') ? Promise.reject(new Error('AccessDenied')) : s3sink.put(key, body, signal),
    };
    const keep = exporter(store, { sink, retentionDays: 7 });
    const r1 = await keep.runOnce();
    t.equal(r1.failed, 1, 'the refused account failed');
    t.equal(r1.trimmed, 0, 'entries younger than retention_days stay in Redis although exported');
    t.equal((await ledgerOf(store, 'fine')).length, 9);
    t.equal((await store.exportState('fine')).archived_before, null, 'nothing trimmed: archived_before null');

    const trimAll = exporter(store, { sink, retentionDays: 0 });
    const r2 = await trimAll.runOnce();
    t.equal(r2.trimmed, 9, 'retention 0: every exported entry trimmed');
    t.same(await ledgerOf(store, 'fine'), [], 'fine: Redis holds none of its entries now');
    t.equal(
      (await store.exportState('fine')).archived_before,
      `${full.get('fine')!.at(-1)!.id.split('-')[0]}-${Number(full.get('fine')!.at(-1)!.id.split('-')[1]) + 1}`,
    );
    t.same(await ledgerOf(store, 'broken'), full.get('broken'), 'broken: every unexported entry is still in Redis');
    t.equal((await store.exportState('broken')).archived_before, null);

    const lines = await exportedLines(s3sink);
    const balanceFromObjects = lines.filter((l) => l.entry.account === 'fine').reduce((s, l) => s + l.entry.amount_micros, 0);
    t.equal((await store.getAccount('fine')).balance_micros, balanceFromObjects, 'balance = Σ exported entries (SPEC §4)');
    await checkExactlyOnce(t, s3sink, new Map([['fine', full.get('fine')!]]));
  });

  // store.debit_entries: packed (docs/ledger.md "Packed passes"): a lease's 20 settles of one turn are one
  // stream entry. Batches of 7 cut it: each debit is exported once, the cursor stops inside the entry and
  // the trim keeps it until the cursor is past it.
  t.test('a packed pass cut by batches: each debit exported once, the pass kept until its last debit is past', async (t) => {
    await redis.client.flushdb();
    const s3 = await startS3(t, 'ledger-packed');
    const store = await createRedisStore({
      url: redis.url,
      commandTimeoutMs: 2000,
      settledTtlSeconds: 3600,
      leases: true,
      debitEntries: 'packed',
    });
    t.teardown(() => store.close());
    const acct = 'packed';
    await store.grant(acct, 100_000_000, undefined, 'g', DAYS[0]!);
    const far = Date.now() + 3_600_000;
    for (let i = 0; i < LEASE_AFTER; i++) t.ok((await store.hold(acct, `w${i}`, 1000, far)).ok);
    await waitFor(
      async () => store.leaseStats!().taken > 0 && (await store.getAccount(acct)).held_micros > 8000,
      2000,
      'the lease is taken',
    );
    for (let i = 0; i < LEASE_AFTER; i++) await store.settle(settleOf(acct, `w${i}`, 10, { holdExpiresAtMs: far, holdMicros: 1000 }));
    for (let i = 0; i < 20; i++) t.ok((await store.hold(acct, `r${i}`, 1000, far)).ok);
    const settled = await Promise.all(
      Array.from({ length: 20 }, (_, i) => store.settle(settleOf(acct, `r${i}`, 100 + i, { holdExpiresAtMs: far, holdMicros: 1000 }))),
    );
    t.ok(
      settled.every((r) => r.entry_id.includes('.')),
      'the 20 settles went as one packed pass',
    );
    const full = await ledgerOf(store, acct);
    t.equal(full.length, 1 + 8 + 20);
    const keep = exporter(store, { sink: sinkFor(s3), retentionDays: 0 });
    // Batches of 7: the cursor lands on debits 6, 13 and 20 of the pass on the way (29 entries, 5 batches).
    const r1 = await keep.runOnce();
    t.equal(r1.entries, 29, 'every entry, in batches that cut the pass');
    await waitFor(async () => done(await keep.runOnce()), 10_000, 'a pass with nothing left');
    t.equal((await store.exportState(acct)).cursor, full.at(-1)!.id, "the cursor at the pass's last debit");
    t.equal(await redis.client.xlen(K.ledger(acct)), 1, 'only the pass is left');
    await checkExactlyOnce(t, sinkFor(s3), new Map([[acct, full]]));
    const lines = await exportedLines(sinkFor(s3));
    t.equal(
      lines.reduce((s, l) => s + l.entry.amount_micros, 0),
      (await store.getAccount(acct)).balance_micros,
      'balance = Σ exported entries (SPEC §4)',
    );
  });

  t.test('upgrade: a ledger written before the account index existed is found by the first pass', async (t) => {
    await redis.client.flushdb();
    const s3 = await startS3(t, 'ledger-upgrade');
    const store = await openRedisStore(t, redis.url);
    await grants(store, 'old-timer', 3);
    // As a deployment from before this version left it: the ledger stream, no index.
    await redis.client.del(K.LEDGER_ACCOUNTS);
    const r = await exporter(store, { sink: sinkFor(s3) }).runOnce();
    t.equal(r.entries, 3, 'its entries exported');
    t.equal(await redis.client.sismember(K.LEDGER_ACCOUNTS, 'old-timer'), 1, 'and the account indexed');
    await checkExactlyOnce(t, sinkFor(s3), new Map([['old-timer', await ledgerOf(store, 'old-timer')]]));
  });
}
