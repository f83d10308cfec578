// The ledger export shares a pass between accounts (SPEC §13: one tenant must not hurt the others): an
// account with a backlog (export off for weeks, S3 down for a day) exports `batchesPerTurn` batches and
// goes to the back of the queue, so every other account's entries leave Redis in the same pass instead
// of waiting until the backlog is drained. Real Redis, signature-checking S3; exactly once still holds.
import { Writable } from 'node:stream';
import t from 'tap';
import { createLedgerExporter } from '../../src/ledger/exporter.ts';
import type { LedgerSink } from '../../src/ledger/sink.ts';
import { createLogger } from '../../src/obs/logger.ts';
import type { LedgerEntry, Store } from '../../src/store/types.ts';
import { startRedis } from '../helpers/redis.ts';
import { startS3 } from '../helpers/s3.ts';
import { checkExactlyOnce, openRedisStore, PREFIX, sinkFor } from './support.ts';

const logs: string[] = [];
const logger = createLogger('warn', new Writable({ write: (c, _e, cb) => void (logs.push(String(c)), cb()) }));

async function ledgerOf(store: Store, account: string): Promise<LedgerEntry[]> {
  const out: LedgerEntry[] = [];
  for (;;) {
    const page = await store.ledger(account, out.at(-1)?.id, 1000);
    out.push(...page);
    if (page.length < 1000) return out;
  }
}

const redis = await startRedis(t);
if (redis) {
  t.test('two backlogged accounts and a small one, one worker: each gets a turn of at most batchesPerTurn batches', async (t) => {
    const s3 = await startS3(t, 'ledger-fair');
    const store = await openRedisStore(t, redis.url);
    const sizes = { 'big-1': 24, 'big-2': 24, small: 3 } as const;
    // One UTC day: one object per batch.
    for (const [account, n] of Object.entries(sizes))
      for (let i = 0; i < n; i++) await store.grant(account, i + 1, undefined, `n${i}`, '2026-11-21T12:00:00.000Z');
    const real = sinkFor(s3);
    const puts: string[] = [];
    const sink: LedgerSink = {
      ...real,
      put: async (key, body, signal) => {
        await real.put(key, body, signal);
        puts.push(decodeURIComponent(key.slice(`${PREFIX}dt=2026-11-21/`.length).split('/')[0]!));
      },
    };
    const batchSize = 3;
    const batchesPerTurn = 2;
    const exporter = createLedgerExporter({
      store,
      sink,
      logger,
      now: Date.now,
      prefix: PREFIX,
      batchSize,
      retentionDays: 7,
      intervalSeconds: 60,
      concurrency: 1,
      batchesPerTurn,
    });
    const r = await exporter.runOnce();
    t.equal(r.failed, 0, 'nothing failed', { logs });
    t.equal(r.entries, 24 + 24 + 3, 'one pass exports every account to the end');

    // Batches each account still had to export before each put: no account ran more than its turn in a
    // row while another one was waiting.
    const left = new Map(Object.entries(sizes).map(([a, n]) => [a, Math.ceil(n / batchSize)]));
    let run = 0;
    let longest = 0;
    for (let i = 0; i < puts.length; i++) {
      const a = puts[i]!;
      run = i > 0 && puts[i - 1] === a ? run + 1 : 1;
      const othersWaiting = [...left].some(([b, n]) => b !== a && n > 0);
      if (othersWaiting) longest = Math.max(longest, run);
      left.set(a, left.get(a)! - 1);
    }
    t.ok(longest <= batchesPerTurn, `at most ${batchesPerTurn} batches of one account in a row while another waits (longest ${longest})`, {
      puts,
    });
    const small = puts.indexOf('small');
    t.ok(small >= 0 && small <= 2 * batchesPerTurn, `the small account is exported within the first turns (put #${small + 1})`, { puts });

    const ledgers = new Map<string, LedgerEntry[]>();
    for (const account of Object.keys(sizes)) ledgers.set(account, await ledgerOf(store, account));
    await checkExactlyOnce(t, real, ledgers);
    for (const [account, entries] of ledgers)
      t.equal((await store.exportState(account)).cursor, entries.at(-1)!.id, `${account}: cursor at its last entry`);
  });
}
