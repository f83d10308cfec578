/**
 * `tollgate usage rebuild` (SPEC §10): recomputes an account's aggregates for a range of days from the
 * ledger — the exported objects for what was trimmed from Redis, Redis for the rest, each entry counted
 * once — and replaces the stored cells of every live key of those days. Test keys write no ledger, so
 * their cells stay as recorded.
 *
 * Bounded by the cells, not by the entries (an account may have millions in the range): each page of
 * Redis and each object is folded into the cells as it is read, and nothing holds the entries. Counting
 * each entry once without remembering ids: the rebuild holds the account's export lease, so nothing is
 * trimmed while it reads, and takes Redis' first entry id `first` under it. Redis then holds exactly the
 * entries from `first` on, and every entry before `first` was exported (only exported entries are
 * trimmed): Redis is read from `first`, the objects for what lies before it. Only a day that has a
 * conflict copy (written beside an object after Redis lost writes: docs/ledger-export.md) is
 * deduplicated by id, that day alone.
 *
 * Aggregates may lag the ledger by the flush interval, so a rebuild of today while requests flow can
 * miss or double what the last flushes carried; rebuild past days, or today once traffic is quiet.
 */
import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { GatewayError } from '../http/errors.ts';
import { compareIds, decodeObject, entryDay, type ExportedEntry } from '../ledger/entries.ts';
import type { LedgerSink } from '../ledger/sink.ts';
import type { LedgerEntry, Store, UsageCell } from '../store/types.ts';
import { daysBetween } from '../store/usage-fields.ts';
import { servedRequests } from './usage.ts';

export interface RebuildDeps {
  store: Store;
  /** Where exported objects are read from; absent when export is off (then Redis holds the whole ledger). */
  sink: LedgerSink | undefined;
  prefix: string;
  retentionDays: number;
  /** The export lease's lifetime (default 60 s, the exporter's); renewed at a third of it. */
  leaseMs?: number;
  /** How long to wait for an export pass holding the account's lease (default 30 s; then 503 overloaded). */
  leaseWaitMs?: number;
}

export interface RebuildReport {
  account: string;
  from: string;
  to: string;
  /** Debit entries counted. */
  entries: number;
  /** Entries of the range (of any kind) read from exported objects. */
  from_objects: number;
  cells: number;
}

const DAY_MS = 86_400_000;
const PAGE = 1000;
/** An object written beside another after Redis lost writes: `<first id>.<8 hex>.ndjson.gz` (entries.ts conflictKey). */
const CONFLICT_COPY = /\/\d+-\d+(?:\.\d{1,4})?\.[0-9a-f]{8}\.ndjson\.gz$/;

export async function rebuildUsage(d: RebuildDeps, account: string, from: string, to: string): Promise<RebuildReport> {
  const days = daysBetween(from, to);
  const leaseMs = d.leaseMs ?? 60_000;
  const cells = new Map<string, UsageCell>();
  let debits = 0;
  let fromObjects = 0;

  /** Folds one entry into its cell when it is a debit of a key and model in the range. */
  function fold(e: LedgerEntry): void {
    if (e.kind !== 'debit' || !e.key_id || !e.model) return;
    const day = entryDay(e);
    if (day < from || day > to) return;
    debits++;
    const id = `${day}\n${e.key_id}\n${e.model}`;
    let c = cells.get(id);
    if (!c) {
      c = { day, key_id: e.key_id, model: e.model, requests: 0, prompt_tokens: 0, completion_tokens: 0, cost_micros: 0, cached_tokens: 0 };
      cells.set(id, c);
    }
    // Requests served, as the aggregates count them (usage.ts servedRequests): a zero-cost entry of a
    // request that billed no token is none.
    c.requests += servedRequests(e.prompt_tokens ?? 0, e.completion_tokens ?? 0);
    c.prompt_tokens += e.prompt_tokens ?? 0;
    c.completion_tokens += e.completion_tokens ?? 0;
    c.cost_micros += 0 - e.amount_micros;
    // Entries from before cached pricing (and those without cached tokens) carry no cached_tokens: 0.
    c.cached_tokens += e.cached_tokens ?? 0;
  }

  // The export lease: no trim (and no export) of this account while the rebuild reads.
  const token = randomUUID();
  let leasedAt = performance.now();
  for (const waitUntil = leasedAt + (d.leaseWaitMs ?? 30_000); !(await d.store.acquireExportLease(account, token, leaseMs));) {
    if (performance.now() >= waitUntil)
      throw new GatewayError('overloaded', 'The ledger export of this account is running; retry the rebuild in a minute.', {
        headers: { 'retry-after': '60' },
      });
    await new Promise((r) => setTimeout(r, 200));
    leasedAt = performance.now();
  }
  /** Renews the lease at a third of its lifetime; losing it (a pause past it) fails the rebuild unapplied. */
  const renew = async () => {
    if (performance.now() - leasedAt < leaseMs / 3) return;
    const at = performance.now();
    if (!(await d.store.acquireExportLease(account, token, leaseMs)))
      throw new GatewayError(
        'overloaded',
        'The rebuild lost the export lease of this account (paused too long); nothing was replaced. Retry it.',
      );
    leasedAt = at;
  };
  try {
    // Without the bucket (ledger.export off) Redis must hold the range whole. It does not when an export that
    // was on earlier trimmed entries the range may hold (ids from a day before its start): counting only what
    // Redis kept replaced the cells with a fraction of the bill. Refused, nothing replaced.
    if (!d.sink) {
      const { archived_before: archived } = await d.store.exportState(account);
      if (archived !== null && compareIds(archived, `${Date.parse(`${from}T00:00:00Z`) - DAY_MS}-0`) > 0)
        throw new GatewayError(
          'invalid_request',
          `Entries of this account before ${archived} were exported and trimmed from Redis, and the ledger export is off: ` +
            'the rebuild cannot read them. Enable ledger.export (its bucket) to rebuild these days; nothing was replaced.',
        );
    }
    // Redis' first entry now: from it on Redis holds every entry, before it only the objects do.
    const first = (await d.store.ledger(account, undefined, 1))[0]?.id;

    // Redis from a day before the range (an entry's id is Redis' clock, its ts ours) to its end. Not only to
    // a day after the range: a settle is appended when it lands, with its billing instant as ts, and one
    // replayed from the spool lands whenever the next process starts (its hold bucket waits for it until
    // the reaper runs), days later when every instance was down that long. Cut at `to` + 1 day, such a
    // debit was counted by neither part (Redis not read that far, its object skipped as Redis' to read),
    // and the rebuild replaced the right cell with a lower one.
    let after: string | undefined = `${Date.parse(`${from}T00:00:00Z`) - DAY_MS - 1}-18446744073709551615`;
    if (first !== undefined && compareIds(after, first) < 0) after = undefined;
    if (first !== undefined) {
      for (;;) {
        const page = await d.store.ledger(account, after, PAGE);
        for (const e of page) fold(e);
        if (page.length < PAGE) break;
        after = page.at(-1)!.id;
        await renew();
      }
      // The trim is not fenced by the lease's token: an exporter that lost its lease to a pause may still
      // trim. Then some entries from `first` on may have left Redis unread: refuse rather than undercount.
      const now = (await d.store.ledger(account, undefined, 1))[0]?.id;
      if (now !== first)
        throw new GatewayError(
          'overloaded',
          'The ledger of this account was trimmed while the rebuild read it; nothing was replaced. Retry it.',
        );
    }

    if (d.sink) {
      const beforeRedis = (e: ExportedEntry) => e.account === account && (first === undefined || compareIds(e.id, first) < 0);
      for (const day of days) {
        const keys = await d.sink.list(`${d.prefix}dt=${day}/${encodeURIComponent(account)}/`);
        // Normally each entry is in one object; a day with a conflict copy has some in two: by id, this day only.
        const seen = keys.some((k) => CONFLICT_COPY.test(k)) ? new Set<string>() : undefined;
        for (const key of keys) {
          for (const e of await decodeObject(await d.sink.get(key))) {
            if (!beforeRedis(e) || seen?.has(e.id)) continue;
            seen?.add(e.id);
            fromObjects++;
            fold(e);
          }
          await renew();
        }
      }
    }
  } finally {
    await d.store.releaseExportLease(account, token).catch(() => {});
  }

  const liveKeys = (await d.store.listKeys(account)).filter((k) => k.env === 'live').map((k) => k.id);
  const replaced = [...new Set([...liveKeys, ...[...cells.values()].map((c) => c.key_id)])];
  for (const day of days) {
    const ofDay = [...cells.values()].filter((c) => c.day === day);
    await d.store.replaceUsage(account, day, replaced, ofDay, d.retentionDays);
  }
  return { account, from, to, entries: debits, from_objects: fromObjects, cells: cells.size };
}
