/**
 * Reading the upstream's `usage` object. "Reported 0" and "reported nothing" are different cases
 * (SPEC §1.2): `"usage": null`, a missing key, or an object without both counts is *no* usage; an object
 * with zeros *is* usage.
 */

/** Token counts reported by the upstream. */
export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  /**
   * Cached prompt tokens (a part of prompt_tokens, SPEC §4 "Cached input"), set only when the upstream
   * reported more than 0: `prompt_tokens_details.cached_tokens` (chat, completions) or
   * `input_tokens_details.cached_tokens` (Responses). Clamped to the prompt count; a bad value is none.
   */
  cached_tokens?: number;
}

function isCount(v: unknown): v is number {
  return typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;
}

/**
 * Prompt and completion counts as a Usage, with the cached part read from `details` (the usage object's
 * `prompt_tokens_details` / `input_tokens_details`) when it holds a positive count; null unless both counts are.
 */
export function usageOf(p: unknown, c: unknown, details: unknown): Usage | null {
  if (!isCount(p) || !isCount(c)) return null;
  const k = typeof details === 'object' && details !== null ? (details as Record<string, unknown>)['cached_tokens'] : undefined;
  return isCount(k) && k > 0
    ? { prompt_tokens: p, completion_tokens: c, cached_tokens: Math.min(k, p) }
    : { prompt_tokens: p, completion_tokens: c };
}

/** The usage in `value` when it is an object with non-negative integer prompt and completion counts, else null. */
export function readUsage(value: unknown): Usage | null {
  if (typeof value !== 'object' || value === null) return null;
  const { prompt_tokens: p, completion_tokens: c, prompt_tokens_details: d } = value as Record<string, unknown>;
  return usageOf(p, c, d);
}

/** What a non-streaming response body tells the meter. */
export interface JsonUsage {
  usage: Usage | null;
  /** Generated text of every choice (content, reasoning, refusal, tool-call arguments), built on first call. */
  completionText: () => string;
}

function pushString(out: string[], v: unknown): void {
  if (typeof v === 'string' && v.length > 0) out.push(v);
}

/**
 * A message's reasoning: some servers (mlx-vlm; some vLLM versions) send it under both
 * `reasoning_content` and its alias `reasoning`, the same text, so one is counted when both are strings:
 * the longer, `reasoning_content` when they are equally long (as the stream scan: data-scan.ts).
 */
function reasoningOnce(content: unknown, alias: unknown): unknown {
  if (typeof content !== 'string') return alias;
  if (typeof alias !== 'string') return content;
  return alias.length > content.length ? alias : content;
}

/** Generated text of a chat completion body (every choice's content, reasoning, refusal, tool-call arguments). */
export function chatText(body: Record<string, unknown>): string {
  const choices = body['choices'];
  if (!Array.isArray(choices)) return '';
  const out: string[] = [];
  for (const choice of choices) {
    const msg = (choice as { message?: unknown } | null)?.message;
    if (typeof msg !== 'object' || msg === null) continue;
    const m = msg as Record<string, unknown>;
    pushString(out, reasoningOnce(m['reasoning_content'], m['reasoning']));
    pushString(out, m['content']);
    pushString(out, m['refusal']);
    if (Array.isArray(m['tool_calls'])) {
      for (const call of m['tool_calls']) pushString(out, (call as { function?: { arguments?: unknown } } | null)?.function?.arguments);
    }
  }
  return out.join('');
}

/** Where a non-streaming body keeps its usage and text (meter/formats.ts); chat by default. */
export interface BodyReader {
  usage(value: unknown): Usage | null;
  bodyText(body: Record<string, unknown>): string;
}

const CHAT_BODY: BodyReader = { usage: readUsage, bodyText: chatText };

/**
 * Usage and completion text of a non-streaming response body. The body is bounded by the upstream
 * response and parsed once; a body that is not JSON yields no usage and empty text.
 */
export function readUsageFromJson(body: Buffer, reader: BodyReader = CHAT_BODY): JsonUsage {
  let parsed: unknown;
  try {
    parsed = JSON.parse(body.toString('utf8'));
  } catch {
    return { usage: null, completionText: () => '' };
  }
  const obj = typeof parsed === 'object' && parsed !== null ? (parsed as Record<string, unknown>) : {};
  let text: string | undefined;
  return {
    usage: reader.usage(obj['usage']),
    completionText: () => (text ??= reader.bodyText(obj)),
  };
}
