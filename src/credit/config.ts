/** The `credit` section: the hold's margin, how often the reaper looks for expired holds, and credit leases. */
import { bool, MAX_TIMER_MS, MAX_TIMER_SECONDS, noUnknown, num, object } from '../config/fields.ts';

export interface CreditConfig {
  readonly holdMarginSeconds: number;
  readonly reaperIntervalMs: number;
  /** A hot account's holds from a per-process lease (docs/ledger.md "Leases"); Redis only, default off. */
  readonly leases: boolean;
}

export const CREDIT_FIELDS = ['hold_margin_seconds', 'reaper_interval_ms', 'leases'] as const;

/** Compiles `credit`. */
export function creditSection(v: unknown): CreditConfig {
  const credit = object(v, 'credit', true);
  noUnknown(credit, 'credit', CREDIT_FIELDS);
  return {
    holdMarginSeconds: num(credit.hold_margin_seconds, 'credit.hold_margin_seconds', { fallback: 60, min: 0, max: MAX_TIMER_SECONDS }),
    reaperIntervalMs: num(credit.reaper_interval_ms, 'credit.reaper_interval_ms', { fallback: 5_000, min: 10, max: MAX_TIMER_MS }),
    leases: bool(credit.leases, 'credit.leases', false),
  };
}
