/**
 * `POST /v1/responses` in the simulator: the Responses API's typed events (`event: <type>` and a JSON
 * `data` with the same `type` and a `sequence_number`), as OpenAI and vLLM send them: created,
 * in_progress, output_item.added, content_part.added, one output_text.delta per token, the three
 * `.done` events, then response.completed (or response.incomplete when max_output_tokens cut it) whose
 * `response.usage` carries input_tokens / output_tokens. No [DONE]. Steered `token_bytes` makes each
 * token's text that long (a long answer, repeated whole in the `.done` events and the final response,
 * in few events); steered `image_bytes` makes the response start with a hosted `image_generation_call`
 * (output 0, the message output 1) streamed as OpenAI does: output_item.added, in_progress, generating,
 * one partial_image (`partial_image_b64` of that many base64 characters), completed, output_item.done
 * with the `result`, which the final response's output holds too.
 *
 * Stored responses, as a stateful upstream keeps them: a response is stored unless `store: false`; a
 * request naming `previous_response_id` has that response's input and output prepended (its input tokens
 * grow by them; an unknown id is a 404, as OpenAI answers), and `GET /v1/responses/{id}` returns the
 * stored response with its usage — the tokens produced so far when its stream was cut or abandoned —
 * in the `encoding` its request was steered to, as a server that compresses every answer would.
 *
 * Input by reference, as hosted OpenAI expands it: an input item `{"type":"item_reference","id":"msg_<id>"}`
 * (or `{"id":…}` with neither type nor role: the API's ItemReference may omit its type) stands for the
 * output message of stored response `<id>`, its output tokens; a stored prompt template `"prompt":
 * {"id":"pmpt_sim_<N>", …}` renders N tokens plus its `variables`' text. An unknown item or template is a
 * 404, as an unknown previous response.
 */
import type { SimApi } from './chat.ts';
import type { RecordedRequest } from './record.ts';
import { isObject, planWith, positiveInt, simCompletionText, simTextTokens, type CompletionPlan } from './output.ts';

/**
 * Prompt tokens: the UTF-16 length of the instructions and of every input text (the string input, an
 * item's string content, each content part's `text`), summed, divided by 4, rounded up, at least 1.
 * A `text.format` of type `json_schema` counts as the length of its JSON: hosted OpenAI renders the
 * schema into the prompt and bills it as input.
 */
export function simResponsesPromptTokens(body: unknown): number {
  if (!isObject(body)) return 1;
  let chars = typeof body['instructions'] === 'string' ? body['instructions'].length : 0;
  const text = body['text'];
  const format = isObject(text) ? text['format'] : undefined;
  if (isObject(format) && format['type'] === 'json_schema') chars += JSON.stringify(format).length;
  const input = body['input'];
  if (typeof input === 'string') chars += input.length;
  else if (Array.isArray(input)) {
    for (const item of input) {
      const content = isObject(item) ? item['content'] : undefined;
      if (typeof content === 'string') chars += content.length;
      else if (Array.isArray(content)) for (const p of content) if (isObject(p) && typeof p['text'] === 'string') chars += p['text'].length;
    }
  }
  return Math.max(1, simTextTokens(chars));
}

/** An input item that names a stored item: `type: "item_reference"`, or no type and no role. */
function isItemReference(item: unknown): item is Record<string, unknown> {
  if (!isObject(item)) return false;
  const t = item['type'];
  return t === 'item_reference' || ((t === undefined || t === null) && item['role'] === undefined);
}

/** Tokens a stored template renders: N for id `pmpt_sim_<N>`, plus its variables' text; undefined when unknown. */
function templateTokens(prompt: unknown): number | undefined {
  if (!isObject(prompt)) return undefined;
  const m = typeof prompt['id'] === 'string' ? /^pmpt_sim_(\d{1,9})$/.exec(prompt['id']) : null;
  if (m === null) return undefined;
  let chars = 0;
  const vars = prompt['variables'];
  if (isObject(vars)) {
    for (const k in vars) {
      const v = vars[k];
      if (typeof v === 'string') chars += v.length;
      else if (isObject(v) && typeof v['text'] === 'string') chars += v['text'].length;
    }
  }
  return Number(m[1]) + simTextTokens(chars);
}

/** The response object at a stage of its life (`in_progress` without output and usage, then final). */
function responseObject(plan: CompletionPlan, body: unknown, final: boolean): Record<string, unknown> {
  const b = isObject(body) ? body : {};
  const incomplete = final && plan.finishReason === 'length';
  return {
    id: plan.id,
    object: 'response',
    created_at: plan.created,
    status: final ? (incomplete ? 'incomplete' : 'completed') : 'in_progress',
    incomplete_details: incomplete ? { reason: 'max_output_tokens' } : null,
    error: null,
    model: plan.model,
    instructions: b['instructions'] ?? null,
    max_output_tokens: b['max_output_tokens'] ?? null,
    previous_response_id: b['previous_response_id'] ?? null,
    store: b['store'] ?? true,
    output: final ? [...imageItems(plan, true), message(plan, responseText(plan, plan.emit), 'completed')] : [],
    usage: final && plan.usage ? usage(plan) : null,
  };
}

function usage(plan: CompletionPlan): Record<string, unknown> {
  const u = plan.usage!;
  return {
    input_tokens: u.prompt_tokens,
    input_tokens_details: { cached_tokens: u.prompt_tokens_details?.cached_tokens ?? 0 },
    output_tokens: u.completion_tokens,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: u.total_tokens,
  };
}

/** Token `i`'s text: `tok<i> `, or with steered `token_bytes` that many bytes (`tok<i>`, dots, a space). */
function tokenText(plan: CompletionPlan, i: number): string {
  const s = `tok${i}`;
  const pad = (plan.tokenBytes ?? 0) - s.length - 1;
  return pad > 0 ? `${s}${'.'.repeat(pad)} ` : `${s} `;
}

/** The text of the first `n` tokens (simCompletionText unless steered `token_bytes`). */
function responseText(plan: CompletionPlan, n: number): string {
  if (plan.tokenBytes === undefined) return simCompletionText(n);
  let s = '';
  for (let i = 0; i < n; i++) s += tokenText(plan, i);
  return s;
}

/** The base64 image of a steered `image_bytes`: deterministic, that many characters. */
function simImage(bytes: number): string {
  return Buffer.alloc(Math.ceil(bytes / 4) * 3, 'tollgate-sim')
    .toString('base64')
    .slice(0, bytes);
}

/** The hosted image_generation_call output item of a steered `image_bytes` (none without it). */
function imageItems(plan: CompletionPlan, done: boolean): Record<string, unknown>[] {
  if (plan.imageBytes === undefined) return [];
  const item = { id: `ig_${plan.id}`, type: 'image_generation_call', status: done ? 'completed' : 'in_progress' };
  return [
    done
      ? {
          ...item,
          background: 'opaque',
          output_format: 'png',
          quality: 'low',
          result: simImage(plan.imageBytes),
          revised_prompt: 'a lighthouse',
          size: '1024x1024',
        }
      : item,
  ];
}

function message(plan: CompletionPlan, text: string | null, status: string): Record<string, unknown> {
  const content = text === null ? [] : [{ type: 'output_text', text, annotations: [] }];
  return { id: `msg_${plan.id}`, type: 'message', status, role: 'assistant', content };
}

/** Events before the first delta (created, in_progress, output_item.added, content_part.added). */
const HEAD = 4;
/** Events after the last delta (output_text.done, content_part.done, output_item.done, completed). */
const TAIL = 4;

/** A response as the simulator stored it. */
interface Stored {
  plan: CompletionPlan;
  body: unknown;
  /** Input tokens with what the request named expanded (history, items, template). */
  inputTokens: number;
  rec: RecordedRequest | undefined;
  /** The steered `encoding` of the request that stored it: its GET answers in it too. */
  encoding: string | undefined;
}

/** Responses stored by one simulator (bounded: the oldest go first). */
export class SimResponseStore {
  readonly #max: number;
  readonly #byId = new Map<string, Stored>();
  constructor(max = 10_000) {
    this.#max = max;
  }

  /**
   * Input tokens the body names but does not hold: the history of `previous_response_id`, each
   * item_reference's stored item, the stored prompt template. A string is the 404 message of the first
   * unknown one.
   */
  unseen(body: unknown): number | string {
    if (!isObject(body)) return 0;
    let n = 0;
    const prev = body['previous_response_id'];
    if (typeof prev === 'string') {
      const s = this.#byId.get(prev);
      if (s === undefined) return `Previous response with id '${prev}' not found.`;
      n += s.inputTokens + s.plan.emit;
    }
    const input = body['input'];
    if (Array.isArray(input)) {
      for (const item of input) {
        if (!isItemReference(item)) continue;
        const id = item['id'];
        const s = typeof id === 'string' && id.startsWith('msg_') ? this.#byId.get(id.slice(4)) : undefined;
        if (s === undefined) return `Item with id '${String(id)}' not found.`;
        n += s.plan.emit;
      }
    }
    const prompt = body['prompt'];
    if (prompt !== undefined && prompt !== null) {
      const t = templateTokens(prompt);
      if (t === undefined) return `Prompt with id '${String(isObject(prompt) ? prompt['id'] : prompt)}' not found.`;
      n += t;
    }
    return n;
  }

  put(s: Stored): void {
    if (this.#byId.size >= this.#max) this.#byId.delete(this.#byId.keys().next().value!);
    this.#byId.set(s.plan.id, s);
  }

  /** The content coding the stored response of `id` is sent in (the one its request was answered in). */
  encodingOf(id: string): string | undefined {
    return this.#byId.get(id)?.encoding;
  }

  /** The stored response object of `id` (GET /v1/responses/{id}), or undefined. */
  get(id: string): string | undefined {
    const s = this.#byId.get(id);
    if (!s) return undefined;
    const done = s.rec === undefined || s.rec.finished;
    // Cut or abandoned: what was produced until then (a stateful server bills it so).
    const output = done ? s.plan.emit : s.rec!.completionTokensSent;
    const obj = responseObject(s.plan, s.body, true);
    if (!done) {
      obj['status'] = 'incomplete';
      obj['incomplete_details'] = { reason: 'interrupted' };
      obj['output'] = [...imageItems(s.plan, true), message(s.plan, responseText(s.plan, output), 'incomplete')];
    }
    obj['usage'] = {
      input_tokens: s.inputTokens,
      input_tokens_details: { cached_tokens: Math.min(s.plan.usage?.prompt_tokens_details?.cached_tokens ?? 0, s.inputTokens) },
      output_tokens: output,
      output_tokens_details: { reasoning_tokens: 0 },
      total_tokens: s.inputTokens + output,
    };
    return JSON.stringify(obj);
  }
}

/** POST /v1/responses over a simulator's stored responses (history, items and templates expanded, responses stored). */
export function responsesApi(store: SimResponseStore): SimApi {
  return {
    plan(requestId, body, opts, rec) {
      const unseen = store.unseen(body);
      const inputTokens = simResponsesPromptTokens(body) + (typeof unseen === 'number' ? unseen : 0);
      const plan = planWith(
        `resp_sim_${requestId}`,
        body,
        opts,
        inputTokens,
        isObject(body) ? positiveInt(body['max_output_tokens']) : undefined,
      );
      if (!isObject(body) || body['store'] !== false) store.put({ plan, body, inputTokens, rec, encoding: opts.encoding });
      return plan;
    },
    stream: RESPONSES_API.stream,
    done: '',
    json: RESPONSES_API.json,
  };
}

export const RESPONSES_API: SimApi = {
  plan: (requestId, body, opts) =>
    planWith(
      `resp_sim_${requestId}`,
      body,
      opts,
      simResponsesPromptTokens(body),
      isObject(body) ? positiveInt(body['max_output_tokens']) : undefined,
    ),
  stream(plan, body) {
    const itemId = `msg_${plan.id}`;
    const ev = (type: string, k: number, fields: Record<string, unknown>) =>
      `event: ${type}\ndata: ${JSON.stringify({ type, sequence_number: k, ...fields })}\n\n`;
    // A steered image comes first, as output 0 (OpenAI's order for the image_generation tool's events).
    const image = plan.imageBytes !== undefined;
    const outputIndex = image ? 1 : 0;
    const imageId = `ig_${plan.id}`;
    const imageEvents: ((k: number) => string)[] = image
      ? [
          (k) => ev('response.output_item.added', k, { output_index: 0, item: imageItems(plan, false)[0] }),
          (k) => ev('response.image_generation_call.in_progress', k, { output_index: 0, item_id: imageId }),
          (k) => ev('response.image_generation_call.generating', k, { output_index: 0, item_id: imageId }),
          (k) =>
            ev('response.image_generation_call.partial_image', k, {
              output_index: 0,
              item_id: imageId,
              partial_image_index: 0,
              partial_image_b64: simImage(plan.imageBytes!),
              background: 'opaque',
              output_format: 'png',
              quality: 'low',
              size: '1024x1024',
            }),
          (k) => ev('response.image_generation_call.completed', k, { output_index: 0, item_id: imageId }),
          (k) => ev('response.output_item.done', k, { output_index: 0, item: imageItems(plan, true)[0] }),
        ]
      : [];
    const head = HEAD + imageEvents.length;
    const part = { item_id: itemId, output_index: outputIndex, content_index: 0 };
    // A delta is a template concatenation, like chat's token chunks (no JSON.stringify per token).
    const deltaHead = `event: response.output_text.delta\ndata: {"type":"response.output_text.delta","item_id":"${itemId}","output_index":${outputIndex},"content_index":0,"logprobs":[],"sequence_number":`;
    return {
      count: head + plan.emit + TAIL,
      firstToken: head,
      event(k) {
        if (k === 0) return ev('response.created', k, { response: responseObject(plan, body, false) });
        if (k === 1) return ev('response.in_progress', k, { response: responseObject(plan, body, false) });
        if (k < 2 + imageEvents.length) return imageEvents[k - 2]!(k);
        if (k === head - 2)
          return ev('response.output_item.added', k, { output_index: outputIndex, item: message(plan, null, 'in_progress') });
        if (k === head - 1)
          return ev('response.content_part.added', k, { ...part, part: { type: 'output_text', text: '', annotations: [] } });
        if (k < head + plan.emit) return `${deltaHead}${k},"delta":"${tokenText(plan, k - head)}"}\n\n`;
        const text = responseText(plan, plan.emit);
        const t = k - head - plan.emit;
        if (t === 0) return ev('response.output_text.done', k, { ...part, text, logprobs: [] });
        if (t === 1) return ev('response.content_part.done', k, { ...part, part: { type: 'output_text', text, annotations: [] } });
        if (t === 2) return ev('response.output_item.done', k, { output_index: outputIndex, item: message(plan, text, 'completed') });
        const type = plan.finishReason === 'length' ? 'response.incomplete' : 'response.completed';
        return ev(type, k, { response: responseObject(plan, body, true) });
      },
    };
  },
  done: '',
  json: (plan, body) => JSON.stringify(responseObject(plan, body, true)),
};
