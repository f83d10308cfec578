/**
 * POST /v1/embeddings (scope `embeddings`): metered like chat (routes/metered.ts) with no output: the
 * upstream's `usage.prompt_tokens` is billed at the model's input price, and the hold is sized from the
 * input's bytes (token ids as themselves). Answers are JSON only; a large one (thousands of vectors) is
 * relayed as it comes and only scanned for its top-level usage (meter/json-usage.ts).
 */
import type { RouteDoc } from '../http/openapi.ts';
import { Issues, int, literal, rootObject, str, type Obj } from '../http/validate.ts';
import { EMBEDDINGS } from '../meter/formats.ts';
import { meteredResponses, type MeteredEndpoint } from './endpoint.ts';
import { countInput, inputTokenBound, textInput, type TextInput } from './text-input.ts';

export interface EmbeddingsBody extends Obj {
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
  estimatePrompt: (body) => inputTokenBound(body.input, PER_INPUT),
  payload: (body, model) => Buffer.from(JSON.stringify({ ...body, model: model.upstreamModel })),
  reply: () => ({ stream: false, wantsUsage: true }),
  countPrompt: (payload, tokenizer, budget) =>
    countInput((JSON.parse(payload.toString('utf8')) as EmbeddingsBody).input, tokenizer, budget),
};
