/**
 * How a debit's ledger entry is stored (docs/ledger.md "Debit entries"). `compact` (the default): two
 * fields, `d` the entry's data as one JSON array made here and `h` the hold the script released, so the
 * settle scripts copy two values where they used to copy eleven fields. `fields`: field by field, the
 * layout every earlier version wrote and reads — for a rolling upgrade from such a version, whose
 * instances (the ledger export among them) cannot read a compact entry. parseEntry (redis-records.ts)
 * reads both. `packed`: compact, and a credit lease's settles of one turn in one entry (lease-pass.lua; docs/ledger.md
 * "Packed passes"): `p` their `d` arrays as one JSON array, `h` their holds as one JSON array, read back as
 * one debit per element with the id `<entry id>.<k>`.
 */
import type { SettleInput } from './types.ts';

export type DebitLayout = 'compact' | 'fields' | 'packed';
export const DEBIT_LAYOUTS: readonly DebitLayout[] = ['compact', 'fields', 'packed'];

/**
 * The most debits one packed entry holds (lease-pass.lua splits a larger pass into entries of this many).
 * A ledger read sizes its stream reads by it (redis-records.ts ledgerAfter): a page of `limit` debits never
 * reads more than about `limit` of them from entries of one size, and at most this many times `limit`
 * however the entries are mixed.
 */
export const PACKED_DEBITS_MAX = 16;

/** What the debit entry carries of a settle. */
export type DebitData = Pick<
  SettleInput,
  'costMicros' | 'ts' | 'requestId' | 'keyId' | 'model' | 'promptTokens' | 'completionTokens' | 'usageSource' | 'cachedTokens'
>;

/** The debit's `d`: [amount, ts, request id, key id, model, prompt, completion, usage source(, cached tokens)]. */
export function debitEntryData(i: DebitData): string {
  // 0 − cost, as the field layout wrote it: never -0 (JSON writes -0 as 0 anyway).
  const d = [0 - i.costMicros, i.ts, i.requestId, i.keyId, i.model, i.promptTokens, i.completionTokens, i.usageSource];
  if (i.cachedTokens !== undefined && i.cachedTokens > 0) d.push(i.cachedTokens);
  return JSON.stringify(d);
}

/**
 * The settle scripts' compact append: `redis.call('XADD', <stream>, '*', 'd', <data>, 'h', <hold>)`, whatever
 * expression gives the hold (a local `hold`, or an argument such as `ARGV[dh + i]` in lease-settle.lua's
 * common path).
 */
const COMPACT_XADD = /(?:redis\.)?call\('XADD', ([^,()]+), '\*', 'd', ([^,()]+), 'h', ([^,()]+)\)/g;

/**
 * Any XADD that starts its entry with the compact `d` field, however written (spacing, quotes, a field list
 * split over lines): what must be left of none once a script is rewritten for `fields`.
 */
const ANY_COMPACT_XADD = /XADD['"]\s*,[^)]*?['"]\*['"]\s*,\s*['"]d['"]/;

/** Writes the entry field by field instead (Redis's cjson reads the data back); the script is otherwise the same. */
const FIELDS_XADD = `local function tgDebitFields(stream, data, hold)
  local e = cjson.decode(data)
  local n = function(x) return string.format('%d', x) end
  if e[9] then
    return redis.call('XADD', stream, '*', 'kind', 'debit', 'amount_micros', n(e[1]), 'ts', e[2], 'request_id', e[3],
      'key_id', e[4], 'model', e[5], 'prompt_tokens', n(e[6]), 'completion_tokens', n(e[7]), 'usage_source', e[8],
      'hold_micros', hold, 'cached_tokens', n(e[9]))
  end
  return redis.call('XADD', stream, '*', 'kind', 'debit', 'amount_micros', n(e[1]), 'ts', e[2], 'request_id', e[3],
    'key_id', e[4], 'model', e[5], 'prompt_tokens', n(e[6]), 'completion_tokens', n(e[7]), 'usage_source', e[8],
    'hold_micros', hold)
end
`;

/**
 * A script as the layout writes it (unchanged for `compact`; scripts without a debit are returned as they
 * are). For `fields`, every compact debit XADD is rewritten; one left over — a script whose XADD the
 * rewrite does not recognise — throws at startup rather than write compact entries an older version misreads.
 */
export function settleScriptFor(lua: string, layout: DebitLayout): string {
  if (layout !== 'fields' || !ANY_COMPACT_XADD.test(lua)) return lua;
  const out = lua.replace(COMPACT_XADD, 'tgDebitFields($1, $2, $3)');
  const left = ANY_COMPACT_XADD.exec(out);
  if (left) throw new Error(`debit-layout.ts: a compact debit XADD not rewritten for "fields": ${out.slice(left.index, left.index + 120)}`);
  return FIELDS_XADD + out;
}
