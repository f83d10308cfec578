/**
 * What the simulator says: deterministic token text, usage, and the exact OpenAI/vLLM wire shapes
 * (SSE chunks, `chat.completion`, error bodies). Strings are assembled from per-request prefixes so a
 * token chunk costs one template concatenation, not a JSON.stringify.
 */
import type { SimOptions } from './steer.ts';
import type { Exchange } from './exchange.ts';
import { encodeWhole, GARBAGE } from './encode.ts';

/** Usage as OpenAI reports it. */
export interface SimUsage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  /** Only when steered `cached_tokens` (steer.ts). */
  prompt_tokens_details?: { cached_tokens: number };
}

/** How one completion will come out: tokens emitted, why it stops, and the usage it reports. */
export interface CompletionPlan {
  id: string;
  created: number;
  model: string;
  /** Completion tokens emitted. */
  emit: number;
  finishReason: 'stop' | 'length';
  /** Usage to report, or undefined when steered `usage: absent`. */
  usage: SimUsage | undefined;
  /** Chat: how many of the first tokens are reasoning, and under which keys (steered `reasoning_tokens`). */
  reasoning?: { tokens: number; fields: 'reasoning' | 'reasoning_content' | 'both' };
  /** Steered `token_bytes` (Responses): the length of each token's text. */
  tokenBytes?: number;
  /** Steered `image_bytes` (Responses): a hosted image generation call with an image this long in base64. */
  imageBytes?: number;
}

/**
 * Prompt tokens the simulator reports: the UTF-16 length of every message's string content (and of the
 * `text` of each content part when content is an array), summed, divided by 4, rounded up, at least 1.
 * Roles, names and tool calls are not counted. A body without messages counts as 1.
 *
 * vLLM's chat `prompt_embeds` content part, `{"type": "prompt_embeds", "data": "<base64 torch tensor>"}`
 * (vllm.entrypoints.chat_utils ChatCompletionContentPartPromptEmbedsParam: `data` is the tensor of
 * shape (num_tokens, hidden_size); vLLM splices its rows into the rendered prompt), adds its rows:
 * `opts.embedsTokens` (steered `embeds_tokens`: a sparse tensor stands for any number of rows) or its
 * base64 length ÷ 4, rounded up.
 *
 * vLLM's chat request fields its chat template renders into the prompt count as the length of their
 * JSON: `documents` (RAG documents: Granite, Command-R templates) and `chat_template_kwargs` (values a
 * template renders). `tools` and `response_format` do not (the simulator never counted tool definitions;
 * vLLM does not render a response format).
 *
 * A chat template sent with the request (vLLM's `chat_template`, or `chat_template_kwargs.chat_template`,
 * which wins as in vLLM; accepted with `--trust-request-chat-template`) renders the messages' text
 * `templateRepeats` times: a Jinja loop makes a short template render a prompt of any size.
 */
export function simPromptTokens(body: unknown, opts?: Pick<SimOptions, 'embedsTokens'>): number {
  let chars = 0;
  let rows = 0;
  let text = 0;
  if (isObject(body)) {
    for (const field of ['documents', 'chat_template_kwargs']) {
      const v = body[field];
      if (v !== undefined && v !== null) chars += JSON.stringify(v).length;
    }
  }
  const messages = isObject(body) ? body['messages'] : undefined;
  if (Array.isArray(messages)) {
    for (const m of messages) {
      const content = isObject(m) ? m['content'] : undefined;
      if (typeof content === 'string') text += content.length;
      else if (Array.isArray(content)) {
        for (const part of content) {
          if (!isObject(part)) continue;
          const t = part['text'];
          if (typeof t === 'string') text += t.length;
          else if (
            part['type'] === 'prompt_embeds' ||
            part['type'] === 'image_embeds' ||
            part['type'] === 'audio_embeds' ||
            part['type'] === 'video_embeds'
          ) {
            // prompt_embeds carries its tensor in `data`; vLLM's image_embeds / audio_embeds under their type's name.
            const data = part['type'] === 'prompt_embeds' ? part['data'] : part[part['type']];
            rows += opts?.embedsTokens ?? simTextTokens(typeof data === 'string' ? data.length : 0);
          }
        }
      }
    }
  }
  if (text > 0) chars += text * templateRepeats(body);
  return Math.max(1, Math.ceil(chars / 4) + rows);
}

/**
 * How many times a request's chat template renders the messages (simPromptTokens): N for a template with
 * a `range(N)` loop (`{% for _ in range(N) %}…{% endfor %}`, the first one), else 1, as without a template.
 */
export function templateRepeats(body: unknown): number {
  if (!isObject(body)) return 1;
  const kwargs = body['chat_template_kwargs'];
  const template = (isObject(kwargs) ? kwargs['chat_template'] : undefined) ?? body['chat_template'];
  if (typeof template !== 'string') return 1;
  const m = /range\(\s*(\d{1,9})\s*\)/.exec(template);
  return m === null ? 1 : Number(m[1]);
}

/** The text of completion token `i` (0-based): `tok0 `, `tok1 `, … */
export function simTokenText(i: number): string {
  return `tok${i} `;
}

/** The whole completion text of `n` tokens: `tok0 tok1 … tok{n-1} ` (each word followed by a space). */
export function simCompletionText(n: number): string {
  let s = '';
  for (let i = 0; i < n; i++) s += `tok${i} `;
  return s;
}

/**
 * Completion tokens a request gets: `tokens`, capped by `max_completion_tokens`, else `max_tokens`
 * (vLLM's order), unless `ignoreMaxTokens`. Returns the count and whether the cap cut it (`length`).
 */
export function simCompletionTokens(
  body: unknown,
  opts: Pick<SimOptions, 'tokens' | 'ignoreMaxTokens'>,
): { emit: number; finishReason: 'stop' | 'length' } {
  const cap = isObject(body) ? (positiveInt(body['max_completion_tokens']) ?? positiveInt(body['max_tokens'])) : undefined;
  return simOutputTokens(cap, opts);
}

/** Tokens produced under an output cap (`undefined`: none): `tokens`, cut by the cap unless `ignoreMaxTokens`. */
export function simOutputTokens(
  cap: number | undefined,
  opts: Pick<SimOptions, 'tokens' | 'ignoreMaxTokens'>,
): { emit: number; finishReason: 'stop' | 'length' } {
  if (cap === undefined || opts.ignoreMaxTokens || opts.tokens <= cap) return { emit: opts.tokens, finishReason: 'stop' };
  return { emit: cap, finishReason: 'length' };
}

/** Plans one generation of any API from its prompt count and output cap (the field names differ per API). */
export function planWith(id: string, body: unknown, opts: SimOptions, promptTokens: number, cap: number | undefined): CompletionPlan {
  const { emit, finishReason } = simOutputTokens(cap, opts);
  const model = isObject(body) && typeof body['model'] === 'string' ? body['model'] : 'sim-model';
  let usage: SimUsage | undefined;
  if (opts.usage === 'zero') usage = { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 };
  else if (opts.usage === 'present') {
    usage = { prompt_tokens: promptTokens, completion_tokens: emit, total_tokens: promptTokens + emit };
    if (opts.cachedTokens !== undefined) usage.prompt_tokens_details = { cached_tokens: Math.min(opts.cachedTokens, promptTokens) };
  }
  return {
    id,
    created: Math.floor(Date.now() / 1000),
    model,
    emit,
    finishReason,
    usage,
    ...(opts.tokenBytes !== undefined && { tokenBytes: opts.tokenBytes }),
    ...(opts.imageBytes !== undefined && { imageBytes: opts.imageBytes }),
  };
}

/** Plans one chat completion from the request body and its steering options. */
export function planCompletion(requestId: number, body: unknown, opts: SimOptions): CompletionPlan {
  const cap = isObject(body) ? (positiveInt(body['max_completion_tokens']) ?? positiveInt(body['max_tokens'])) : undefined;
  const plan = planWith(`chatcmpl-sim-${requestId}`, body, opts, simPromptTokens(body, opts), cap);
  if (opts.reasoningTokens) plan.reasoning = { tokens: opts.reasoningTokens, fields: opts.reasoningFields ?? 'reasoning' };
  return plan;
}

/**
 * The JSON members (no braces) carrying reasoning `text` under the plan's keys: with `both`, the same text
 * under `reasoning_content` then `reasoning`.
 */
function reasoningMembers(fields: 'reasoning' | 'reasoning_content' | 'both', text: string): string {
  const v = JSON.stringify(text);
  if (fields === 'both') return `"reasoning_content":${v},"reasoning":${v}`;
  return `"${fields}":${v}`;
}

/** The text of tokens `from … to - 1`. */
function tokensText(from: number, to: number): string {
  let s = '';
  for (let i = from; i < to; i++) s += `tok${i} `;
  return s;
}

/** `tokens` of text: its UTF-16 length divided by 4, rounded up (the simulator's one tokenizer rule). */
export function simTextTokens(chars: number): number {
  return Math.ceil(chars / 4);
}

/** The SSE events of one streamed completion, built lazily from shared prefixes. */
export interface ChunkSource {
  /** JSON chunks in order: role, one per token, finish, then usage when asked for. */
  count: number;
  /** The `data: …\n\n` event of chunk `k` (0-based). */
  event(k: number): string;
  /** The index of the first token chunk (the role chunk comes before it in chat). */
  firstToken: number;
}

/** The terminating SSE event. */
export const DONE_EVENT = 'data: [DONE]\n\n';

/**
 * Builds the SSE chunks of a plan. Like OpenAI, when the client set `stream_options.include_usage`
 * every chunk carries `"usage":null` and a last chunk with `"choices":[]` carries the usage; steered
 * `usage: absent` drops both, as an upstream that ignores stream_options would.
 */
export function streamChunks(plan: CompletionPlan, includeUsage: boolean): ChunkSource {
  const withUsage = includeUsage && plan.usage !== undefined;
  const head = `data: {"id":"${plan.id}","object":"chat.completion.chunk","created":${plan.created},"model":${JSON.stringify(plan.model)},"choices":[{"index":0,"delta":`;
  const tail = withUsage ? ',"usage":null}\n\n' : '}\n\n';
  const count = plan.emit + 2 + (withUsage ? 1 : 0);
  return {
    count,
    firstToken: 1,
    event(k) {
      if (k === 0) return `${head}{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]${tail}`;
      if (k <= plan.emit) {
        if (plan.reasoning !== undefined && k <= plan.reasoning.tokens) {
          return `${head}{${reasoningMembers(plan.reasoning.fields, `tok${k - 1} `)}},"logprobs":null,"finish_reason":null}]${tail}`;
        }
        return `${head}{"content":"tok${k - 1} "},"logprobs":null,"finish_reason":null}]${tail}`;
      }
      if (k === plan.emit + 1) return `${head}{},"logprobs":null,"finish_reason":"${plan.finishReason}"}]${tail}`;
      return `data: {"id":"${plan.id}","object":"chat.completion.chunk","created":${plan.created},"model":${JSON.stringify(plan.model)},"choices":[],"usage":${JSON.stringify(plan.usage)}}\n\n`;
    },
  };
}

/** The non-streaming `chat.completion` body of a plan (no `usage` key when usage is absent). */
export function completionBody(plan: CompletionPlan): string {
  const body: Record<string, unknown> = {
    id: plan.id,
    object: 'chat.completion',
    created: plan.created,
    model: plan.model,
    choices: [
      { index: 0, message: { role: 'assistant', content: simCompletionText(plan.emit) }, logprobs: null, finish_reason: plan.finishReason },
    ],
  };
  const r = plan.reasoning;
  if (r !== undefined) {
    // The first tokens are reasoning, the rest content (null when there is none, as vLLM sends it).
    const split = Math.min(r.tokens, plan.emit);
    const text = tokensText(0, split);
    const message: Record<string, unknown> = JSON.parse(`{"role":"assistant",${reasoningMembers(r.fields, text)}}`);
    message['content'] = split < plan.emit ? tokensText(split, plan.emit) : null;
    (body['choices'] as { message: unknown }[])[0]!.message = message;
  }
  if (plan.usage !== undefined) body['usage'] = plan.usage;
  return JSON.stringify(body);
}

/** An OpenAI error body: `{"error":{"message","type","param":null,"code"}}`. */
export function errorBody(status: number, message: string): string {
  const type = status === 429 ? 'rate_limit_error' : status >= 500 ? 'server_error' : 'invalid_request_error';
  return JSON.stringify({ error: { message, type, param: null, code: `sim_${status}` } });
}

export function positiveInt(v: unknown): number | undefined {
  return typeof v === 'number' && Number.isSafeInteger(v) && v > 0 ? v : undefined;
}

export function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

const VLLM_TRUE = new Set(['true', '1', 'yes', 'on', 't', 'y']);

/**
 * A request boolean as vLLM reads it (its request models are pydantic models in lax mode): `true`, the
 * number 1, or one of the strings `true`, `1`, `yes`, `on`, `t`, `y` in any case. The simulator's own
 * reading, kept apart from the gateway's (src/routes/lax-bool.ts) so a test can catch either one wrong.
 */
export function vllmTrue(v: unknown): boolean {
  return v === true || v === 1 || (typeof v === 'string' && VLLM_TRUE.has(v.toLowerCase()));
}

/** Headers of every JSON answer the simulator sends. */
export const JSON_HEADERS = { 'content-type': 'application/json', server: 'tollgate-simulator' };

/**
 * The steering every endpoint honours before it answers: refuse the connection, wait before the
 * headers, or answer with an error status. Returns true when the exchange is over (nothing more to send).
 */
export async function answeredBySteering(x: Exchange, opts: SimOptions): Promise<boolean> {
  if (opts.refuse) {
    x.refuse();
    return true;
  }
  await x.sleep(opts.headersDelayMs);
  if (x.done) return true;
  if (opts.status === undefined) return false;
  const payload = errorBody(opts.status, `simulated upstream error ${opts.status}`);
  const body = opts.encoding === undefined ? Buffer.from(payload) : encodeWhole(opts.encoding, payload);
  const encoded = opts.encoding === undefined ? {} : { 'content-encoding': opts.encoding };
  x.res.writeHead(opts.status, { ...JSON_HEADERS, ...encoded, 'content-length': body.length });
  x.end(body);
  return true;
}

/**
 * Sends a whole JSON answer as steered: in `encoding` (with the encoded length), broken off half-way
 * (`cut_after`: the socket closes) or corrupt half-way (`corrupt_after`: bytes no decoder accepts, then
 * a normal end).
 */
export function answerJson(x: Exchange, headers: Record<string, string>, payload: string, opts: SimOptions): void {
  const body = opts.encoding === undefined ? Buffer.from(payload) : encodeWhole(opts.encoding, payload);
  const h = opts.encoding === undefined ? headers : { ...headers, 'content-encoding': opts.encoding };
  if (opts.cutAfter !== undefined) {
    // Headers and half of the body, then the socket closes: a body broken mid-way.
    x.res.writeHead(200, h);
    x.res.write(body.subarray(0, body.length >> 1));
    return x.cut();
  }
  if (opts.corruptAfter !== undefined) {
    x.res.writeHead(200, h);
    x.res.write(body.subarray(0, body.length >> 1));
    return x.end(GARBAGE);
  }
  x.res.writeHead(200, { ...h, 'content-length': body.length });
  x.end(body);
}
