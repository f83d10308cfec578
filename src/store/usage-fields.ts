/**
 * How usage aggregates are laid out in a store (SPEC §10): one hash per account × UTC day, counters
 * per key × model in fields `<key id>|<model>|<r|p|c|$|k>` (requests, prompt tokens, completion tokens,
 * cost, cached prompt tokens; `k` is absent until a cell has cached tokens and reads as 0). Key ids never contain `|`; a model name may, so it is whatever lies between the first and the
 * last `|`.
 */
import { setImmediate as turn } from 'node:timers/promises';
import type { UsageCell } from './types.ts';

export type UsageCounter = 'r' | 'p' | 'c' | '$' | 'k';

const COUNTERS: Record<UsageCounter, 'requests' | 'prompt_tokens' | 'completion_tokens' | 'cost_micros' | 'cached_tokens'> = {
  r: 'requests',
  p: 'prompt_tokens',
  c: 'completion_tokens',
  $: 'cost_micros',
  k: 'cached_tokens',
};

export const usageField = (keyId: string, model: string, counter: UsageCounter) => `${keyId}|${model}|${counter}`;

/** The cells of one day's hash, ordered by key id then model. */
export function parseUsageHash(day: string, h: Record<string, string>): UsageCell[] {
  const cells = new Map<string, UsageCell>();
  for (const field in h) addField(cells, day, field, h[field]!);
  return sortedCells(cells);
}

/**
 * How many fields are parsed between two turns of the event loop. One field is ~0.5 µs here, so a slice
 * is a few ms: a member's usage page (up to 50,000 fields) no longer holds the loop for every other
 * tenant's requests in one piece (docs/console.md "Usage and Last used").
 */
export const USAGE_FIELDS_PER_TURN = 8_192;

/**
 * `parseUsageHash` for `HGETALL`'s reply as it comes from Redis: the flat `[field, value, …]` array, not
 * ioredis' object of it (a property per field, each name internalized: ~40 % of the parse for a day of
 * 40,000 fields), parsed `USAGE_FIELDS_PER_TURN` fields at a time with a turn of the loop between.
 */
export async function parseUsagePairs(day: string, pairs: readonly string[]): Promise<UsageCell[]> {
  const cells = new Map<string, UsageCell>();
  for (let i = 0; i < pairs.length; i += 2) {
    if (i > 0 && i % (2 * USAGE_FIELDS_PER_TURN) === 0) await turn();
    addField(cells, day, pairs[i]!, pairs[i + 1]!);
  }
  return sortedCells(cells);
}

/**
 * How many fields one `HSCAN` of a day asks for (a hint Redis keeps to within a few): ~150 KB of reply,
 * a few ms to decode and parse. `HGETALL` of a day at the console's bound (50,000 fields, 1.5 MB) was
 * decoded in one turn of the event loop (libuv reads it whole before returning): ~20–40 ms in one piece.
 */
export const USAGE_FIELDS_PER_SCAN = 4_096;

/**
 * One day's cells built from `HSCAN` replies, a reply at a time. A field `HSCAN` returns twice (it may,
 * while Redis rehashes) is set twice to a value: counters are set, never added, so it counts once.
 */
export function usageDayCells(day: string): { add(pairs: readonly string[]): void; cells(): UsageCell[] } {
  const cells = new Map<string, UsageCell>();
  return {
    add(pairs) {
      for (let i = 0; i < pairs.length; i += 2) addField(cells, day, pairs[i]!, pairs[i + 1]!);
    },
    cells: () => sortedCells(cells),
  };
}

function addField(cells: Map<string, UsageCell>, day: string, field: string, value: string): void {
  const first = field.indexOf('|');
  const last = field.lastIndexOf('|');
  const counter = field.length === last + 2 ? COUNTERS[field[last + 1] as UsageCounter] : undefined;
  if (first < 0 || last <= first || !counter) return;
  const id = field.slice(0, last);
  let c = cells.get(id);
  if (!c) {
    c = {
      day,
      key_id: field.slice(0, first),
      model: field.slice(first + 1, last),
      requests: 0,
      prompt_tokens: 0,
      completion_tokens: 0,
      cost_micros: 0,
      cached_tokens: 0,
    };
    cells.set(id, c);
  }
  c[counter] = Number(value);
}

function sortedCells(cells: Map<string, UsageCell>): UsageCell[] {
  return [...cells.values()].sort((a, b) => (a.key_id < b.key_id ? -1 : a.key_id > b.key_id ? 1 : a.model < b.model ? -1 : 1));
}

const DAY_MS = 86_400_000;

/** Unix seconds at which a day's aggregate expires: `retentionDays` after the day ends. */
export function dayEndsAtSeconds(day: string, retentionDays: number): number {
  return Math.floor((Date.parse(`${day}T00:00:00Z`) + DAY_MS * (1 + retentionDays)) / 1000);
}

/** Every day from `from` to `to` (YYYY-MM-DD, inclusive), in order. */
export function daysBetween(from: string, to: string): string[] {
  const out: string[] = [];
  for (let t = Date.parse(`${from}T00:00:00Z`), end = Date.parse(`${to}T00:00:00Z`); t <= end; t += DAY_MS) {
    out.push(new Date(t).toISOString().slice(0, 10));
  }
  return out;
}
