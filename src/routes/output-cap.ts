/**
 * The output fields an upstream may read instead of the endpoint's own cap (SPEC §12: the upstream request
 * carries the cap the hold covers). llama.cpp's server reads `n_predict` before `max_completion_tokens`,
 * and that before `max_tokens`, and `n_cmpl` before `n`, on every OpenAI route it serves
 * (tools/server/server-task.cpp, params_from_json_cmpl); `n_predict: -1` generates to the context's end.
 * Passed through untouched, any of them took the output past the hold. Once per request, on the payload.
 */

/** Output-length fields of any endpoint or server: each one present is held to the cap. */
const LENGTH_FIELDS = ['max_tokens', 'max_completion_tokens', 'max_output_tokens', 'n_predict'] as const;

/**
 * Holds every output-length field present in `out` to `perChoice` (a smaller non-negative integer is the
 * client's own limit and is kept; anything else becomes the cap), and `n_cmpl` to `choices`, the choices
 * per prompt the hold covers. The endpoint then sets its own cap field as before.
 */
export function capOutputFields(out: Record<string, unknown>, perChoice: number, choices: number): void {
  for (const k of LENGTH_FIELDS) {
    const v = out[k];
    if (v === undefined) continue;
    out[k] = typeof v === 'number' && Number.isSafeInteger(v) && v >= 0 && v < perChoice ? v : perChoice;
  }
  if (out['n_cmpl'] !== undefined) out['n_cmpl'] = choices;
}
