/**
 * Ledger entries as the export writes them (SPEC §10): one NDJSON line per entry, the §2a fields plus
 * `account`, gzipped, one object per account × UTC day of a batch, named by its first entry id.
 */
import { setImmediate as turn } from 'node:timers/promises';
import { promisify } from 'node:util';
import { gunzip, gzip } from 'node:zlib';
import type { LedgerEntry } from '../store/types.ts';

export type ExportedEntry = LedgerEntry & { account: string };

/**
 * Orders two entry ids numerically (string order breaks at 9 → 10): `<ms>-<seq>` stream ids, and a packed
 * entry's debits `<ms>-<seq>.<k>` (docs/ledger.md "Packed passes"), after the stream id and before the next.
 */
export function compareIds(a: string, b: string): number {
  const [am = 0, as = 0, ak = 0] = a.split(/[-.]/).map(Number);
  const [bm = 0, bs = 0, bk = 0] = b.split(/[-.]/).map(Number);
  return am - bm || as - bs || ak - bk;
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

const gzipAsync = promisify(gzip);
const gunzipAsync = promisify(gunzip);

/** Lines serialised (or parsed) per event-loop turn: ~2–3 ms of work, not the ~25 ms of a 10,000-entry batch. */
const LINES_PER_TURN = 1000;

/**
 * An object's body. The export runs in the gateway's process: a full batch (10,000 entries) took ~45 ms
 * of one event-loop turn (JSON ~25 ms, gzip ~18 ms), on every pass of every backlogged account, a stall
 * for every tenant's requests. Now the JSON is made 1,000 lines a turn and gzip runs on libuv's pool.
 */
export async function encodeObject(account: string, entries: readonly LedgerEntry[]): Promise<Buffer> {
  const parts: string[] = [];
  for (let i = 0; i < entries.length; i += LINES_PER_TURN) {
    if (i > 0) await turn();
    parts.push(
      entries
        .slice(i, i + LINES_PER_TURN)
        .map((e) => `${JSON.stringify({ ...e, account })}\n`)
        .join(''),
    );
  }
  return gzipAsync(parts.join(''));
}

/** An object's entries, gunzipped on libuv's pool and parsed 1,000 lines a turn (as encodeObject). */
export async function decodeObject(body: Uint8Array): Promise<ExportedEntry[]> {
  const lines = (await gunzipAsync(body)).toString('utf8').split('\n');
  const out: ExportedEntry[] = [];
  for (let i = 0; i < lines.length; i += LINES_PER_TURN) {
    if (i > 0) await turn();
    for (const l of lines.slice(i, i + LINES_PER_TURN)) if (l !== '') out.push(JSON.parse(l) as ExportedEntry);
  }
  return out;
}
