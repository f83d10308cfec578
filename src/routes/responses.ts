/**
 * POST /v1/responses (scope chat): the Responses API's declaration for the metered pipeline
 * (routes/metered.ts). Streams are typed SSE events whose usage arrives in `response.completed`'s
 * `response.usage` (input_tokens / output_tokens: meter/formats.ts). `max_output_tokens` is clamped to
 * the model's cap and sizes the hold. `previous_response_id`, `store` and `conversation` pass through:
 * the stored state lives on the upstream that answered (docs/behaviour.md, "Responses"). A request naming
 * either is stateful (SPEC §4): its hold's input part is the model's `context_window`, and it is billed
 * from the upstream's stored response when it ends without usage (`stateful` below, meter/bill.ts). So is
 * one naming a stored prompt template (`prompt`) or a stored item (`item_reference`): input the upstream
 * renders and the gateway never sees.
 * `background: true` is refused (400 invalid_request): its generation happens after the response ends.
 */
import type { ModelConfig } from '../config/schema.ts';
import type { RouteDoc } from '../http/openapi.ts';
import { GatewayError } from '../http/errors.ts';
import { Issues, bool, int, isObj, list, rootObject, str, type Obj } from '../http/validate.ts';
import { PER_MESSAGE, PER_NON_TEXT_PART, PER_REQUEST, PER_TOOLS_BLOCK, renderedBound } from '../credit/hold-estimate.ts';
import { CHAT_OVERHEAD, type Budget, type Tokenizer } from '../meter/tokenizer.ts';
import { RESPONSES } from '../meter/formats.ts';
import { meteredResponses, type MeteredEndpoint, type OutputBound, type StatefulRequest } from './endpoint.ts';
import { capOutputFields } from './output-cap.ts';

export interface ResponsesBody extends Obj {
  model: string;
  input?: string | unknown[];
  instructions?: string | null;
  stream?: boolean | null;
  max_output_tokens?: number | null;
}

/** The validated body: only the fields Tollgate acts on are checked; every other field passes through. */
export function validateResponsesBody(value: unknown): ResponsesBody {
  const issues = new Issues();
  if (!rootObject(value, issues)) issues.done();
  const body = value as Obj;
  const opt = (k: string) => (body[k] === null ? {} : body);
  str(body, 'model', ['body'], issues, { required: true, minLength: 1 });
  // `input` may be absent when previous_response_id or conversation carries the context.
  if (body.input !== undefined && body.input !== null && typeof body.input !== 'string') list(body, 'input', ['body'], issues);
  str(opt('instructions'), 'instructions', ['body'], issues);
  bool(opt('stream'), 'stream', ['body'], issues);
  int(opt('max_output_tokens'), 'max_output_tokens', ['body'], issues, { gt: 0 });
  str(opt('previous_response_id'), 'previous_response_id', ['body'], issues);
  bool(opt('store'), 'store', ['body'], issues);
  const background = bool(opt('background'), 'background', ['body'], issues);
  issues.done();
  // The upstream answers a background request at once (`status: "queued"`, `usage: null`) and generates
  // afterwards, where no meter sees it: it would be billed the prompt only. Refused before any hold is
  // taken or any upstream contacted (docs/behaviour.md, "Background responses").
  if (background === true) {
    throw new GatewayError(
      'invalid_request',
      'background: true is not supported by this gateway: a background response is generated after the request ends, where it cannot be metered. Send the request without it (stream: true for long generations).',
      { param: 'background' },
    );
  }
  return body as ResponsesBody;
}

function bytes(v: unknown): number {
  return typeof v === 'string' ? Buffer.byteLength(v) : 0;
}

/**
 * Upper bound on an input item's tokens: the bytes of every string it holds (role, text, ids, call
 * arguments: a template may render any of them), and an allowance for a part with no text of its own
 * (an image or file by id). Bytes bound tokens: credit/hold-estimate.ts.
 */
function itemBound(v: unknown, depth = 0): number {
  if (typeof v === 'string') return Buffer.byteLength(v);
  if (depth > 32) return 0; // validated JSON of bounded size; the depth guard only keeps the stack small
  if (Array.isArray(v)) {
    let n = 0;
    for (const x of v) n += itemBound(x, depth + 1);
    return n;
  }
  if (!isObj(v)) return 0;
  let n = 0;
  const t = v['type'];
  if (typeof t === 'string' && (t === 'input_image' || t === 'input_file' || t === 'input_audio')) n += PER_NON_TEXT_PART;
  for (const k in v) n += itemBound(v[k], depth + 1);
  return n;
}

/**
 * The `text.format` of type `json_schema` (`{type, name, schema, strict, description}`), or undefined: the
 * Responses API's form of chat's `response_format` JSON schema, which hosted OpenAI renders into the prompt
 * and bills as input (vLLM only constrains decoding with it). Held and counted like chat's
 * (credit/hold-estimate.ts renderedFields): the hold adds renderedBound, the fallback count its JSON.
 * Other formats (`text`, `json_object`) put nothing in the prompt. One property read without `text`.
 */
export function formatSchema(body: ResponsesBody): Obj | undefined {
  const text = body['text'];
  if (text === undefined || text === null) return undefined;
  const format = isObj(text) ? text['format'] : undefined;
  return isObj(format) && format['type'] === 'json_schema' ? format : undefined;
}

/** Upper bound on the prompt: instructions, each input item plus its template tokens, tool definitions, a response schema. */
export function estimateResponsesPrompt(body: ResponsesBody): number {
  let n = PER_REQUEST + bytes(body.instructions);
  const input = body.input;
  if (typeof input === 'string') n += PER_MESSAGE + Buffer.byteLength(input);
  else if (Array.isArray(input)) for (const item of input) n += PER_MESSAGE + itemBound(item);
  const tools = body['tools'];
  if (Array.isArray(tools) && tools.length > 0) n += PER_TOOLS_BLOCK + 2 * Buffer.byteLength(JSON.stringify(tools));
  const schema = formatSchema(body);
  if (schema !== undefined) n += renderedBound(schema);
  return n;
}

/**
 * Prompt tokens by the fallback tokenizer: instructions, the tool definitions (a template renders each one
 * into the prompt; counted as their JSON), a `text.format` JSON schema (formatSchema; its JSON) and the
 * text of every input item.
 */
async function countResponsesPrompt(payload: Buffer, tokenizer: Tokenizer, budget: Budget): Promise<number> {
  const body = JSON.parse(payload.toString('utf8')) as ResponsesBody;
  const count = (s: unknown) => (typeof s === 'string' && s.length > 0 ? tokenizer.countTextBounded(s, budget) : Promise.resolve(0));
  let n = CHAT_OVERHEAD.perRequest;
  if (typeof body.instructions === 'string') n += CHAT_OVERHEAD.perMessage + (await count(body.instructions));
  const tools = body['tools'];
  if (Array.isArray(tools) && tools.length > 0) n += await count(JSON.stringify(tools));
  const schema = formatSchema(body);
  if (schema !== undefined) n += await count(JSON.stringify(schema));
  const input = body.input;
  if (typeof input === 'string') return n + CHAT_OVERHEAD.perMessage + (await count(input));
  if (!Array.isArray(input)) return n;
  for (const item of input) {
    if (!isObj(item)) continue;
    n += CHAT_OVERHEAD.perMessage + (await count(item['role'])) + (await count(item['arguments'])) + (await count(item['output']));
    const content = item['content'];
    if (typeof content === 'string') n += await count(content);
    else if (Array.isArray(content)) for (const part of content) if (isObj(part)) n += await count(part['text']);
  }
  return n;
}

/** One response, no `n`: the requested maximum clamped to the model's cap, the cap when none was asked. */
function outputBound(body: ResponsesBody, model: ModelConfig): OutputBound {
  const perChoice = Math.min(body.max_output_tokens ?? model.maxOutputTokens, model.maxOutputTokens);
  return { perChoice, total: perChoice };
}

/** Model rewritten, output capped by what was held. Streams always carry usage (response.completed). */
function upstreamBody(body: ResponsesBody, model: ModelConfig, perChoice: number): Buffer {
  const out: Record<string, unknown> = { ...body }; // then stores, as for chat
  capOutputFields(out, perChoice, 1); // max_tokens, max_completion_tokens, llama.cpp's n_predict / n_cmpl
  out.model = model.upstreamModel;
  out.max_output_tokens = perChoice;
  return Buffer.from(JSON.stringify(out));
}

function isSet(v: unknown): boolean {
  return v !== undefined && v !== null;
}

/**
 * Whether the upstream renders input of its own that the body does not hold: stored state it continues
 * (`previous_response_id`, `conversation`), a stored prompt template (`prompt`), or an input item naming a
 * stored item (`item_reference`; the API's ItemReference may omit its type, and an item with neither type
 * nor role can be nothing else). Three field reads, and for a list input one read of each item's `type`.
 */
function namesStoredInput(body: ResponsesBody): boolean {
  if (isSet(body['previous_response_id']) || isSet(body['conversation']) || isSet(body['prompt'])) return true;
  const input = body.input;
  if (!Array.isArray(input)) return false;
  for (const item of input) {
    if (!isObj(item)) continue;
    const t = item['type'];
    if (t === 'item_reference' || ((t === undefined || t === null) && item['role'] === undefined)) return true;
  }
  return false;
}

/**
 * A request whose input the upstream completes from its own store (namesStoredInput): history, a prompt
 * template or referenced items of any length up to the context window, so that is the hold's input part
 * (SPEC §4: no debit exceeds its hold), and `GET /responses/{id}` is where its usage is asked for when the
 * answer had none (the upstream stores the response itself unless `store: false`).
 */
export function statefulResponses(body: ResponsesBody, model: ModelConfig, promptEstimate: number): StatefulRequest | undefined {
  if (!namesStoredInput(body)) return undefined;
  return {
    heldPrompt: Math.max(model.contextWindow, promptEstimate),
    retrievePath: (id) => `/responses/${encodeURIComponent(id)}`,
  };
}

const DOC: RouteDoc = {
  summary: 'Create a model response (Responses API; typed SSE events with stream: true), metered and billed',
  auth: 'key',
  scope: 'chat',
  body: {
    type: 'object',
    required: ['model'],
    additionalProperties: true,
    properties: {
      model: { type: 'string', minLength: 1 },
      input: { type: ['string', 'array'], description: 'text, or a list of input items' },
      instructions: { type: ['string', 'null'] },
      stream: { type: ['boolean', 'null'] },
      max_output_tokens: { type: ['integer', 'null'], exclusiveMinimum: 0, description: "clamped to the model's max_output_tokens" },
      previous_response_id: { type: ['string', 'null'], description: 'passed through: the state lives on the upstream that stored it' },
      store: { type: ['boolean', 'null'], description: 'passed through' },
      background: {
        type: ['boolean', 'null'],
        description: 'true is refused with 400 invalid_request (param background): work done after the response cannot be metered',
      },
    },
  },
  responses: meteredResponses("The upstream's response object (JSON), or its event stream (text/event-stream)", 'chat', '/v1/responses'),
};

/** The Responses endpoint. */
export const RESPONSES_ENDPOINT: MeteredEndpoint<ResponsesBody> = {
  endpoint: 'responses',
  scope: 'chat',
  pattern: '/v1/responses',
  upstreamPath: '/responses',
  doc: DOC,
  format: RESPONSES,
  validate: validateResponsesBody,
  output: outputBound,
  estimatePrompt: estimateResponsesPrompt,
  payload: upstreamBody,
  // Usage is part of response.completed, never an event of its own: nothing to drop.
  reply: (body) => ({ stream: body.stream === true, wantsUsage: true }),
  countPrompt: countResponsesPrompt,
  stateful: statefulResponses,
};
