/**
 * POST /v1/embeddings (scope `embeddings`): metered like chat (routes/metered.ts) with no output: the
 * upstream's `usage.prompt_tokens` is billed at the model's input price, and the hold is sized from the
 * input's bytes (token ids as themselves). Answers are JSON only; a large one (thousands of vectors) is
 * relayed as it comes and only scanned for its top-level usage (meter/json-usage.ts).
 *
 * vLLM's chat form (chatForm): a body whose `messages` vLLM takes over `input` is held, counted and, with
 * a request chat template, held at the context window as a chat request's messages are.
 */
import type { ModelConfig } from '../config/schema.ts';
import { estimatePromptTokens, type ChatBodyLike } from '../credit/hold-estimate.ts';
import type { RouteDoc } from '../http/openapi.ts';
import { Issues, int, literal, rootObject, str, type Obj } from '../http/validate.ts';
import { EMBEDDINGS } from '../meter/formats.ts';
import type { Budget, Tokenizer } from '../meter/tokenizer.ts';
import { countChatFields, unseenPrompt } from './chat-completions.ts';
import { meteredResponses, type MeteredEndpoint, type StatefulRequest } from './endpoint.ts';
import { countInput, inputTokenBound, textInput, type TextInput } from './text-input.ts';

export interface EmbeddingsBody extends Obj, ChatBodyLike {
  model: string;
  input: TextInput;
}

/** Inputs in one request, as OpenAI's API allows. */
export const MAX_INPUTS = 2048;
/** BOS/EOS (or CLS/SEP) an embedding model adds around each input. */
const PER_INPUT = 2;

/** The validated body: model, input, and the two fields OpenAI constrains; every other field passes through. */
export function validateEmbeddingsBody(value: unknown): EmbeddingsBody {
  const issues = new Issues();
  if (!rootObject(value, issues)) issues.done();
  const body = value as Obj;
  const opt = (k: string) => (body[k] === null ? {} : body);
  str(body, 'model', ['body'], issues, { required: true, minLength: 1 });
  textInput(body, 'input', issues, MAX_INPUTS);
  literal(opt('encoding_format'), 'encoding_format', ['float', 'base64'] as const, ['body'], issues);
  int(opt('dimensions'), 'dimensions', ['body'], issues, { gt: 0 });
  issues.done();
  return body as EmbeddingsBody;
}

/**
 * Whether vLLM takes the body as its chat form (EmbeddingChatRequest: `messages` rendered with the chat
 * template, or `chat_template` from the request, with `chat_template_kwargs`, `add_generation_prompt`, …;
 * `input` ignored) rather than its completion form. vLLM's request type is the union EmbeddingCompletionRequest |
 * EmbeddingChatRequest (vllm/entrypoints/pooling/embed/protocol.py), both accepting extra fields, so a
 * body with `input` and `messages` validates as both, and pydantic's smart union takes the member with
 * more fields set, each message's keys counted: any non-empty list of messages (objects with a string
 * `role`) outweighs `input`; an empty one ties, and the first member, the completion form, wins. One
 * property read for a body without `messages`.
 */
export function chatForm(body: EmbeddingsBody): body is EmbeddingsBody & { messages: readonly unknown[] } {
  const m = body.messages;
  if (!Array.isArray(m) || m.length === 0) return false;
  for (const x of m) if (typeof x !== 'object' || x === null || typeof (x as { role?: unknown }).role !== 'string') return false;
  return true;
}

/**
 * The hold's input bound: the input's bytes, or for the chat form the chat estimate of its messages and
 * the fields a template renders (credit/hold-estimate.ts), whichever is larger (either may be embedded if
 * vLLM judged the messages otherwise).
 */
function estimateEmbeddingsPrompt(body: EmbeddingsBody, bodyBytes: number): number {
  const input = inputTokenBound(body.input, PER_INPUT);
  return chatForm(body) ? Math.max(input, estimatePromptTokens(body, bodyBytes)) : input;
}

/** The chat form with a request chat template (or a `prompt_embeds` part): held at the context window. */
function embeddingsUnseenPrompt(body: EmbeddingsBody, model: ModelConfig, promptEstimate: number): StatefulRequest | undefined {
  return chatForm(body) ? unseenPrompt(body, model, promptEstimate) : undefined;
}

/**
 * Prompt tokens by the fallback tokenizer (no usage came back): the form vLLM embedded; for the chat form
 * as a chat request's (routes/chat-completions.ts countChatFields) but for a top-level `documents`, which
 * EmbeddingChatRequest does not render (the hold still counts it: a surplus released at settle).
 */
async function countEmbeddingsPrompt(payload: Buffer, tokenizer: Tokenizer, budget: Budget): Promise<number> {
  const body = JSON.parse(payload.toString('utf8')) as EmbeddingsBody;
  if (!chatForm(body)) return countInput(body.input, tokenizer, budget);
  // The larger of the two forms, as the hold: chatForm is a shape check, and vLLM falls back to `input`
  // for messages its full validation refuses (a `content` of 5, say), so counting the messages alone
  // could bill a few tokens for the input it embedded (a review finding).
  const input = await countInput(body.input, tokenizer, budget);
  body.documents = undefined;
  return Math.max(input, await countChatFields(body, tokenizer, budget));
}

const DOC: RouteDoc = {
  summary: 'Create embeddings for a string or a list of inputs, metered and billed at the input price',
  auth: 'key',
  scope: 'embeddings',
  body: {
    type: 'object',
    required: ['model', 'input'],
    additionalProperties: true,
    properties: {
      model: { type: 'string', minLength: 1 },
      input: {
        description: 'a string, a list of strings, a list of token ids or a list of token-id lists (at most 2048 items)',
        type: ['string', 'array'],
      },
      encoding_format: { enum: ['float', 'base64', null] },
      dimensions: { type: ['integer', 'null'], exclusiveMinimum: 0 },
    },
  },
  responses: meteredResponses("The upstream's embedding list (JSON)", 'embeddings', '/v1/embeddings'),
};

/** The embeddings endpoint. */
export const EMBEDDINGS_ENDPOINT: MeteredEndpoint<EmbeddingsBody> = {
  endpoint: 'embeddings',
  scope: 'embeddings',
  pattern: '/v1/embeddings',
  upstreamPath: '/embeddings',
  doc: DOC,
  format: EMBEDDINGS,
  validate: validateEmbeddingsBody,
  output: () => ({ perChoice: 0, total: 0 }),
  estimatePrompt: estimateEmbeddingsPrompt,
  payload: (body, model) => Buffer.from(JSON.stringify({ ...body, model: model.upstreamModel })),
  reply: () => ({ stream: false, wantsUsage: true }),
  countPrompt: countEmbeddingsPrompt,
  stateful: embeddingsUnseenPrompt,
};
