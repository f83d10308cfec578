/**
 * POST /v1/chat/completions (SPEC §1.2, §2a, §4): the chat endpoint's declaration for the metered
 * pipeline (routes/metered.ts): its body, its output bound, its hold estimate and its upstream payload.
 */
import type { ModelConfig } from '../config/schema.ts';
import type { RouteDoc } from '../http/openapi.ts';
import { estimatePromptTokens, PROMPT_EMBEDS_PARTS, renderedFields, type ChatBodyLike } from '../credit/hold-estimate.ts';
import { CHAT } from '../meter/formats.ts';
import type { Budget, Tokenizer } from '../meter/tokenizer.ts';
import { meteredResponses, type MeteredEndpoint, type StatefulRequest } from './endpoint.ts';
import { validateChatBody, type ChatBody } from './chat-validate.ts';
import { capOutputFields } from './output-cap.ts';
import { laxFalse, laxTrue } from './lax-bool.ts';

/** The route's OpenAPI description: the fields validateChatBody checks; every other field passes through. */
const CHAT_DOC: RouteDoc = {
  summary: 'Create a chat completion (streamed with stream: true), metered and billed',
  auth: 'key',
  scope: 'chat',
  body: {
    type: 'object',
    required: ['model', 'messages'],
    additionalProperties: true,
    properties: {
      model: { type: 'string', minLength: 1 },
      messages: {
        type: 'array',
        minItems: 1,
        items: {
          type: 'object',
          required: ['role'],
          properties: {
            role: { enum: ['system', 'developer', 'user', 'assistant', 'tool'] },
            content: { type: ['string', 'array', 'null'] },
          },
        },
      },
      stream: { type: ['boolean', 'null'] },
      stream_options: { type: ['object', 'null'] },
      max_tokens: { type: ['integer', 'null'], exclusiveMinimum: 0, description: "clamped to the model's max_output_tokens" },
      max_completion_tokens: { type: ['integer', 'null'], exclusiveMinimum: 0 },
      n: { type: ['integer', 'null'], exclusiveMinimum: 0, description: 'at most limits.max_n' },
    },
  },
  responses: meteredResponses("The upstream's completion (JSON), or its stream (text/event-stream)", 'chat', '/v1/chat/completions'),
};

/**
 * The output a request may produce, and so what its hold covers (SPEC §12): the requested maximum
 * (`max_completion_tokens`, else `max_tokens`) clamped to the model's cap, the cap when none was asked,
 * times `n` choices. A larger request is clamped, never refused.
 */
export function outputBound(body: ChatBody, model: ModelConfig): { perChoice: number; total: number } {
  const requested = body.max_completion_tokens ?? body.max_tokens ?? model.maxOutputTokens;
  const perChoice = Math.min(requested, model.maxOutputTokens);
  return { perChoice, total: perChoice * (body.n ?? 1) };
}

/**
 * Builds the upstream body: model rewritten, output capped by what was held, usage forced on streams.
 * Once per request, never per chunk. `max_tokens` is always sent (every OpenAI-compatible server reads
 * it), and `max_completion_tokens` too when the client sent that one, both the clamped value: without
 * them an upstream generates up to its own limit, past the hold.
 */
function upstreamBody(body: ChatBody, model: ModelConfig, perChoice: number): Buffer {
  // A copy, then stores: fields after a spread in one literal are defined in V8's runtime, per request.
  const out: Record<string, unknown> = { ...body };
  capOutputFields(out, perChoice, body.n ?? 1); // llama.cpp's n_predict / n_cmpl, max_output_tokens
  out.model = model.upstreamModel;
  out.max_tokens = perChoice;
  if (body.max_completion_tokens !== undefined && body.max_completion_tokens !== null) out.max_completion_tokens = perChoice;
  if (body.stream === true) {
    const so = body.stream_options && typeof body.stream_options === 'object' ? body.stream_options : {};
    out.stream_options = { ...so, include_usage: true };
  }
  return Buffer.from(JSON.stringify(out));
}

/**
 * Prompt tokens by the fallback tokenizer (no usage came back): the messages, the tool definitions
 * (`tools`, legacy `functions`), which a template renders into the prompt, and the other fields the hold
 * counts as rendered (credit/hold-estimate.ts renderedFields: `documents`, `chat_template_kwargs`, a
 * `response_format` JSON schema); each counted as its JSON.
 */
async function countChatPrompt(payload: Buffer, tokenizer: Tokenizer, budget: Budget): Promise<number> {
  return countChatFields(JSON.parse(payload.toString('utf8')) as ChatBodyLike & { messages: unknown[] }, tokenizer, budget);
}

/** countChatPrompt of a parsed body (also the chat form of /v1/embeddings: routes/embeddings.ts). */
export async function countChatFields(
  body: ChatBodyLike & { messages: readonly unknown[] },
  tokenizer: Tokenizer,
  budget: Budget,
): Promise<number> {
  let n = await tokenizer.countPromptTokensBounded(body.messages, budget);
  for (const defs of [body.tools, body.functions]) {
    if (Array.isArray(defs) && defs.length > 0) n += await tokenizer.countTextBounded(JSON.stringify(defs), budget);
  }
  const rendered = renderedFields(body);
  if (rendered !== undefined) for (const v of rendered) n += await tokenizer.countTextBounded(JSON.stringify(v) ?? '', budget);
  return n;
}

/**
 * A chat template sent with the request: vLLM's `chat_template`, or `chat_template_kwargs.chat_template`
 * (vLLM merges the kwargs over its template arguments, so that one wins; it accepts either only with
 * `--trust-request-chat-template`). Any value not null counts, as vLLM's own check has it.
 */
export function requestTemplate(body: ChatBodyLike): boolean {
  if (body.chat_template !== undefined && body.chat_template !== null) return true;
  const kwargs = body.chat_template_kwargs;
  if (typeof kwargs !== 'object' || kwargs === null) return false;
  const template = (kwargs as { chat_template?: unknown }).chat_template;
  return template !== undefined && template !== null;
}

/**
 * Input the estimate cannot bound, held at the context window. vLLM's `prompt_embeds` content part
 * (`{"type": "prompt_embeds", "data": "<base64 torch tensor>"}`, passed through; credit/hold-estimate.ts
 * PROMPT_EMBEDS_PARTS): its rows are prompt tokens (a sparse tensor of a few bytes stands for any number of
 * rows), so its non-text allowance would not hold. A request chat template (requestTemplate): a Jinja loop
 * renders a prompt of any size from a few bytes, so no bound linear in the body exists. vLLM renders
 * everything into the one prompt and refuses a prompt longer than the context window (max_model_len), so
 * the request holds the context window of input, or the estimate when that is larger: one window for the
 * request however many parts it has (unlike completions, where each embeds item is a prompt of its own).
 * An answer without usage bills that held input part plus the output counted (meter/bill.ts billStateful:
 * no stored answer to ask, so no retrievePath): what such a prompt rendered to is unknowable from the
 * body. The embeds count is set by the estimate's walk: an ordinary request pays three property reads here.
 */
export function unseenPrompt(body: ChatBodyLike, model: ModelConfig, promptEstimate: number): StatefulRequest | undefined {
  if (body[PROMPT_EMBEDS_PARTS] === undefined && !requestTemplate(body)) return undefined;
  return { heldPrompt: Math.max(model.contextWindow, promptEstimate) };
}

/**
 * vLLM's chat `echo` (a lax boolean, lax-bool.ts): the answer starts with the last message's content when
 * that message has the answer's role — `assistant` (a prefill), or any role when `add_generation_prompt` is false (the answer
 * then continues the last message). Such an answer's text is that content and then the completion, so
 * without usage it is billed as one whose text cannot be counted (`uncounted`), never its prefill as
 * completion (docs/behaviour.md).
 */
function echoesLastMessage(body: ChatBody): boolean {
  if (laxFalse(body['add_generation_prompt'])) return true;
  const messages = body.messages as unknown;
  const last = Array.isArray(messages) ? (messages.at(-1) as { role?: unknown } | undefined) : undefined;
  return last?.role === 'assistant';
}

/** The chat completions endpoint. */
export const CHAT_COMPLETIONS: MeteredEndpoint<ChatBody> = {
  endpoint: 'chat',
  scope: 'chat',
  pattern: '/v1/chat/completions',
  upstreamPath: '/chat/completions',
  doc: CHAT_DOC,
  format: CHAT,
  validate: (value, limits) => validateChatBody(value, limits.maxN),
  output: outputBound,
  estimatePrompt: estimatePromptTokens,
  payload: upstreamBody,
  reply: (body) => ({
    stream: body.stream === true,
    // A lax boolean as vLLM reads it (lax-bool.ts): "true" asks for the usage chunk as true does.
    wantsUsage: laxTrue((body.stream_options as { include_usage?: unknown } | null | undefined)?.include_usage),
    severalChoices: (body.n ?? 1) > 1,
    echo: laxTrue(body['echo']) && echoesLastMessage(body),
  }),
  countPrompt: countChatPrompt,
  stateful: unseenPrompt,
};
