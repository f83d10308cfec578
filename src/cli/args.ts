/**
 * Argument parsing for the `tollgate` CLI on top of node:util parseArgs (strict: unknown flags are
 * usage errors). Global options may appear anywhere after the command; negative numbers are values.
 */
import { parseArgs, type ParseArgsOptionsConfig } from 'node:util';

export type OptionSpec = ParseArgsOptionsConfig;
export type Values = Record<string, string | boolean | string[] | undefined>;

/** A wrong invocation: exit code 2 and the usage of `group` (or the top-level usage). */
export class UsageError extends Error {
  readonly group: string | undefined;
  constructor(message: string, group?: string) {
    super(message);
    this.name = 'UsageError';
    this.group = group;
  }
}

/** Bad local setup or input (no admin token, an unreadable or malformed file): exit code 2, the message only. */
export class InputError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'InputError';
  }
}

/** Options every command accepts. The admin token is deliberately not among them (see usage.ts). */
export const GLOBAL_OPTIONS = {
  'admin-url': { type: 'string' },
  'public-url': { type: 'string' },
  json: { type: 'boolean' },
  help: { type: 'boolean', short: 'h' },
} as const satisfies OptionSpec;

// parseArgs would read "-5000" as the short flags -5 -0 -0 -0; no option of ours is a digit, so a
// token shaped like a negative number is always a value (a ledger correction, `--credits=-1.5`).
const NEGATIVE_NUMBER = /^-(\d[\d_]*(\.\d*)?|\.\d+)$/;

/** The first two positionals (group, command), read leniently before the command's own options are known. */
export function locate(argv: string[]): string[] {
  const { positionals } = parseArgs({ args: hideNegatives(argv).args, options: GLOBAL_OPTIONS, strict: false, allowPositionals: true });
  return positionals.slice(0, 2);
}

/** Parses argv strictly against the global options plus `options`; returns the positionals after `skip`. */
export function parse(argv: string[], options: OptionSpec, skip: string[], group: string): { values: Values; positionals: string[] } {
  const { args, restore } = hideNegatives(argv);
  let parsed;
  try {
    parsed = parseArgs({ args, options: { ...GLOBAL_OPTIONS, ...options }, strict: true, allowPositionals: true });
  } catch (e) {
    throw new UsageError(restore((e as Error).message.split('\n')[0] ?? 'invalid arguments'), group);
  }
  const positionals = parsed.positionals.map(restore);
  if (skip.some((word, i) => positionals[i] !== word)) {
    throw new UsageError(`options go after the command: tollgate ${skip.join(' ')} [options]`, group);
  }
  const values: Values = {};
  for (const [k, v] of Object.entries(parsed.values))
    values[k] = Array.isArray(v) ? v.map((s) => restore(String(s))) : typeof v === 'string' ? restore(v) : v;
  return { values, positionals: positionals.slice(skip.length) };
}

function hideNegatives(argv: string[]): { args: string[]; restore: (s: string) => string } {
  const hidden = new Map<string, string>();
  const args = argv.map((a, i) => {
    if (!NEGATIVE_NUMBER.test(a)) return a;
    const token = `\u0000neg${i}`;
    hidden.set(token, a);
    return token;
  });
  return { args, restore: (s) => (hidden.size === 0 ? s : s.replace(/\u0000neg\d+/g, (t) => hidden.get(t) ?? t)) };
}

/** A string option's value, or undefined. */
export function optString(values: Values, name: string): string | undefined {
  const v = values[name];
  return typeof v === 'string' ? v : undefined;
}

/** A required string option; a UsageError naming the flag when absent or empty. */
export function needString(values: Values, name: string, group: string): string {
  const v = optString(values, name);
  if (v === undefined || v === '') throw new UsageError(`--${name} is required`, group);
  return v;
}

/** A positive integer option (`--rpm 60`), or undefined when absent. */
export function optPositiveInt(values: Values, name: string, group: string): number | undefined {
  const v = optString(values, name);
  if (v === undefined) return undefined;
  const n = /^\d+$/.test(v) ? Number(v) : NaN;
  if (!Number.isSafeInteger(n) || n < 1) throw new UsageError(`--${name} must be a positive integer, got ${JSON.stringify(v)}`, group);
  return n;
}

/** A comma-separated list option (`--scopes chat,models`), or undefined when absent. */
export function optList(values: Values, name: string): string[] | undefined {
  const v = optString(values, name);
  return v === undefined
    ? undefined
    : v
        .split(',')
        .map((s) => s.trim())
        .filter((s) => s !== '');
}

/** Exactly `names.length` positionals, named in the error when one is missing or extra. */
export function expectPositionals(given: string[], names: string[], group: string): string[] {
  if (given.length < names.length) throw new UsageError(`missing <${names[given.length]}>`, group);
  if (given.length > names.length) throw new UsageError(`unexpected argument ${JSON.stringify(given[names.length])}`, group);
  return given;
}
