/**
 * `tollgate usage rebuild` (SPEC §10): recomputes an account's aggregates for a range of days from the
 * ledger — the exported objects for what was trimmed from Redis, Redis for the rest, each entry counted
 * once by its id — and replaces the stored cells of every live key of those days. Test keys write no
 * ledger, so their cells stay as recorded.
 *
 * Aggregates may lag the ledger by the flush interval, so a rebuild of today while requests flow can
 * miss or double what the last flushes carried; rebuild past days, or today once traffic is quiet.
 */
import { compareIds, decodeObject, entryDay, idAtMs, type ExportedEntry } from '../ledger/entries.ts';
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
}

export interface RebuildReport {
  account: string;
  from: string;
  to: string;
  /** Debit entries counted. */
  entries: number;
  /** Of which read from exported objects. */
  from_objects: number;
  cells: number;
}

const DAY_MS = 86_400_000;
const PAGE = 1000;

export async function rebuildUsage(d: RebuildDeps, account: string, from: string, to: string): Promise<RebuildReport> {
  const days = daysBetween(from, to);
  const inRange = (e: LedgerEntry) => {
    const day = entryDay(e);
    return day >= from && day <= to;
  };
  const entries = new Map<string, LedgerEntry>();
  let fromObjects = 0;
  if (d.sink) {
    for (const day of days) {
      for (const key of await d.sink.list(`${d.prefix}dt=${day}/${encodeURIComponent(account)}/`)) {
        for (const e of decodeObject(await d.sink.get(key))) {
          if (e.account !== account || !inRange(e) || entries.has(e.id)) continue;
          const { account: _, ...entry } = e as ExportedEntry;
          entries.set(e.id, entry);
          fromObjects++;
        }
      }
    }
  }
  // Redis from a day before the range (an entry's id is Redis' clock, its ts ours) to a day after it.
  const startMs = Date.parse(`${from}T00:00:00Z`) - DAY_MS;
  const endId = idAtMs(Date.parse(`${to}T00:00:00Z`) + 2 * DAY_MS);
  let after: string | undefined = `${startMs - 1}-18446744073709551615`;
  for (;;) {
    const page = await d.store.ledger(account, after, PAGE);
    for (const e of page) if (inRange(e) && !entries.has(e.id)) entries.set(e.id, e);
    if (page.length < PAGE || compareIds(page.at(-1)!.id, endId) > 0) break;
    after = page.at(-1)!.id;
  }

  const cells = new Map<string, UsageCell>();
  let debits = 0;
  for (const e of entries.values()) {
    if (e.kind !== 'debit' || !e.key_id || !e.model) continue;
    debits++;
    const id = `${entryDay(e)}\n${e.key_id}\n${e.model}`;
    let c = cells.get(id);
    if (!c) {
      c = {
        day: entryDay(e),
        key_id: e.key_id,
        model: e.model,
        requests: 0,
        prompt_tokens: 0,
        completion_tokens: 0,
        cost_micros: 0,
        cached_tokens: 0,
      };
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
  const liveKeys = (await d.store.listKeys(account)).filter((k) => k.env === 'live').map((k) => k.id);
  const replaced = [...new Set([...liveKeys, ...[...cells.values()].map((c) => c.key_id)])];
  for (const day of days) {
    const ofDay = [...cells.values()].filter((c) => c.day === day);
    await d.store.replaceUsage(account, day, replaced, ofDay, d.retentionDays);
  }
  return { account, from, to, entries: debits, from_objects: fromObjects, cells: cells.size };
}
