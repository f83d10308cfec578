/**
 * Ledger entries as the export writes them (SPEC §10): one NDJSON line per entry, the §2a fields plus
 * `account`, gzipped, one object per account × UTC day of a batch, named by its first entry id.
 */
import { gunzipSync, gzipSync } from 'node:zlib';
import type { LedgerEntry } from '../store/types.ts';

export type ExportedEntry = LedgerEntry & { account: string };

/** Orders two `<ms>-<seq>` stream ids numerically (string order breaks at 9 → 10). */
export function compareIds(a: string, b: string): number {
  const [am = 0, as = 0] = a.split('-').map(Number);
  const [bm = 0, bs = 0] = b.split('-').map(Number);
  return am - bm || as - bs;
}

/** The smallest entry id at or after `ms`. */
export const idAtMs = (ms: number) => `${Math.max(0, Math.floor(ms))}-0`;

/** An entry's UTC day: the day of its `ts`, the time the business event was recorded. */
export const entryDay = (e: Pick<LedgerEntry, 'ts'>) => e.ts.slice(0, 10);

/**
 * The object of one account's entries of one day, named by its first entry: a retry of the same batch
 * (same cursor) writes the same name and replaces the object whole, which is what makes the export
 * exactly once (docs/ledger-export.md).
 */
export function objectKey(prefix: string, day: string, account: string, firstId: string): string {
  return `${prefix}dt=${day}/${encodeURIComponent(account)}/${firstId}.ndjson.gz`;
}

/**
 * Where a batch goes when its object's name already holds entries Redis no longer has (Redis lost
 * writes): beside it, never over it. `tag` is unique to the attempt. Still `<first id>….ndjson.gz`, so
 * globs over the objects read it; consumers deduplicate by account + id (docs/ledger-export.md).
 */
export function conflictKey(prefix: string, day: string, account: string, firstId: string, tag: string): string {
  return `${prefix}dt=${day}/${encodeURIComponent(account)}/${firstId}.${tag}.ndjson.gz`;
}

/** Splits a batch (ordered by id) into its days, each in id order. */
export function byDay(entries: readonly LedgerEntry[]): Map<string, LedgerEntry[]> {
  const days = new Map<string, LedgerEntry[]>();
  for (const e of entries) {
    const d = entryDay(e);
    let list = days.get(d);
    if (!list) days.set(d, (list = []));
    list.push(e);
  }
  return days;
}

export function encodeObject(account: string, entries: readonly LedgerEntry[]): Buffer {
  return gzipSync(entries.map((e) => `${JSON.stringify({ ...e, account })}\n`).join(''));
}

export function decodeObject(body: Uint8Array): ExportedEntry[] {
  return gunzipSync(body)
    .toString('utf8')
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => JSON.parse(l) as ExportedEntry);
}
