/** Small typed readers for config fields; each failure names the field path. */
import { ConfigError } from './errors.ts';

export type Obj = Record<string, unknown>;

export function at(path: string, key: string | number): string {
  return typeof key === 'number' ? `${path}[${key}]` : path ? `${path}.${key}` : key;
}

export function object(v: unknown, path: string, optional = false): Obj {
  if (v === undefined || v === null) {
    if (optional) return {};
    throw new ConfigError(path, 'is required');
  }
  if (typeof v !== 'object' || Array.isArray(v)) throw new ConfigError(path, 'must be a mapping');
  return v as Obj;
}

export function list(v: unknown, path: string, optional = false): unknown[] {
  if (v === undefined || v === null) {
    if (optional) return [];
    throw new ConfigError(path, 'is required');
  }
  if (!Array.isArray(v)) throw new ConfigError(path, 'must be a list');
  return v;
}

export function str(v: unknown, path: string, fallback?: string): string {
  if (v === undefined || v === null) {
    if (fallback !== undefined) return fallback;
    throw new ConfigError(path, 'is required');
  }
  if (typeof v !== 'string') throw new ConfigError(path, 'must be a string');
  return v;
}

export function bool(v: unknown, path: string, fallback: boolean): boolean {
  if (v === undefined || v === null) return fallback;
  if (v === true || v === 'true') return true;
  if (v === false || v === 'false') return false;
  throw new ConfigError(path, 'must be true or false');
}

/**
 * The longest delay a Node timer takes (2^31 − 1 ms, ~24.8 days): setTimeout/setInterval turn anything
 * longer into 1 ms (TimeoutOverflowWarning), so a huge `drain_seconds` cut every stream at once. Every
 * config field used as a timer delay has it (or less) as its `max`.
 */
export const MAX_TIMER_MS = 2_147_483_647;
/** MAX_TIMER_MS in whole seconds, for `_seconds` fields. */
export const MAX_TIMER_SECONDS = 2_147_483;

/** A number; interpolated strings like "8080" are accepted. */
export function num(v: unknown, path: string, opts: { fallback?: number; min?: number; max?: number; integer?: boolean } = {}): number {
  if (v === undefined || v === null || v === '') {
    if (opts.fallback !== undefined) return opts.fallback;
    throw new ConfigError(path, 'is required');
  }
  const n = typeof v === 'string' && v.trim() !== '' ? Number(v) : v;
  if (typeof n !== 'number' || !Number.isFinite(n)) throw new ConfigError(path, 'must be a number');
  if (opts.integer && !Number.isInteger(n)) throw new ConfigError(path, 'must be an integer');
  if (opts.min !== undefined && n < opts.min) throw new ConfigError(path, `must be >= ${opts.min}`);
  if (opts.max !== undefined && n > opts.max) throw new ConfigError(path, `must be <= ${opts.max}`);
  return n;
}

export function noUnknown(o: Obj, path: string, known: readonly string[]): void {
  for (const k of Object.keys(o))
    if (!known.includes(k)) throw new ConfigError(at(path, k), `unknown field (expected one of: ${known.join(', ')})`);
}

/** An optional string: absent or empty → undefined. */
export function optional(v: unknown, path: string): string | undefined {
  return str(v, path, '') || undefined;
}

/** `v` when it is one of `allowed`, else a ConfigError at `path` naming them. */
export function oneOf<T extends string>(v: string, allowed: readonly T[], path: string): T {
  if (!(allowed as readonly string[]).includes(v))
    throw new ConfigError(path, `must be one of ${allowed.join(', ')}, got ${JSON.stringify(v)}`);
  return v as T;
}
