/**
 * A boolean field as vLLM reads it: its request models are pydantic models in lax mode, which take
 * `true`/`false`, the numbers 1/0, and the strings `true`, `1`, `yes`, `on`, `t`, `y` (and `false`, `0`,
 * `no`, `off`, `f`, `n`), any case, for a `bool`. The gateway passes such fields through untouched, so where
 * billing depends on one (an answer that echoes the prompt) it reads it the way the upstream will.
 */
const TRUE = new Set(['true', '1', 'yes', 'on', 't', 'y']);
const FALSE = new Set(['false', '0', 'no', 'off', 'f', 'n']);

/** True when vLLM would read `v` as true. */
export function laxTrue(v: unknown): boolean {
  return v === true || v === 1 || (typeof v === 'string' && TRUE.has(v.toLowerCase()));
}

/** True when vLLM would read `v` as false (absent is neither). */
export function laxFalse(v: unknown): boolean {
  return v === false || v === 0 || (typeof v === 'string' && FALSE.has(v.toLowerCase()));
}
