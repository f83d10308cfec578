/**
 * How usage aggregates are laid out in a store (SPEC §10): one hash per account × UTC day, counters
 * per key × model in fields `<key id>|<model>|<r|p|c|$|k>` (requests, prompt tokens, completion tokens,
 * cost, cached prompt tokens; `k` is absent until a cell has cached tokens and reads as 0). Key ids never contain `|`; a model name may, so it is whatever lies between the first and the
 * last `|`.
 */
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
  for (const [field, value] of Object.entries(h)) {
    const first = field.indexOf('|');
    const last = field.lastIndexOf('|');
    const counter = COUNTERS[field.slice(last + 1) as UsageCounter];
    if (first < 0 || last <= first || !counter) continue;
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
