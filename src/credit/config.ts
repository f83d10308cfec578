/** The `credit` section: the hold's margin, how often the reaper looks for expired holds, and credit leases. */
import { bool, MAX_TIMER_MS, MAX_TIMER_SECONDS, noUnknown, num, object } from '../config/fields.ts';

export interface CreditConfig {
  readonly holdMarginSeconds: number;
  readonly reaperIntervalMs: number;
  /** A hot account's holds from a per-process lease (docs/ledger.md "Leases"); Redis only, default off. */
  readonly leases: boolean;
  /** How long a lease's settles wait to share one Redis call (docs/ledger.md "Lingering passes"). */
  readonly leaseLingerMs: number;
}

/** A lease's settles wait this long by default for others to share their call (bench/results/hot-account.md). */
export const LEASE_LINGER_MS = 20;

export const CREDIT_FIELDS = ['hold_margin_seconds', 'reaper_interval_ms', 'leases', 'lease_linger_ms'] as const;

/** Compiles `credit`. */
export function creditSection(v: unknown): CreditConfig {
  const credit = object(v, 'credit', true);
  noUnknown(credit, 'credit', CREDIT_FIELDS);
  return {
    holdMarginSeconds: num(credit.hold_margin_seconds, 'credit.hold_margin_seconds', { fallback: 60, min: 0, max: MAX_TIMER_SECONDS }),
    reaperIntervalMs: num(credit.reaper_interval_ms, 'credit.reaper_interval_ms', { fallback: 5_000, min: 10, max: MAX_TIMER_MS }),
    leases: bool(credit.leases, 'credit.leases', false),
    leaseLingerMs: num(credit.lease_linger_ms, 'credit.lease_linger_ms', { fallback: LEASE_LINGER_MS, min: 0, max: 1_000 }),
  };
}
