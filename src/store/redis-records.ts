/**
 * What every part of the Redis store shares: Redis failures become 503 `store_unavailable`, and the
 * stored hashes and stream entries become records.
 */
import { GatewayError } from '../http/errors.ts';
import { compareIds } from '../ledger/entries.ts';
import { PACKED_DEBITS_MAX } from './debit-layout.ts';
import type { KeyBudget, KeyRecord, LedgerEntry, Scope, ShareFile, ShareRecord } from './types.ts';

export function unavailable(err: unknown): GatewayError {
  return new GatewayError('store_unavailable', 'The credit and key store is unavailable; try again shortly.', { cause: err });
}

const toUnavailable = (e: unknown): never => {
  throw e instanceof GatewayError ? e : unavailable(e);
};

/**
 * Wraps a store call so any Redis failure becomes store_unavailable. A derived promise, not an async
 * function: every live request's hold and settle pass through here, and an async wrapper costs each an
 * extra promise and microtask turns.
 */
export function guard<T>(p: Promise<T>): Promise<T> {
  return p.catch(toUnavailable);
}

export function parseKey(h: Record<string, string>): KeyRecord | null {
  if (!h.rec) return null;
  const base = JSON.parse(h.rec) as Omit<KeyRecord, 'name' | 'active' | 'rate_limits' | 'version'>;
  // `sc`: scopes set by a patch after creation (the creation record `rec` is never rewritten).
  return {
    ...base,
    ...(h.sc && { scopes: JSON.parse(h.sc) as Scope[] }),
    name: h.name ?? '',
    active: h.active === '1',
    rate_limits: h.rl ? JSON.parse(h.rl) : null,
    version: Number(h.v ?? 0),
    // Set at creation inside `rec`; a patch writes `exp`/`bud` ('' = cleared), which then win.
    ...(h.exp !== undefined && { expires_at: h.exp || null }),
    ...(h.bud !== undefined && { budget: h.bud ? (JSON.parse(h.bud) as KeyBudget) : null }),
  };
}

const NUMERIC = new Set(['amount_micros', 'prompt_tokens', 'completion_tokens', 'hold_micros', 'cached_tokens']);

/**
 * A ledger stream entry as a LedgerEntry. A debit is stored compact (docs/ledger.md "Debit entries"):
 * `d` its fields as one JSON array (debit-layout.ts debitEntryData), `h` the hold it released; every other
 * entry, and debits written before that layout, field by field.
 */
export function parseEntry([id, fields]: [string, string[]]): LedgerEntry {
  if (fields[0] === 'd') return compactDebit(id, JSON.parse(fields[1]!) as DebitArray, Number(fields[3] ?? 0));
  const e: Record<string, unknown> = { id };
  for (let i = 0; i < fields.length; i += 2) e[fields[i]!] = NUMERIC.has(fields[i]!) ? Number(fields[i + 1]) : fields[i + 1];
  return e as unknown as LedgerEntry;
}

/** A compact debit's `d` (debit-layout.ts debitEntryData). */
type DebitArray = [number, string, string, string, string, number, number, string, number?];

function compactDebit(id: string, d: DebitArray, hold: number): LedgerEntry {
  const [amount, ts, requestId, keyId, model, prompt, completion, source, cached] = d;
  return {
    id,
    kind: 'debit',
    amount_micros: amount,
    ts,
    request_id: requestId,
    key_id: keyId,
    model,
    prompt_tokens: prompt,
    completion_tokens: completion,
    usage_source: source,
    hold_micros: hold,
    ...(cached !== undefined && { cached_tokens: cached }),
  } as LedgerEntry;
}

/**
 * A ledger stream entry as the LedgerEntries it holds: one, or for a packed pass (`p`: the debits' `d`
 * arrays, `h`: their holds; docs/ledger.md "Packed passes") one debit per element, `<entry id>.<k>` from
 * k = 1, in the order the pass wrote them.
 */
export function parseEntries(row: [string, string[]]): LedgerEntry[] {
  const [id, fields] = row;
  if (fields[0] !== 'p') return [parseEntry(row)];
  const ds = JSON.parse(fields[1]!) as DebitArray[];
  const hs = JSON.parse(fields[3] ?? '[]') as number[];
  return ds.map((d, i) => compactDebit(`${id}.${i + 1}`, d, Number(hs[i] ?? 0)));
}

/** Stream rows one ledger read asks for at most (a read of a page is one or more of them). */
const ROWS_PER_READ = 1000;

/** The stream id of an entry id (a packed debit's `<id>.<k>` is in the stream entry `<id>`). */
const streamIdOf = (id: string) => {
  const dot = id.indexOf('.');
  return dot < 0 ? id : id.slice(0, dot);
};

/**
 * Reads debits page by page from stream rows of one or more debits each (docs/ledger.md "Packed passes"):
 * at most `limit` entries, from `from` (inclusive) in the read's direction, less those `keep` refuses in the
 * cursor's own row. Rows are read in several calls, each sized by what is still wanted and the most debits
 * one row held so far: the first as if every row were packed full, so a ledger of packed entries is read
 * in about `limit` debits and one of plain entries in two calls; never more than ROWS_PER_READ rows at a
 * time, so one call returns at most PACKED_DEBITS_MAX × ROWS_PER_READ debits however entries are mixed,
 * and a page at most PACKED_DEBITS_MAX times the debits it returns.
 */
async function readPage(
  read: (from: string, count: number) => Promise<[string, string[]][]>,
  from: string,
  cursorRow: string | undefined,
  keep: (e: LedgerEntry) => boolean,
  limit: number,
  reverse: boolean,
): Promise<LedgerEntry[]> {
  const out: LedgerEntry[] = [];
  // The first read sizes rows as packed full; later ones by the most debits a row held so far.
  let widest = 1;
  let next = from;
  for (let first = true; out.length < limit; first = false) {
    const want = limit - out.length;
    const count = Math.min(ROWS_PER_READ, first ? Math.ceil(want / PACKED_DEBITS_MAX) + (cursorRow ? 1 : 0) : Math.ceil(want / widest));
    const rows = await read(next, count);
    for (const row of rows) {
      const es = parseEntries(row);
      if (es.length > widest) widest = es.length;
      if (reverse) es.reverse();
      for (const e of es) if (row[0] !== cursorRow || keep(e)) out.push(e);
    }
    if (rows.length < count) break;
    next = `(${rows.at(-1)![0]}`;
  }
  return out.length > limit ? out.slice(0, limit) : out;
}

/**
 * A page of ledger entries after `after` (exclusive; a stream id or a packed debit's `<id>.<k>`), oldest
 * first, at most `limit`: what XRANGE would give were every debit an entry of its own. The cursor's own
 * row is read again and its debits after the cursor kept (a packed entry's debits come after its id).
 */
export function ledgerAfter(
  xrange: (start: string, count: number) => Promise<[string, string[]][]>,
  after: string | undefined,
  limit: number,
): Promise<LedgerEntry[]> {
  if (after === undefined) return readPage(xrange, '-', undefined, () => true, limit, false);
  const row = streamIdOf(after);
  return readPage(xrange, row, row, (e) => compareIds(e.id, after) > 0, limit, false);
}

/** The same page before `before` (exclusive), newest first (the console's ledger). */
export function ledgerBefore(
  xrevrange: (end: string, count: number) => Promise<[string, string[]][]>,
  before: string | undefined,
  limit: number,
): Promise<LedgerEntry[]> {
  if (before === undefined) return readPage(xrevrange, '+', undefined, () => true, limit, true);
  const row = streamIdOf(before);
  return readPage(xrevrange, row, row, (e) => compareIds(e.id, before) < 0, limit, true);
}

/**
 * A share record of either layout (redis-shares.ts): compact (`a`, `c`, `b`, `f`, `r`; the slug is the
 * key) or the previous one, which still carries the snapshot text until the migration moves it.
 */
export function parseShare(h: Record<string, string> | string[], slug: string): ShareRecord | null {
  const o: Record<string, string> = {};
  if (Array.isArray(h)) for (let i = 0; i < h.length; i += 2) o[h[i]!] = h[i + 1]!;
  else Object.assign(o, h);
  if (o.a !== undefined) {
    // The file list: `f` in a record written before it moved to the object store, else only its count `n`
    // (the list is the object shares/<slug>.files.json); none of either: no files.
    const n = Number(o.n ?? 0);
    return {
      slug,
      account: o.a,
      created_at: o.c ?? '',
      bytes: Number(o.b ?? 0),
      ...(o.f ? { files: JSON.parse(o.f) as ShareFile[] } : n > 0 ? { file_count: n } : { files: [] }),
      revoked_at: o.r || null,
    };
  }
  if (!o.slug) return null;
  const snapshot = o.snapshot ?? '{}';
  return {
    slug: o.slug,
    account: o.account ?? '',
    created_at: o.created_at ?? '',
    bytes: Buffer.byteLength(snapshot),
    snapshot,
    files: JSON.parse(o.files ?? '[]'),
    revoked_at: o.revoked_at || null,
  };
}

/**
 * Reads a key budget counter hash (lua/hold.lua): `s` is the settled spend, each `h<due>` the open holds
 * of one hold bucket; those due by `nowMs` were released by the reaper and no longer count.
 */
export function budgetCounter(h: Record<string, string>, nowMs: number): { spent_micros: number; held_micros: number } {
  let held = 0;
  for (const [f, v] of Object.entries(h)) if (f.startsWith('h') && Number(f.slice(1)) > nowMs) held += Number(v);
  return { spent_micros: Number(h.s ?? 0), held_micros: Math.max(0, held) };
}
