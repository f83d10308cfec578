/**
 * Exact pricing (SPEC §4). A price is credits per million tokens, which is the same number as
 * micro-credits per token. It is kept as an integer count of 1e-6 micro-credits per token, so cost is
 * integer arithmetic: ceil((prompt × in + completion × out) / 1e6). No float touches a balance.
 */
import { ConfigError } from '../config/errors.ts';

const SCALE = 1_000_000n;

export interface Price {
  /** 1e-6 micro-credits per prompt token. */
  readonly inputScaled: bigint;
  /** 1e-6 micro-credits per completion token. */
  readonly outputScaled: bigint;
}

function scaled(v: unknown, path: string): bigint {
  const text = typeof v === 'number' ? String(v) : typeof v === 'string' ? v.trim() : '';
  // Parsed from the decimal text, not from the float, so 0.1 is exactly 100000, not 0.1000000000000000055…
  const m = /^(\d+)(?:\.(\d{1,6}))?$/.exec(text);
  if (!m) throw new ConfigError(path, `must be a non-negative number with at most 6 decimals, got ${JSON.stringify(v)}`);
  return BigInt(m[1]!) * SCALE + BigInt((m[2] ?? '').padEnd(6, '0'));
}

/** Parses `price.input` / `price.output` from config. */
export function parsePrice(input: unknown, output: unknown, path: string): Price {
  return { inputScaled: scaled(input, `${path}.input`), outputScaled: scaled(output, `${path}.output`) };
}

/** Cost in micro-credits: ceil(prompt × input + completion × output), exact. */
export function costMicros(price: Price, promptTokens: number, completionTokens: number): number {
  const total = BigInt(promptTokens) * price.inputScaled + BigInt(completionTokens) * price.outputScaled;
  return Number((total + SCALE - 1n) / SCALE);
}
