/**
 * Key budgets (SPEC §15, docs/keys.md): a key may spend at most `limit_micros` per UTC period. The
 * key's spend of a period lives in one counter in its account's slot (`{acct:<id>}:kb:<key>:<tag>`),
 * checked and charged by the hold script atomically with the balance and charged its actual cost by the
 * settle. A request counts in the period it was held in (its settle charges the same counter). A
 * counter is dropped a day after its period ended (period `total`: kept).
 */
import type { BudgetCharge, BudgetPeriod, KeyBudget, KeyRecord, Store } from '../store/types.ts';

/** How long a counter outlives its period: late settles of its last requests still land in it. */
export const COUNTER_GRACE_MS = 86_400_000;

/** The period containing `nowMs`: its counter tag and end (unix ms; null for `total`). */
export function periodOf(period: BudgetPeriod, nowMs: number): { tag: string; endsAtMs: number | null } {
  if (period === 'total') return { tag: 't', endsAtMs: null };
  const d = new Date(nowMs);
  const y = d.getUTCFullYear();
  const m = d.getUTCMonth();
  const mm = String(m + 1).padStart(2, '0');
  if (period === 'month') return { tag: `m${y}-${mm}`, endsAtMs: Date.UTC(y, m + 1, 1) };
  const day = d.getUTCDate();
  return { tag: `d${y}-${mm}-${String(day).padStart(2, '0')}`, endsAtMs: Date.UTC(y, m, day + 1) };
}

/** What a hold and settle of a key with this budget carry to the store, for a request starting at `nowMs`. */
export function budgetCharge(keyId: string, budget: KeyBudget, nowMs: number): BudgetCharge {
  const p = periodOf(budget.period, nowMs);
  return {
    keyId,
    period: p.tag,
    limitMicros: budget.limit_micros,
    expireAtMs: p.endsAtMs === null ? null : p.endsAtMs + COUNTER_GRACE_MS,
  };
}

/** A budget as reads show it: the limit, the period, and what the key has spent in the current one. */
export interface BudgetView extends KeyBudget {
  spent_micros: number;
}

/** The budget view of a key record (null without a budget): one store read of the period's counter. */
export async function budgetView(
  store: Pick<Store, 'keySpend'>,
  r: Pick<KeyRecord, 'account' | 'id' | 'budget'>,
  nowMs: number,
): Promise<BudgetView | null> {
  if (!r.budget) return null;
  const { spent_micros } = await store.keySpend(r.account, r.id, periodOf(r.budget.period, nowMs).tag, nowMs);
  return { limit_micros: r.budget.limit_micros, period: r.budget.period, spent_micros };
}
