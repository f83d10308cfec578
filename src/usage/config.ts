/** The `usage` section: SPEC §10 usage aggregates (src/usage/). */
import { noUnknown, num, object } from '../config/fields.ts';

export interface UsageConfig {
  /** Days an aggregate (account × day) is kept. */
  readonly retentionDays: number;
  /** How often each process flushes what it aggregated (one pipeline per flush). */
  readonly flushIntervalMs: number;
}

export const USAGE_FIELDS = ['retention_days', 'flush_interval_ms'] as const;

/** Compiles `usage`. */
export function usageSection(v: unknown): UsageConfig {
  const usage = object(v, 'usage', true);
  noUnknown(usage, 'usage', USAGE_FIELDS);
  return {
    retentionDays: num(usage.retention_days, 'usage.retention_days', { fallback: 400, min: 1, max: 36_500, integer: true }),
    flushIntervalMs: num(usage.flush_interval_ms, 'usage.flush_interval_ms', { fallback: 1_000, min: 10, max: 1_000 }),
  };
}
