/**
 * Realistic upstream SSE streams (vLLM / OpenAI chat.completion.chunk shape) for the meter's tests and
 * micro-benchmark. Built with JSON.stringify, exactly as the servers do, so escapes are real escapes.
 */

export interface StreamOptions {
  /** Generated pieces, one chunk each. */
  pieces?: string[];
  /** Line ending used inside events; events end with two of them. */
  eol?: '\n' | '\r\n';
  /** OpenAI sends `"usage":null` on every chunk once include_usage is set. */
  usageNullOnChunks?: boolean;
  /** Usage of the final usage-only chunk; null = no usage chunk. */
  usage?: { prompt_tokens: number; completion_tokens: number } | null;
  done?: boolean;
  reasoning?: string[];
  toolArgs?: string[];
}

const BASE = {
  id: 'chatcmpl-8f2c1e0b9a7d4c3e',
  object: 'chat.completion.chunk',
  created: 1732233600,
  model: 'meta-llama/Llama-3.1-8B-Instruct',
};

/** Default pieces: quotes, backslashes, newlines, accents, emoji, CJK and a literal `"content":"` inside text. */
export const PIECES = [
  'Hello',
  ' "world"',
  ', a \\ back',
  'slash\n',
  'café ',
  '😀',
  ' 日本',
  ' {"content":"x"}',
  ' <|endoftext|>',
  ' done.',
];

/** One SSE event carrying `obj` as JSON. */
export function event(obj: unknown, eol = '\n'): string {
  return `data: ${JSON.stringify(obj)}${eol}${eol}`;
}

function chunk(delta: unknown, finish: string | null, usageNull: boolean): Record<string, unknown> {
  const c: Record<string, unknown> = { ...BASE, choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }] };
  if (usageNull) c['usage'] = null;
  return c;
}

/** A whole stream as one string, and the text the meter should collect from it. */
export function buildStream(opts: StreamOptions = {}): { sse: string; text: string } {
  const eol = opts.eol ?? '\n';
  const pieces = opts.pieces ?? PIECES;
  const un = opts.usageNullOnChunks ?? false;
  let sse = event(chunk({ role: 'assistant', content: '' }, null, un), eol);
  let text = '';
  for (const r of opts.reasoning ?? []) {
    sse += event(chunk({ reasoning_content: r }, null, un), eol);
    text += r;
  }
  for (const p of pieces) {
    sse += event(chunk({ content: p }, null, un), eol);
    text += p;
  }
  (opts.toolArgs ?? []).forEach((a, i) => {
    const fn = i === 0 ? { name: 'get_weather', arguments: a } : { arguments: a };
    sse += event(
      chunk({ tool_calls: [{ index: 0, ...(i === 0 ? { id: 'call_1', type: 'function' } : {}), function: fn }] }, null, un),
      eol,
    );
    text += a;
  });
  sse += event(chunk({}, 'stop', un), eol);
  const usage = opts.usage === undefined ? { prompt_tokens: 21, completion_tokens: pieces.length } : opts.usage;
  if (usage !== null)
    sse += event({ ...BASE, choices: [], usage: { ...usage, total_tokens: usage.prompt_tokens + usage.completion_tokens } }, eol);
  if (opts.done ?? true) sse += `data: [DONE]${eol}${eol}`;
  return { sse, text };
}

/** The stream with its usage-only event removed: what a client that did not ask for usage must receive. */
export function withoutUsageEvent(sse: string, eol = '\n'): string {
  return sse
    .split(`${eol}${eol}`)
    .filter((e) => !(e.includes('"choices":[]') && e.includes('"usage":{')))
    .join(`${eol}${eol}`);
}
