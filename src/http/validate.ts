/**
 * A small Pydantic-v2-style checker for request bodies and query strings (SPEC §3.1): problems are
 * collected in field order (Pydantic reports all of them; we stop at MAX_ISSUES), with Pydantic's `type`
 * and `msg`, `loc` as strings, and `input` = the enclosing object for a missing field.
 */
import { MAX_ISSUES, ValidationError, type ValidationIssue } from './errors.ts';

export type Obj = Record<string, unknown>;

/**
 * The issues of one body. Past MAX_ISSUES further ones are dropped and `full` turns true: a loop over
 * the elements of a client's list checks it and stops, so a body of a million bad elements costs as
 * little to refuse as one with ten (docs/behaviour.md, "Validation errors").
 */
export class Issues {
  readonly list: ValidationIssue[] = [];
  get full(): boolean {
    return this.list.length >= MAX_ISSUES;
  }
  add(loc: string[], type: string, msg: string, input: unknown, ctx: Record<string, unknown> = {}): void {
    if (this.full) return;
    this.list.push({ loc, msg, type, input: input === undefined ? null : input, ctx });
  }
  /** Throws the 422 when anything was collected. */
  done(): void {
    if (this.list.length > 0) throw new ValidationError(this.list);
  }
}

const plural = (n: number, word: string) => `${n} ${word}${n === 1 ? '' : 's'}`;

/** The body root must be an object. */
export function rootObject(v: unknown, issues: Issues, loc: string[] = ['body']): v is Obj {
  if (v && typeof v === 'object' && !Array.isArray(v)) return true;
  issues.add(loc, 'model_attributes_type', 'Input should be a valid dictionary or object to extract fields from', v);
  return false;
}

export function isObj(v: unknown): v is Obj {
  return !!v && typeof v === 'object' && !Array.isArray(v);
}

/** Reports fields outside `known` as extra_forbidden (admin bodies catch typos this way). */
export function forbidExtra(o: Obj, known: readonly string[], loc: string[], issues: Issues): void {
  for (const k in o) {
    if (issues.full) return;
    if (Object.hasOwn(o, k) && !known.includes(k)) issues.add([...loc, k], 'extra_forbidden', 'Extra inputs are not permitted', o[k]);
  }
}

interface StrOpts {
  required?: boolean;
  minLength?: number;
  maxLength?: number;
  pattern?: RegExp;
  patternText?: string;
}

/** A string field; undefined when absent and optional, or invalid. */
export function str(o: Obj, key: string, loc: string[], issues: Issues, opts: StrOpts = {}): string | undefined {
  const v = o[key];
  const at = [...loc, key];
  if (v === undefined) {
    if (opts.required) issues.add(at, 'missing', 'Field required', o);
    return undefined;
  }
  if (typeof v !== 'string') {
    issues.add(at, 'string_type', 'Input should be a valid string', v);
    return undefined;
  }
  const len = opts.minLength !== undefined || opts.maxLength !== undefined ? [...v].length : 0;
  if (opts.minLength !== undefined && len < opts.minLength) {
    issues.add(at, 'string_too_short', `String should have at least ${plural(opts.minLength, 'character')}`, v, {
      min_length: opts.minLength,
    });
    return undefined;
  }
  if (opts.maxLength !== undefined && len > opts.maxLength) {
    issues.add(at, 'string_too_long', `String should have at most ${plural(opts.maxLength, 'character')}`, v, {
      max_length: opts.maxLength,
    });
    return undefined;
  }
  if (opts.pattern && !opts.pattern.test(v)) {
    const p = opts.patternText ?? opts.pattern.source;
    issues.add(at, 'string_pattern_mismatch', `String should match pattern '${p}'`, v, { pattern: p });
    return undefined;
  }
  return v;
}

interface IntOpts {
  required?: boolean;
  gt?: number;
  ge?: number;
  le?: number;
}

/** An integer field (JSON number without fraction, within the safe range). */
export function int(o: Obj, key: string, loc: string[], issues: Issues, opts: IntOpts = {}): number | undefined {
  const v = o[key];
  const at = [...loc, key];
  if (v === undefined) {
    if (opts.required) issues.add(at, 'missing', 'Field required', o);
    return undefined;
  }
  if (typeof v !== 'number' || !Number.isFinite(v)) {
    issues.add(at, 'int_type', 'Input should be a valid integer', v);
    return undefined;
  }
  if (!Number.isInteger(v)) {
    issues.add(at, 'int_from_float', 'Input should be a valid integer, got a number with a fractional part', v);
    return undefined;
  }
  if (!Number.isSafeInteger(v)) {
    issues.add(at, 'int_parsing_size', 'Unable to parse input string as an integer, exceeded maximum size', v);
    return undefined;
  }
  if (opts.gt !== undefined && !(v > opts.gt))
    return void issues.add(at, 'greater_than', `Input should be greater than ${opts.gt}`, v, { gt: opts.gt });
  if (opts.ge !== undefined && !(v >= opts.ge))
    return void issues.add(at, 'greater_than_equal', `Input should be greater than or equal to ${opts.ge}`, v, { ge: opts.ge });
  if (opts.le !== undefined && !(v <= opts.le))
    return void issues.add(at, 'less_than_equal', `Input should be less than or equal to ${opts.le}`, v, { le: opts.le });
  return v;
}

/** A boolean field (JSON true/false only). */
export function bool(o: Obj, key: string, loc: string[], issues: Issues, required = false): boolean | undefined {
  const v = o[key];
  if (v === undefined) {
    if (required) issues.add([...loc, key], 'missing', 'Field required', o);
    return undefined;
  }
  if (typeof v !== 'boolean') {
    issues.add([...loc, key], 'bool_type', 'Input should be a valid boolean', v);
    return undefined;
  }
  return v;
}

/** One of a fixed set of strings (Pydantic's literal_error). */
export function literal<T extends string>(
  o: Obj,
  key: string,
  allowed: readonly T[],
  loc: string[],
  issues: Issues,
  required = false,
): T | undefined {
  const v = o[key];
  if (v === undefined) {
    if (required) issues.add([...loc, key], 'missing', 'Field required', o);
    return undefined;
  }
  if (typeof v === 'string' && (allowed as readonly string[]).includes(v)) return v as T;
  const expected =
    allowed.length === 1
      ? `'${allowed[0]}'`
      : `${allowed
          .slice(0, -1)
          .map((a) => `'${a}'`)
          .join(', ')} or '${allowed.at(-1)}'`;
  issues.add([...loc, key], 'literal_error', `Input should be ${expected}`, v, { expected });
  return undefined;
}

/** A list field; returns the array (elements unchecked) or undefined. */
export function list(
  o: Obj,
  key: string,
  loc: string[],
  issues: Issues,
  opts: { required?: boolean; minLength?: number; maxLength?: number } = {},
): unknown[] | undefined {
  const v = o[key];
  const at = [...loc, key];
  if (v === undefined) {
    if (opts.required) issues.add(at, 'missing', 'Field required', o);
    return undefined;
  }
  if (!Array.isArray(v)) {
    issues.add(at, 'list_type', 'Input should be a valid list', v);
    return undefined;
  }
  if (opts.minLength !== undefined && v.length < opts.minLength) {
    issues.add(at, 'too_short', `List should have at least ${plural(opts.minLength, 'item')} after validation, not ${v.length}`, v, {
      field_type: 'List',
      min_length: opts.minLength,
      actual_length: v.length,
    });
    return undefined;
  }
  if (opts.maxLength !== undefined && v.length > opts.maxLength) {
    issues.add(at, 'too_long', `List should have at most ${plural(opts.maxLength, 'item')} after validation, not ${v.length}`, v, {
      field_type: 'List',
      max_length: opts.maxLength,
      actual_length: v.length,
    });
    return undefined;
  }
  return v;
}

/** Query parameters as an object of first values. */
export function query(url: string): Obj {
  const q = url.indexOf('?');
  if (q < 0) return {};
  const out: Obj = {};
  for (const [k, v] of new URLSearchParams(url.slice(q + 1))) if (!(k in out)) out[k] = v;
  return out;
}

/** An integer query parameter (strings parsed as Pydantic does in lax mode). */
export function queryInt(o: Obj, key: string, issues: Issues, opts: IntOpts & { fallback: number }): number {
  const v = o[key];
  if (v === undefined) return opts.fallback;
  const n = typeof v === 'string' && /^\s*[+-]?\d+\s*$/.test(v) ? Number(v) : NaN;
  if (!Number.isSafeInteger(n)) {
    issues.add(['query', key], 'int_parsing', 'Input should be a valid integer, unable to parse string as an integer', v);
    return opts.fallback;
  }
  // Range errors echo the value as received (a string), as Pydantic does for query parameters.
  const sub = new Issues();
  const out = int({ [key]: n }, key, ['query'], sub, opts);
  for (const i of sub.list) issues.add(i.loc, i.type, i.msg, v, i.ctx);
  return out ?? opts.fallback;
}
