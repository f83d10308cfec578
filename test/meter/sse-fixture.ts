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
  usage?: { prompt_tokens: number; completion_tokens: number; prompt_tokens_details?: Record<string, unknown> } | null;
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

/**
 * A Responses API stream (typed events: `event: <type>` + JSON data with `type` and `sequence_number`)
 * carrying `pieces` as output_text deltas; usage (input/output_tokens) in response.completed, or
 * `usage: null` there when `usage` is null. The final events repeat the whole text, as OpenAI's do.
 */
export function buildResponsesStream(
  opts: {
    pieces?: string[];
    usage?: { input_tokens: number; output_tokens: number; input_tokens_details?: Record<string, unknown> } | null;
  } = {},
): {
  sse: string;
  text: string;
} {
  const pieces = opts.pieces ?? PIECES;
  const text = pieces.join('');
  let seq = 0;
  const ev = (type: string, fields: Record<string, unknown>) =>
    `event: ${type}\ndata: ${JSON.stringify({ type, sequence_number: seq++, ...fields })}\n\n`;
  const response = (final: boolean) => ({
    id: 'resp_67ccd2bed1ec8190',
    object: 'response',
    created_at: 1741476542,
    status: final ? 'completed' : 'in_progress',
    model: 'meta-llama/Llama-3.1-8B-Instruct',
    output: final
      ? [
          {
            id: 'msg_1',
            type: 'message',
            status: 'completed',
            role: 'assistant',
            content: [{ type: 'output_text', text, annotations: [] }],
          },
        ]
      : [],
    usage: final && opts.usage !== null ? { ...(opts.usage ?? { input_tokens: 21, output_tokens: pieces.length }), total_tokens: 0 } : null,
  });
  const part = { item_id: 'msg_1', output_index: 0, content_index: 0 };
  let sse = ev('response.created', { response: response(false) });
  sse += ev('response.in_progress', { response: response(false) });
  sse += ev('response.output_item.added', {
    output_index: 0,
    item: { id: 'msg_1', type: 'message', status: 'in_progress', role: 'assistant', content: [] },
  });
  sse += ev('response.content_part.added', { ...part, part: { type: 'output_text', text: '', annotations: [] } });
  for (const p of pieces) sse += ev('response.output_text.delta', { ...part, delta: p, logprobs: [] });
  sse += ev('response.output_text.done', { ...part, text, logprobs: [] });
  sse += ev('response.content_part.done', { ...part, part: { type: 'output_text', text, annotations: [] } });
  sse += ev('response.output_item.done', { output_index: 0, item: response(true).output[0] });
  sse += ev('response.completed', { response: response(true) });
  return { sse, text };
}
