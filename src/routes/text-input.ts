/**
 * The `prompt` of /v1/completions and the `input` of /v1/embeddings share one shape (OpenAI's API
 * reference): a string, a list of strings, a list of token ids, or a list of token-id lists. Here: its
 * validation, its item count (each item is a prompt of its own), a hold bound and the fallback count.
 */
import { Issues, type Obj } from '../http/validate.ts';
import type { Budget, Tokenizer } from '../meter/tokenizer.ts';

export type TextInput = string | string[] | number[] | number[][];

function isTokenId(v: unknown): v is number {
  return typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;
}

function tokenList(v: unknown): v is number[] {
  return Array.isArray(v) && v.length > 0 && v.every(isTokenId);
}

/** The field `key` as a TextInput (required, non-empty, at most `maxItems` items), or undefined with an issue. */
export function textInput(o: Obj, key: string, issues: Issues, maxItems: number): TextInput | undefined {
  const v = o[key];
  const loc = ['body', key];
  if (v === undefined || v === null) {
    issues.add(loc, 'missing', 'Field required', o);
    return undefined;
  }
  if (typeof v === 'string') return v;
  const msg = 'Input should be a string, a list of strings, a list of token ids or a list of token-id lists';
  if (!Array.isArray(v) || v.length === 0) {
    issues.add(loc, 'text_input_type', msg, v);
    return undefined;
  }
  if (v.length > maxItems) {
    issues.add(loc, 'too_long', `List should have at most ${maxItems} items after validation, not ${v.length}`, v, {
      field_type: 'List',
      max_length: maxItems,
      actual_length: v.length,
    });
    return undefined;
  }
  if (v.every((x) => typeof x === 'string') || tokenList(v) || v.every(tokenList)) return v as TextInput;
  issues.add(loc, 'text_input_type', msg, v);
  return undefined;
}

/** How many separate prompts (or inputs) the value holds: each gets its own completions or embedding. */
export function inputItems(v: TextInput): number {
  if (typeof v === 'string' || typeof v[0] === 'number') return 1;
  return v.length;
}

/**
 * An upper bound on the value's tokens (SPEC §4): UTF-8 bytes of its strings (no byte-level tokenizer
 * makes more tokens than bytes: credit/hold-estimate.ts), token ids as themselves, plus `perItem`
 * special tokens (BOS/EOS) per item.
 */
export function inputTokenBound(v: TextInput, perItem: number): number {
  if (typeof v === 'string') return Buffer.byteLength(v) + perItem;
  if (typeof v[0] === 'number') return v.length + perItem;
  let n = 0;
  for (const item of v as (string | number[])[]) n += (typeof item === 'string' ? Buffer.byteLength(item) : item.length) + perItem;
  return n;
}

/** Tokens of the value by the fallback tokenizer (usage missing), token ids as themselves. */
export async function countInput(v: TextInput, tokenizer: Tokenizer, budget: Budget): Promise<number> {
  if (typeof v === 'string') return tokenizer.countTextBounded(v, budget);
  if (typeof v[0] === 'number') return v.length;
  let n = 0;
  for (const item of v as (string | number[])[])
    n += typeof item === 'string' ? await tokenizer.countTextBounded(item, budget) : item.length;
  return n;
}
