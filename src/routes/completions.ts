/**
 * POST /v1/completions (scope chat): legacy prompt completions, metered like chat (routes/metered.ts).
 * Each prompt of a list gets `n` choices (`best_of` generated, when larger), so the hold covers
 * prompts × max(n, best_of) × max_tokens. `max_tokens` defaults to 16 as in OpenAI's and vLLM's
 * completions API, clamped to the model's cap. vLLM's `prompt_embeds` hold the context window each
 * (promptEmbeds below).
 */
import type { ModelConfig } from '../config/schema.ts';
import type { RouteDoc } from '../http/openapi.ts';
import { Issues, bool, int, isObj, rootObject, str, type Obj } from '../http/validate.ts';
import { COMPLETIONS } from '../meter/formats.ts';
import { meteredResponses, type MeteredEndpoint, type OutputBound, type StatefulRequest } from './endpoint.ts';
import { countInput, inputItems, inputTokenBound, textInput, type TextInput } from './text-input.ts';
import { capOutputFields } from './output-cap.ts';
import { laxTrue } from './lax-bool.ts';

export interface CompletionsBody extends Obj {
  model: string;
  prompt: TextInput;
  suffix?: string | null;
  stream?: boolean | null;
  stream_options?: unknown;
  max_tokens?: number | null;
  n?: number | null;
  best_of?: number | null;
}

/** The API's default output cap when `max_tokens` is absent (OpenAI and vLLM: 16). */
export const DEFAULT_MAX_TOKENS = 16;
/** Prompts in one request, as OpenAI's API allows. */
export const MAX_PROMPTS = 2048;
/** BOS/EOS a tokenizer may add around each prompt. */
const PER_PROMPT = 2;

/** The validated body, or a ValidationError; `maxN` bounds `n` and `best_of` (limits.max_n, SPEC §12). */
export function validateCompletionsBody(value: unknown, maxN: number): CompletionsBody {
  const issues = new Issues();
  if (!rootObject(value, issues)) issues.done();
  const body = value as Obj;
  const opt = (k: string) => (body[k] === null ? {} : body);
  str(body, 'model', ['body'], issues, { required: true, minLength: 1 });
  textInput(body, 'prompt', issues, MAX_PROMPTS);
  str(opt('suffix'), 'suffix', ['body'], issues);
  bool(opt('stream'), 'stream', ['body'], issues);
  int(opt('max_tokens'), 'max_tokens', ['body'], issues, { gt: 0 });
  int(opt('n'), 'n', ['body'], issues, { gt: 0, le: maxN });
  int(opt('best_of'), 'best_of', ['body'], issues, { gt: 0, le: maxN });
  // vLLM's prompt_embeds (passed through) list: each item holds the context window (promptEmbeds), so its
  // count is bounded like the prompt list's.
  const embeds = body['prompt_embeds'];
  if (Array.isArray(embeds) && embeds.length > MAX_PROMPTS) {
    issues.add(
      ['body', 'prompt_embeds'],
      'too_long',
      `List should have at most ${MAX_PROMPTS} items after validation, not ${embeds.length}`,
      embeds,
      {
        field_type: 'List',
        max_length: MAX_PROMPTS,
        actual_length: embeds.length,
      },
    );
  }
  if (body.stream_options !== undefined && body.stream_options !== null && !isObj(body.stream_options)) {
    issues.add(['body', 'stream_options'], 'dict_type', 'Input should be a valid dictionary', body.stream_options);
  }
  issues.done();
  return body as CompletionsBody;
}

/** vLLM's `prompt_embeds` items (promptEmbeds below): 0 without them. */
function embedsItems(body: CompletionsBody): number {
  const embeds = body['prompt_embeds'];
  if (embeds === undefined || embeds === null) return 0;
  return Array.isArray(embeds) ? embeds.length : 1;
}

/**
 * Prompts the upstream answers: the text prompts and, for vLLM, each `prompt_embeds` item too (it generates
 * for every embeds item; that it skips an empty text prompt beside them only makes this an upper bound).
 */
function prompts(body: CompletionsBody): number {
  return inputItems(body.prompt) + embedsItems(body);
}

function outputBound(body: CompletionsBody, model: ModelConfig): OutputBound {
  const perChoice = Math.min(body.max_tokens ?? DEFAULT_MAX_TOKENS, model.maxOutputTokens);
  const choices = Math.max(body.n ?? 1, body.best_of ?? 1) * prompts(body);
  return { perChoice, total: perChoice * choices };
}

/**
 * vLLM's `prompt_embeds` (a base64 torch tensor, or a list of them; passed through): each is a prompt of
 * its own whose rows are tokens the text estimate never sees, and their count cannot be bounded by the
 * bytes (vLLM densifies a sparse tensor: a few hundred bytes can stand for any number of rows). The
 * upstream refuses a prompt longer than the context window, so each item holds that many input tokens,
 * beside the text prompt's bound; an answer without usage bills that held input part (meter/bill.ts
 * billStateful: there is no stored answer to ask). One field read for a request without embeddings.
 */
function promptEmbeds(body: CompletionsBody, model: ModelConfig, promptEstimate: number): StatefulRequest | undefined {
  const items = embedsItems(body);
  if (items === 0) return undefined;
  return { heldPrompt: promptEstimate + items * model.contextWindow };
}

/** Model rewritten, output capped by what was held, usage forced on streams (as for chat). */
function upstreamBody(body: CompletionsBody, model: ModelConfig, perChoice: number): Buffer {
  const out: Record<string, unknown> = { ...body }; // then stores, as for chat
  capOutputFields(out, perChoice, body.n ?? 1); // max_completion_tokens, llama.cpp's n_predict / n_cmpl
  out.model = model.upstreamModel;
  out.max_tokens = perChoice;
  if (body.stream === true) {
    const so = isObj(body.stream_options) ? body.stream_options : {};
    out.stream_options = { ...so, include_usage: true };
  }
  return Buffer.from(JSON.stringify(out));
}

const DOC: RouteDoc = {
  summary: 'Create a legacy text completion (streamed with stream: true), metered and billed',
  auth: 'key',
  scope: 'chat',
  body: {
    type: 'object',
    required: ['model', 'prompt'],
    additionalProperties: true,
    properties: {
      model: { type: 'string', minLength: 1 },
      prompt: {
        description: 'a string, a list of strings, a list of token ids or a list of token-id lists',
        type: ['string', 'array'],
      },
      suffix: { type: ['string', 'null'] },
      stream: { type: ['boolean', 'null'] },
      stream_options: { type: ['object', 'null'] },
      max_tokens: { type: ['integer', 'null'], exclusiveMinimum: 0, description: "default 16, clamped to the model's max_output_tokens" },
      n: { type: ['integer', 'null'], exclusiveMinimum: 0, description: 'at most limits.max_n' },
      best_of: { type: ['integer', 'null'], exclusiveMinimum: 0, description: 'at most limits.max_n' },
    },
  },
  responses: meteredResponses("The upstream's text_completion (JSON), or its stream (text/event-stream)", 'chat', '/v1/completions'),
};

/** The completions endpoint. */
export const COMPLETIONS_ENDPOINT: MeteredEndpoint<CompletionsBody> = {
  endpoint: 'completions',
  scope: 'chat',
  pattern: '/v1/completions',
  upstreamPath: '/completions',
  doc: DOC,
  format: COMPLETIONS,
  validate: (value, limits) => validateCompletionsBody(value, limits.maxN),
  output: outputBound,
  estimatePrompt: (body) =>
    inputTokenBound(body.prompt, PER_PROMPT) + (typeof body.suffix === 'string' ? Buffer.byteLength(body.suffix) : 0),
  payload: upstreamBody,
  reply: (body) => ({
    stream: body.stream === true,
    // A lax boolean as vLLM reads it (lax-bool.ts): "true" asks for the usage chunk as true does.
    wantsUsage: laxTrue((body.stream_options as { include_usage?: unknown } | null | undefined)?.include_usage),
    severalChoices: Math.max(body.n ?? 1, body.best_of ?? 1) * prompts(body) > 1,
    // vLLM (and OpenAI's legacy API) put the prompt before each choice's text.
    echo: laxTrue(body['echo']),
  }),
  countPrompt: async (payload, tokenizer, budget) => {
    const body = JSON.parse(payload.toString('utf8')) as CompletionsBody;
    const suffix = typeof body.suffix === 'string' ? await tokenizer.countTextBounded(body.suffix, budget) : 0;
    return (await countInput(body.prompt, tokenizer, budget)) + suffix;
  },
  stateful: promptEmbeds,
};
