/**
 * `POST /v1/completions` (legacy) and `POST /v1/embeddings` in the simulator. Completions stream one
 * `text_completion` chunk per token, a finish chunk, the usage chunk when `stream_options.include_usage`
 * asks for it, then [DONE]; `max_tokens` defaults to 16 as in OpenAI's and vLLM's API; vLLM's
 * `prompt_embeds` count as input (simCompletionsPromptTokens); `echo` and `logprobs` are honoured as vLLM
 * does (simEchoLogprobs). Embeddings answer
 * one deterministic vector per input, as floats or as base64 little-endian float32 (the openai SDK asks
 * for base64 by default); a body in vLLM's chat form (simEmbeddingsChatForm) one vector for its rendered
 * messages.
 */
import type { SimApi } from './chat.ts';
import type { Exchange } from './exchange.ts';
import type { SimOptions } from './steer.ts';
import {
  answerJson,
  answeredBySteering,
  DONE_EVENT,
  isObject,
  JSON_HEADERS,
  planWith,
  positiveInt,
  simCompletionText,
  simPromptTokens,
  simTextTokens,
  vllmTrue,
  type CompletionPlan,
} from './output.ts';

/**
 * Tokens of a `prompt` or `input` (string, strings, token ids or lists of them): strings by the
 * simulator's rule (UTF-16 length / 4, rounded up, per string), token ids as themselves, at least 1.
 */
export function simInputTokens(v: unknown): number {
  if (typeof v === 'string') return Math.max(1, simTextTokens(v.length));
  if (!Array.isArray(v)) return 1;
  let n = 0;
  for (const x of v) {
    if (typeof x === 'string') n += simTextTokens(x.length);
    else if (typeof x === 'number') n += 1;
    else if (Array.isArray(x)) n += x.length;
  }
  return Math.max(1, n);
}

/** The number of inputs: a string or one token list is one. */
function inputCount(v: unknown): number {
  return Array.isArray(v) && v.length > 0 && typeof v[0] !== 'number' ? v.length : 1;
}

function includeUsage(body: unknown): boolean {
  const so = isObject(body) ? body['stream_options'] : undefined;
  return isObject(so) && vllmTrue(so['include_usage']); // a lax boolean, as vLLM reads it
}

/**
 * Prompt tokens of a completions body: its `prompt` and, as vLLM takes them, its `prompt_embeds` (a
 * base64 tensor or a list of them): each item `embeds_tokens` (steered) or its base64 length ÷ 4. An
 * empty `prompt` beside embeddings is no prompt of its own (vLLM skips `""`).
 */
export function simCompletionsPromptTokens(body: unknown, opts: Pick<SimOptions, 'embedsTokens'>): number {
  const b = isObject(body) ? body : {};
  const embeds = b['prompt_embeds'];
  if (embeds === undefined || embeds === null) return simInputTokens(b['prompt']);
  let n = 0;
  for (const e of Array.isArray(embeds) ? embeds : [embeds]) {
    n += opts.embedsTokens ?? simTextTokens(typeof e === 'string' ? e.length : 0);
  }
  return n + (b['prompt'] === '' || b['prompt'] === undefined || b['prompt'] === null ? 0 : simInputTokens(b['prompt']));
}

/** A simulated logprob: a deterministic double printed at full precision, as vLLM's float32 values are (~19 bytes). */
function simLogprob(token: number, rank: number): number {
  return -((((((token * 31 + rank * 17) % 1000) + 1000) % 1000) + 1) / 77);
}

/**
 * vLLM's `logprobs` object (CompletionLogProbs) of `tokens` (their texts) starting at text offset
 * `offset`: per token its offset, its logprob, its text, and its top `n` alternatives plus itself
 * (`top_logprobs`: n + 1 entries, as vLLM's `num_output_top_logprobs >= i`); `nullFirst`: the first
 * has no logprob (the prompt's first token: vLLM's prompt_logprobs start with None). JSON text, built
 * by hand: a 30k-token prompt makes megabytes of it.
 */
function simLogprobsJson(tokens: string[], first: number, offset: number, n: number, nullFirst: boolean): string {
  const offsets: string[] = [];
  const lps: string[] = [];
  const texts: string[] = [];
  const tops: string[] = [];
  for (let i = 0; i < tokens.length; i++) {
    const tok = tokens[i]!;
    offsets.push(String(offset));
    offset += tok.length;
    texts.push(JSON.stringify(tok));
    if (nullFirst && i === 0) {
      lps.push('null');
      tops.push('null');
      continue;
    }
    const k = first + i;
    lps.push(String(simLogprob(k, 0)));
    let top = `{${JSON.stringify(tok)}:${simLogprob(k, 0)}`;
    for (let j = 1; j <= n; j++) top += `,"alt${j}":${simLogprob(k, j)}`;
    tops.push(`${top}}`);
  }
  return `{"text_offset":[${offsets.join(',')}],"token_logprobs":[${lps.join(',')}],"tokens":[${texts.join(',')}],"top_logprobs":[${tops.join(',')}]}`;
}

/**
 * vLLM's `echo` and `logprobs: N` on /v1/completions (serving_completion.py): with `echo` the first
 * chunk's text (and the JSON answer's) starts with the prompt, and with both, its `logprobs` start with
 * one entry per prompt token (vLLM asks the engine for prompt logprobs when echo is set), each with N + 1
 * alternatives: a long prompt makes a first event of megabytes. A prompt token here is 4 characters
 * of the prompt (simTextTokens). A string prompt only; other prompts are not echoed.
 */
export function simEchoLogprobs(body: unknown): { echo: string; n: number | undefined } {
  const b = isObject(body) ? body : {};
  const n = typeof b['logprobs'] === 'number' && Number.isSafeInteger(b['logprobs']) && b['logprobs'] >= 0 ? b['logprobs'] : undefined;
  return { echo: vllmTrue(b['echo']) && typeof b['prompt'] === 'string' ? b['prompt'] : '', n };
}

/** The prompt's simulated tokens: 4 characters each. */
function promptPieces(prompt: string): string[] {
  const out: string[] = [];
  for (let i = 0; i < prompt.length; i += 4) out.push(prompt.slice(i, i + 4));
  return out;
}

/** The `logprobs` member of completion tokens `from` until `to` (echo: the prompt's tokens first), or `null`. */
function choiceLogprobs(e: { echo: string; n: number | undefined }, from: number, to: number, withEcho: boolean): string {
  if (e.n === undefined) return 'null';
  const gen: string[] = [];
  for (let k = from; k < to; k++) gen.push(`tok${k} `);
  const base = e.echo.length + simCompletionText(from).length;
  if (!withEcho || e.echo === '') return simLogprobsJson(gen, from, base, e.n, false);
  const prompt = promptPieces(e.echo);
  return simLogprobsJson([...prompt, ...gen], -prompt.length, 0, e.n, true);
}

export const COMPLETIONS_API: SimApi = {
  plan: (requestId, body, opts) =>
    planWith(`cmpl-sim-${requestId}`, body, opts, simCompletionsPromptTokens(body, opts), completionsCap(body)),
  stream(plan, body) {
    const withUsage = includeUsage(body) && plan.usage !== undefined;
    const head = `data: {"id":"${plan.id}","object":"text_completion","created":${plan.created},"model":${JSON.stringify(plan.model)},"choices":[{"index":0,"text":`;
    const tail = withUsage ? ',"usage":null}\n\n' : '}\n\n';
    const e = simEchoLogprobs(body);
    // The first chunk carries the echo (and the prompt's logprobs), as vLLM's does.
    const text = (k: number, t: string) => (k === 0 && e.echo !== '' ? JSON.stringify(e.echo + t) : `"${t}"`);
    return {
      count: plan.emit + 1 + (withUsage ? 1 : 0),
      firstToken: 0,
      event(k) {
        if (k < plan.emit)
          return `${head}${text(k, `tok${k} `)},"logprobs":${choiceLogprobs(e, k, k + 1, k === 0)},"finish_reason":null}]${tail}`;
        if (k === plan.emit)
          return `${head}${text(k, '')},"logprobs":${choiceLogprobs(e, k, k, k === 0)},"finish_reason":"${plan.finishReason}"}]${tail}`;
        return `data: {"id":"${plan.id}","object":"text_completion","created":${plan.created},"model":${JSON.stringify(plan.model)},"choices":[],"usage":${JSON.stringify(plan.usage)}}\n\n`;
      },
    };
  },
  done: DONE_EVENT,
  json(plan: CompletionPlan, body: unknown) {
    const e = simEchoLogprobs(body);
    const out: Record<string, unknown> = {
      id: plan.id,
      object: 'text_completion',
      created: plan.created,
      model: plan.model,
      choices: [
        {
          index: 0,
          text: e.echo + simCompletionText(plan.emit),
          logprobs: JSON.parse(choiceLogprobs(e, 0, plan.emit, true)),
          finish_reason: plan.finishReason,
        },
      ],
    };
    if (plan.usage !== undefined) out['usage'] = plan.usage;
    return JSON.stringify(out);
  },
};

/** `max_tokens`, 16 when absent (the completions API's own default). */
function completionsCap(body: unknown): number {
  return (isObject(body) ? positiveInt(body['max_tokens']) : undefined) ?? 16;
}

/** Dimensions of a simulated embedding when the request names none. */
export const SIM_EMBEDDING_DIMENSIONS = 8;

/** The deterministic vector of input `i`: component j is ((i + 1)(j + 1) mod 7) / 8, exact in float32. */
export function simEmbedding(i: number, dims: number): number[] {
  const v: number[] = [];
  for (let j = 0; j < dims; j++) v.push((((i + 1) * (j + 1)) % 7) / 8);
  return v;
}

/**
 * Whether vLLM takes an embeddings body as its chat form (EmbeddingChatRequest: `messages` rendered with
 * the chat template, `input` ignored) rather than the completion form. vLLM's EmbeddingRequest is the
 * union EmbeddingCompletionRequest | EmbeddingChatRequest, both allowing extra fields, so a body with
 * `input` and `messages` validates as both; pydantic's smart union then takes the one with more fields
 * set, counting each message's keys, so any non-empty valid `messages` list wins over `input` (an empty
 * one ties, and the first, the completion form, wins). Valid here: each message an object with a string
 * `role`. Counted as a chat prompt (simPromptTokens) but for a top-level `documents`, which vLLM's
 * EmbeddingChatRequest does not render.
 */
export function simEmbeddingsChatForm(body: unknown): boolean {
  const m = isObject(body) ? body['messages'] : undefined;
  return Array.isArray(m) && m.length > 0 && m.every((x) => isObject(x) && typeof x['role'] === 'string');
}

/** Answers one embeddings request as steered by `opts` (status, refuse, headers delay, usage, cut_after, encoding). */
export async function respondEmbeddings(x: Exchange, body: unknown, opts: SimOptions): Promise<void> {
  if (await answeredBySteering(x, opts)) return;
  const b = isObject(body) ? body : {};
  const dims = positiveInt(b['dimensions']) ?? SIM_EMBEDDING_DIMENSIONS;
  const base64 = b['encoding_format'] === 'base64';
  const chat = simEmbeddingsChatForm(b);
  const data = [];
  for (let i = 0; i < (chat ? 1 : inputCount(b['input'])); i++) {
    const v = simEmbedding(i, dims);
    const embedding = base64 ? Buffer.from(new Float32Array(v).buffer).toString('base64') : v;
    data.push({ object: 'embedding', index: i, embedding });
  }
  const prompt = opts.usage === 'zero' ? 0 : chat ? simPromptTokens({ ...b, documents: undefined }, opts) : simInputTokens(b['input']);
  const out: Record<string, unknown> = { object: 'list', data, model: typeof b['model'] === 'string' ? b['model'] : 'sim-model' };
  if (opts.usage !== 'absent') out['usage'] = { prompt_tokens: prompt, total_tokens: prompt };
  const payload = JSON.stringify(out);
  answerJson(x, { ...JSON_HEADERS, 'x-sim-request-id': String(x.rec.id) }, payload, opts);
}
