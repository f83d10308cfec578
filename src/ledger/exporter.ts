/**
 * The ledger export (SPEC §4, §10; the argument is in docs/ledger-export.md). Every instance runs it;
 * per account, one at a time holds a lease in Redis and:
 *   1. reads up to `batch_size` entries after the account's cursor,
 *   2. writes them to S3, one object per UTC day named by its first entry id (a retry rewrites the same
 *      object whole; an object under that name holding entries Redis no longer has is kept, and the
 *      batch is written beside it),
 *   3. moves the cursor to the last entry only after S3 acknowledged every object, fenced by the lease
 *      token and by the cursor it started from,
 * then trims what is both exported and older than `retention_days`. An S3 write is abandoned before the
 * lease can lapse, so no holder that lost its lease still writes an object that a newer holder made.
 */
import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import type { Logger } from '../obs/logger.ts';
import type { LedgerEntry, Store } from '../store/types.ts';
import { byDay, compareIds, conflictKey, decodeObject, encodeObject, type ExportedEntry, idAtMs, objectKey } from './entries.ts';
import type { LedgerSink } from './sink.ts';

export interface ExportReport {
  /** Accounts this run exported or trimmed (their lease was taken). */
  accounts: number;
  /** Accounts skipped: another exporter held the lease. */
  busy: number;
  entries: number;
  objects: number;
  trimmed: number;
  /** Accounts whose export failed (S3 or store); retried next run. */
  failed: number;
  /**
   * Objects written beside an existing one of the same name because that one holds entries Redis no
   * longer has (Redis lost writes); each is logged at error level. The operator reconciles.
   */
  conflicts: number;
}

export interface LedgerExporter {
  /** One pass over every indexed account; concurrent calls share the pass in progress. */
  runOnce(): Promise<ExportReport>;
  /** Runs a pass every `intervalSeconds` until stop(). */
  start(): void;
  /** Stops the timer and waits for a pass in progress. */
  stop(): Promise<void>;
}

export interface LedgerExporterDeps {
  store: Store;
  sink: LedgerSink;
  logger: Logger;
  now: () => number;
  prefix: string;
  batchSize: number;
  retentionDays: number;
  intervalSeconds: number;
  /** The lease's lifetime (default 60 s); S3 writes are cut at half of it. */
  leaseMs?: number;
  /** Accounts exported in parallel by one process. */
  concurrency?: number;
  /**
   * Full batches one account exports before the others get a turn (default 4); an account with more to
   * go is queued again behind them within the same pass. A backlog (export off for weeks, S3 down) of
   * a few accounts then no longer holds every other account's export back until it is drained.
   */
  batchesPerTurn?: number;
  /** Told after each pass what it did (metrics). */
  onReport?: (r: ExportReport) => void;
}

const DAY_MS = 86_400_000;

export function createLedgerExporter(d: LedgerExporterDeps): LedgerExporter {
  const leaseMs = d.leaseMs ?? 60_000;
  const concurrency = d.concurrency ?? 4;
  const batchesPerTurn = Math.max(1, d.batchesPerTurn ?? 4);
  let backfilled = false;
  let current: Promise<ExportReport> | undefined;
  let timer: NodeJS.Timeout | undefined;

  /**
   * The ids of an existing object's entries that neither the batch nor Redis after it holds, identical:
   * none when the object is an earlier attempt at this batch (a crash between its write and its commit,
   * with this batch size or a larger one), some when Redis lost writes after they were exported (a
   * restore from an older snapshot, a failover to a replica that missed them). Those must not be
   * overwritten: the object is the only copy left.
   */
  async function notHeld(account: string, existing: ExportedEntry[], batch: LedgerEntry[], full: boolean): Promise<string[]> {
    const line = (e: LedgerEntry) => JSON.stringify({ ...e, account });
    const held = new Map(batch.map((e) => [e.id, line(e)]));
    const last = batch.at(-1)!.id;
    const lost: string[] = [];
    const beyond: ExportedEntry[] = [];
    for (const e of existing) {
      if (compareIds(e.id, last) > 0) beyond.push(e);
      else if (held.get(e.id) !== JSON.stringify(e)) lost.push(e.id);
    }
    if (beyond.length === 0) return lost;
    // A batch shorter than batch_size read everything Redis had after the cursor, so entries past its
    // end are gone. A full one stopped early: an earlier attempt with a larger batch size also wrote the
    // entries that follow it in Redis, and they are exported next (rare: read them to tell).
    const rest = new Map<string, string>();
    if (full) {
      const end = beyond.reduce((m, e) => (compareIds(e.id, m) > 0 ? e.id : m), last);
      for (let after = last; ;) {
        const page = await d.store.ledger(account, after, d.batchSize);
        for (const e of page) rest.set(e.id, line(e));
        if (page.length < d.batchSize || compareIds(page.at(-1)!.id, end) >= 0) break;
        after = page.at(-1)!.id;
      }
    }
    for (const e of beyond) if (rest.get(e.id) !== JSON.stringify(e)) lost.push(e.id);
    return lost;
  }

  /**
   * Exports up to `batchesPerTurn` batches of one account's new entries, then trims; the lease is released
   * whatever happens. Resolves true when the last batch was full (more may be waiting: queue it again).
   */
  async function exportAccount(account: string, r: ExportReport): Promise<boolean> {
    const token = randomUUID();
    // Measured before the lease command is sent: Redis starts its PX later, so our deadline is never past its.
    let leasedAt = performance.now();
    if (!(await d.store.acquireExportLease(account, token, leaseMs))) {
      r.busy++;
      return false;
    }
    r.accounts++;
    let more = false;
    try {
      for (let batches = 1; ; batches++) {
        const { cursor } = await d.store.exportState(account);
        const entries = await d.store.ledger(account, cursor ?? undefined, d.batchSize);
        if (entries.length === 0) break;
        const deadline = leasedAt + leaseMs / 2;
        const signal = AbortSignal.timeout(Math.max(0, Math.floor(deadline - performance.now())));
        // Checked against the clock before each request: a timeout signal whose time has already passed
        // aborts only on a later tick, so `throwIfAborted` alone lets a late write through.
        const inTime = () => {
          if (performance.now() >= deadline) throw new Error('half the lease has passed; nothing more is written');
          signal.throwIfAborted();
        };
        for (const [day, list] of byDay(entries)) {
          let key = objectKey(d.prefix, day, account, list[0]!.id);
          inTime();
          const existing = await d.sink.find(key, signal);
          if (existing) {
            const lost = await notHeld(account, await decodeObject(existing), entries, entries.length === d.batchSize);
            if (lost.length > 0) {
              const taken = key;
              key = conflictKey(d.prefix, day, account, list[0]!.id, randomUUID().slice(0, 8));
              r.conflicts++;
              d.logger.error(
                { account, object: taken, written: key, lost_entries: lost.length, lost_ids: lost.slice(0, 10) },
                'ledger export: an exported object holds entries Redis no longer has (a restore or failover lost writes); ' +
                  'it is kept and this batch is written beside it. Reconcile the account (docs/operations.md "Reconciling from the exported ledger")',
              );
            }
          }
          const body = await encodeObject(account, list);
          inTime();
          await d.sink.put(key, body, signal);
          r.objects++;
        }
        if (!(await d.store.commitExport(account, token, cursor, entries.at(-1)!.id))) {
          // Fenced: another exporter took over (our lease lapsed) or moved the cursor. Its objects stand.
          d.logger.warn({ account }, 'ledger export: lease lost before the cursor moved; another exporter continues');
          return false;
        }
        r.entries += entries.length;
        if (entries.length < d.batchSize) break;
        // Its turn is over: trimmed now, the rest after every other account of this scan had its turn.
        if (batches >= batchesPerTurn) {
          more = true;
          break;
        }
        leasedAt = performance.now();
        if (!(await d.store.acquireExportLease(account, token, leaseMs))) return false;
      }
      // Awaited first: `r.trimmed += await …` would read r.trimmed before the await and lose the other
      // accounts' counts added meanwhile (accounts run concurrently).
      const trimmed = await d.store.trimLedger(account, idAtMs(d.now() - d.retentionDays * DAY_MS));
      r.trimmed += trimmed;
    } catch (err) {
      r.failed++;
      d.logger.warn({ account, err: (err as Error).message }, 'ledger export failed for an account; retried on the next run');
    } finally {
      await d.store.releaseExportLease(account, token).catch(() => {});
    }
    return more;
  }

  async function pass(): Promise<ExportReport> {
    const r: ExportReport = { accounts: 0, busy: 0, entries: 0, objects: 0, trimmed: 0, failed: 0, conflicts: 0 };
    if (!backfilled) {
      // Accounts whose ledger predates the index (an upgrade), or whose entries were never indexed
      // (a process died between its settle and its usage flush): found once per process.
      const n = await d.store.backfillLedgerIndex();
      backfilled = true;
      if (n > 0) d.logger.info({ accounts: n }, 'ledger export: indexed accounts with a ledger');
    }
    await d.store.scanLedgerAccounts(async (accounts) => {
      // A queue, not a list: an account whose turn ended with more to export goes to its back.
      const queue = [...accounts];
      let next = 0;
      const worker = async () => {
        while (next < queue.length) {
          const account = queue[next++]!;
          if (await exportAccount(account, r)) queue.push(account);
        }
      };
      await Promise.all(Array.from({ length: Math.min(concurrency, queue.length) }, worker));
    });
    if (r.entries > 0 || r.trimmed > 0 || r.failed > 0 || r.conflicts > 0) d.logger.info({ ledger_export: r }, 'ledger export run');
    d.onReport?.(r);
    return r;
  }

  function runOnce(): Promise<ExportReport> {
    current ??= pass().finally(() => (current = undefined));
    return current;
  }

  return {
    runOnce,
    start() {
      timer ??= setInterval(
        () =>
          void runOnce().catch((err: unknown) =>
            d.logger.warn({ err: (err as Error).message }, 'ledger export run failed; retried next run'),
          ),
        d.intervalSeconds * 1000,
      );
      timer.unref();
    },
    async stop() {
      clearInterval(timer);
      timer = undefined;
      await current?.catch(() => {});
    },
  };
}
