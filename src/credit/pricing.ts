/**
 * Exact pricing (SPEC §4). A price is credits per million tokens, which is the same number as
 * micro-credits per token. It is kept as an integer count of 1e-6 micro-credits per token, so cost is
 * integer arithmetic: ceil((prompt × in + completion × out) / 1e6). No float touches a balance.
 * Cached prompt tokens (SPEC §4 "Cached input") are a part of the prompt priced at `cached_input`; a model
 * without it prices them at the input price, so its cost is exactly what it was before cached tokens existed.
 */
import { ConfigError } from '../config/errors.ts';

const SCALE = 1_000_000n;

export interface Price {
  /** 1e-6 micro-credits per prompt token. */
  readonly inputScaled: bigint;
  /** 1e-6 micro-credits per completion token. */
  readonly outputScaled: bigint;
  /** 1e-6 micro-credits per cached prompt token (`price.cached_input`; the input price when unset). */
  readonly cachedInputScaled: bigint;
}

function scaled(v: unknown, path: string): bigint {
  const text = typeof v === 'number' ? String(v) : typeof v === 'string' ? v.trim() : '';
  // Parsed from the decimal text, not from the float, so 0.1 is exactly 100000, not 0.1000000000000000055…
  const m = /^(\d+)(?:\.(\d{1,6}))?$/.exec(text);
  if (!m) throw new ConfigError(path, `must be a non-negative number with at most 6 decimals, got ${JSON.stringify(v)}`);
  return BigInt(m[1]!) * SCALE + BigInt((m[2] ?? '').padEnd(6, '0'));
}

/** Parses `price.input` / `price.output` (and the optional `price.cached_input`) from config. */
export function parsePrice(input: unknown, output: unknown, path: string, cachedInput?: unknown): Price {
  const inputScaled = scaled(input, `${path}.input`);
  return {
    inputScaled,
    outputScaled: scaled(output, `${path}.output`),
    cachedInputScaled: cachedInput === undefined ? inputScaled : scaled(cachedInput, `${path}.cached_input`),
  };
}

/**
 * The hold of `promptTokens` and `completionTokens` (SPEC §4): what is cached is unknown before the
 * answer, so the prompt is held at the higher of the input and cached-input prices — never below the debit.
 */
export function holdMicros(price: Price, promptTokens: number, completionTokens: number): number {
  return costMicros(price, promptTokens, completionTokens, price.cachedInputScaled > price.inputScaled ? promptTokens : 0);
}

/**
 * Cost in micro-credits: ceil((prompt − cached) × input + cached × cached_input + completion × output),
 * exact. `cachedTokens` is a part of `promptTokens`, clamped to [0, prompt].
 */
export function costMicros(price: Price, promptTokens: number, completionTokens: number, cachedTokens = 0): number {
  let total = BigInt(promptTokens) * price.inputScaled + BigInt(completionTokens) * price.outputScaled;
  // The cached part moves from the input price to cached_input (nothing to do without cached tokens).
  if (cachedTokens > 0) total += BigInt(Math.min(cachedTokens, promptTokens)) * (price.cachedInputScaled - price.inputScaled);
  return Number((total + SCALE - 1n) / SCALE);
}
