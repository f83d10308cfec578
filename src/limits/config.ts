/** The `limits` section (request size and concurrency, SPEC §13) and `rate_limits` (per key and account, SPEC §1.5). */
import { at, MAX_TIMER_SECONDS, noUnknown, num, object } from '../config/fields.ts';

export interface LimitsConfig {
  readonly maxBodyBytes: number;
  /** Largest `n` a chat request may ask for (else 422); `n` multiplies the output part of the hold. */
  readonly maxN: number;
  /** Request bodies being read or held across the process; past it → 503 `overloaded`. */
  readonly maxInflightBodyBytes: number;
  /** Requests in flight per key; past it → 429 `concurrency_limit_exceeded`. */
  readonly maxConcurrentPerKey: number;
  /** Keys one account may hold (every key ever made, disabled ones too); past it → 429 `key_limit_exceeded`. */
  readonly maxKeysPerAccount: number;
  /** Keys one account may make in one UTC day (deleted and rolled ones too; 0: no bound); past it → 429 `key_limit_exceeded`. */
  readonly maxKeysMadePerDay: number;
  /** Requests in flight per account, all its keys together (SPEC §13); past it → 429 `concurrency_limit_exceeded`. */
  readonly maxConcurrentPerAccount: number;
  /** Request body bytes one key holds across the process (SPEC §13); past it → 429 `concurrency_limit_exceeded`. */
  readonly maxInflightBodyBytesPerKey: number;
  /** JSON nesting deeper than this → 422 `json_invalid`, found before parsing (SPEC §13). */
  readonly maxJsonDepth: number;
}

export interface LimitSpec {
  readonly requestsPerMinute: number | undefined;
  readonly tokensPerMinute: number | undefined;
}

export interface RateLimitsConfig {
  readonly windowSeconds: number;
  readonly test: LimitSpec;
  readonly live: LimitSpec;
  /** All test keys of one account together (SPEC §1.5, §13); default 4 × `test`. */
  readonly testAccount: LimitSpec;
}

export const LIMITS_FIELDS = [
  'max_body_bytes',
  'max_n',
  'max_inflight_body_bytes',
  'max_concurrent_per_key',
  'max_concurrent_per_account',
  'max_inflight_body_bytes_per_key',
  'max_json_depth',
  'max_keys_per_account',
  'max_keys_made_per_day',
] as const;

/**
 * limits.max_keys_per_account's bound. The admin API's key list and the console's keys page read and
 * answer every key of the account at once (two store reads per key): at 10,000 keys one page was 19.7 MB
 * of HTML and held the event loop 224 ms (the JSON list 2.8 MB, 125 ms), on real Redis; at 1,000, 2 MB
 * and ~20 ms. A member can create keys up to the cap, so its bound is the bound of those reads.
 */
export const MAX_KEYS_PER_ACCOUNT = 1_000;

/**
 * limits.max_keys_made_per_day's bound. Every key id made and used writes a usage cell per model and UTC
 * day, kept usage.retention_days (400) whether or not the key is deleted: ~280 B of Redis per key and
 * model, measured. At 100,000 keys a day one account could add ~28 MB a day, ~11 GB over the retention;
 * past that the bound would no longer bound anything an operator would accept.
 */
export const MAX_KEYS_MADE_PER_DAY = 100_000;

export const RATE_LIMITS_FIELDS = ['window_seconds', 'test', 'live', 'test_account'] as const;

/** Compiles `limits`. */
export function limitsSection(v: unknown): LimitsConfig {
  const limits = object(v, 'limits', true);
  noUnknown(limits, 'limits', LIMITS_FIELDS);
  return {
    maxBodyBytes: num(limits.max_body_bytes, 'limits.max_body_bytes', { fallback: 4 * 1024 * 1024, min: 1024, integer: true }),
    maxN: num(limits.max_n, 'limits.max_n', { fallback: 8, min: 1, max: 128, integer: true }),
    maxInflightBodyBytes: num(limits.max_inflight_body_bytes, 'limits.max_inflight_body_bytes', {
      fallback: 64 * 1024 * 1024,
      min: 1024,
      integer: true,
    }),
    maxConcurrentPerKey: num(limits.max_concurrent_per_key, 'limits.max_concurrent_per_key', { fallback: 64, min: 1, integer: true }),
    maxKeysPerAccount: num(limits.max_keys_per_account, 'limits.max_keys_per_account', {
      fallback: 100,
      min: 1,
      max: MAX_KEYS_PER_ACCOUNT,
      integer: true,
    }),
    maxKeysMadePerDay: num(limits.max_keys_made_per_day, 'limits.max_keys_made_per_day', {
      fallback: 1_000,
      min: 0,
      max: MAX_KEYS_MADE_PER_DAY,
      integer: true,
    }),
    maxConcurrentPerAccount: num(limits.max_concurrent_per_account, 'limits.max_concurrent_per_account', {
      fallback: 256,
      min: 1,
      integer: true,
    }),
    maxInflightBodyBytesPerKey: num(limits.max_inflight_body_bytes_per_key, 'limits.max_inflight_body_bytes_per_key', {
      fallback: 8 * 1024 * 1024,
      min: 1024,
      integer: true,
    }),
    maxJsonDepth: num(limits.max_json_depth, 'limits.max_json_depth', { fallback: 64, min: 2, max: 10_000, integer: true }),
  };
}

/** Compiles `rate_limits`: test keys limited by default, live keys not. */
export function rateLimitsSection(v: unknown): RateLimitsConfig {
  const rl = object(v, 'rate_limits', true);
  noUnknown(rl, 'rate_limits', RATE_LIMITS_FIELDS);
  const testLimits = limitSpec(rl.test, 'rate_limits.test', { requestsPerMinute: 60, tokensPerMinute: 100_000 });
  return {
    windowSeconds: num(rl.window_seconds, 'rate_limits.window_seconds', { fallback: 60, min: 1, max: MAX_TIMER_SECONDS, integer: true }),
    test: testLimits,
    live: limitSpec(rl.live, 'rate_limits.live', { requestsPerMinute: undefined, tokensPerMinute: undefined }),
    testAccount: limitSpec(rl.test_account, 'rate_limits.test_account', times(4, testLimits)),
  };
}

function limitSpec(v: unknown, path: string, fallback: LimitSpec): LimitSpec {
  const o = object(v, path, true);
  noUnknown(o, path, ['requests_per_minute', 'tokens_per_minute']);
  const opt = (k: string, d: number | undefined) => (o[k] === undefined ? d : num(o[k], at(path, k), { min: 1, integer: true }));
  return {
    requestsPerMinute: opt('requests_per_minute', fallback.requestsPerMinute),
    tokensPerMinute: opt('tokens_per_minute', fallback.tokensPerMinute),
  };
}

/** A limit spec scaled (rate_limits.test_account's default: 4 × the per-key test limits); unset stays unset. */
function times(k: number, l: LimitSpec): LimitSpec {
  return {
    requestsPerMinute: l.requestsPerMinute === undefined ? undefined : l.requestsPerMinute * k,
    tokensPerMinute: l.tokensPerMinute === undefined ? undefined : l.tokensPerMinute * k,
  };
}
