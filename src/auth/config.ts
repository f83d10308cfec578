/** The `auth` section: the key cache and the failed-attempt limits (SPEC §12). */
import { noUnknown, num, object } from '../config/fields.ts';

export interface AuthConfig {
  readonly cacheTtlMs: number;
  readonly negativeTtlMs: number;
  readonly cacheMax: number;
  readonly failedPerMinute: number;
  /** Failed admin-token attempts per client address a minute; past it → 429. */
  readonly adminFailedPerMinute: number;
}

export const AUTH_FIELDS = ['cache_ttl_ms', 'negative_ttl_ms', 'cache_max', 'failed_per_minute', 'admin_failed_per_minute'] as const;

/**
 * auth.cache_max's bound. lru-cache reserves its `max` slots when it is built (the key cache is two of
 * them, ~34 bytes a slot): 5 × 10^7 took ~1.6 GB of a worker's memory before the first request, and
 * 10^12 stopped the boot with a bare "RangeError: Invalid array length" naming no field.
 */
export const MAX_KEY_CACHE = 10_000_000;

/** Compiles `auth`. */
export function authSection(v: unknown): AuthConfig {
  const auth = object(v, 'auth', true);
  noUnknown(auth, 'auth', AUTH_FIELDS);
  return {
    cacheTtlMs: num(auth.cache_ttl_ms, 'auth.cache_ttl_ms', { fallback: 10_000, min: 1, max: 10_000 }),
    negativeTtlMs: num(auth.negative_ttl_ms, 'auth.negative_ttl_ms', { fallback: 5_000, min: 1, max: 10_000 }),
    cacheMax: num(auth.cache_max, 'auth.cache_max', { fallback: 100_000, min: 1, max: MAX_KEY_CACHE, integer: true }),
    failedPerMinute: num(auth.failed_per_minute, 'auth.failed_per_minute', { fallback: 30, min: 1, integer: true }),
    adminFailedPerMinute: num(auth.admin_failed_per_minute, 'auth.admin_failed_per_minute', { fallback: 10, min: 1, integer: true }),
  };
}
