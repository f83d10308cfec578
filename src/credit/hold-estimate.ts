/**
 * Prompt-token estimate for the credit hold (SPEC §4): an upper bound, never below the real count, at a
 * few µs for a 32 KB prompt (no tokenizer on the request path: that costs ~1 ms per 32 KB).
 *
 * Why bytes: every byte-level BPE (o200k/cl100k, Llama 3, Qwen, Mistral-tekken) and every SentencePiece
 * model with byte fallback emits tokens of at least one byte, so a string never has more tokens than
 * UTF-8 bytes. It is the only bound that holds whatever tokenizer the upstream runs — character-level
 * digit splitting (Llama 2) or an unmerged pair already defeats a "bytes ÷ 2" rule. Special-token text
 * such as `<|endoftext|>` is either plain text (≥ 1 byte per token) or one special token (13 bytes).
 * What has no bytes in the request — the chat template's special tokens and the reply primer — is
 * covered by the per-message and per-request constants below, which exceed the reference tokenizer's
 * (CHAT_OVERHEAD in meter/tokenizer.ts: 3 + role per message, +1 per name, 3 per tool call, 3 per request).
 *
 * The trade-off: the hold is ~4× the o200k count for English prose and code (4–4.5 bytes per token),
 * ~1.3–2× for CJK, emoji and whitespace runs. The surplus is released at settle, so it costs headroom,
 * not money: an account with balance for one 32 KB English prompt but not four is refused with 402
 * while the hold is taken. The output part of the hold (max_tokens) usually dominates anyway.
 *
 * Allowances that are judgement, not proof (the upstream may count what the request does not show):
 * non-text content parts (images, audio, files), tool definitions and the other fields a template renders
 * (renderedFields: documents, template kwargs, a response schema). vLLM's `prompt_embeds` part has no
 * allowance that could hold (PROMPT_EMBEDS_PARTS below): the estimate only counts it for the endpoint.
 * Nor has a chat template sent with the request (vLLM's `chat_template`): its loops render a prompt of
 * any size from a few bytes, so the endpoint holds the context window for it (routes/chat-completions.ts
 * unseenPrompt), not this estimate.
 */

/** Template tokens around one message (Llama 3: 4 specials + "\n\n"; ChatML: 3 specials + "\n" ×2). */
export const PER_MESSAGE = 8;
/** Scaffold of one tool call (Qwen/Hermes `<tool_call>{"name": …, "arguments": …}</tool_call>` ≈ 20). */
export const PER_TOOL_CALL = 24;
/** Reply primer plus a default system prompt some templates inject (Llama 3.1 date header ≈ 25, Qwen ≈ 20). */
export const PER_REQUEST = 64;
/** One image/audio/file part. Vision encoders use ~85–2,000 tokens per image; the settle bills the truth. */
export const PER_NON_TEXT_PART = 2048;
/** Tool-use instructions templates add when `tools` are present (Qwen 2.5 ≈ 100, Llama 3.1 ≈ 80). */
export const PER_TOOLS_BLOCK = 256;

/**
 * Where the estimate leaves the number of vLLM `prompt_embeds` content parts it met, on the body itself
 * (a symbol key: JSON.stringify skips it, so the upstream payload is unchanged), only when there are any.
 * The part is `{"type": "prompt_embeds", "data": "<base64 torch tensor>"}` (vLLM's
 * vllm.entrypoints.chat_utils ChatCompletionContentPartPromptEmbedsParam: `data` is a serialized tensor
 * of shape (num_tokens, hidden_size), spliced into the rendered prompt): its rows are prompt tokens no
 * byte count bounds (vLLM densifies a sparse tensor: a few hundred bytes stand for any number of rows).
 * The chat endpoint holds the context window for such a request (routes/chat-completions.ts
 * unseenPrompt). Counted here because this walk already meets every part: an ordinary request pays
 * nothing for it but a string comparison per non-text part.
 */
export const PROMPT_EMBEDS_PARTS: unique symbol = Symbol('prompt_embeds parts');

/**
 * The part types that carry a tensor of embeddings: `prompt_embeds` (above) and vLLM's multimodal ones,
 * `image_embeds` and `audio_embeds` (vllm.entrypoints.chat_utils MM_PARSER_MAP), whose rows become that
 * many placeholder tokens in the prompt; loaded the same way (`torch.load`, densified), a few bytes stand
 * for any number of rows, so none of them is held by the non-text allowance: all count here alike
 * (`video_embeds` too, in newer vLLM).
 */
const EMBEDS_PART_TYPES: ReadonlySet<string> = new Set(['prompt_embeds', 'image_embeds', 'audio_embeds', 'video_embeds']);

/** The request fields the estimate reads: the parsed, validated chat body. */
export interface ChatBodyLike {
  messages?: unknown;
  tools?: unknown;
  functions?: unknown;
  documents?: unknown;
  chat_template_kwargs?: unknown;
  chat_template?: unknown;
  response_format?: unknown;
  [PROMPT_EMBEDS_PARTS]?: number;
}

/**
 * The request fields besides `messages`, `tools` and `functions` that put text into the prompt, as the
 * value to count (undefined: nothing): vLLM's `documents` (RAG documents its chat template renders:
 * Granite, Command-R) and `chat_template_kwargs` (values a template may render: `documents` may come
 * this way too), and a `json_schema` `response_format`'s schema, which hosted OpenAI renders into the
 * prompt (vLLM only constrains decoding with it). vLLM's `guided_json` / `structured_outputs` only
 * constrain decoding and are not counted. The hold counts each like a tool list (renderedBound); the
 * fallback tokenizer counts its JSON (routes/chat-completions.ts countChatPrompt). Three property reads
 * for a request that has none of them.
 */
export function renderedFields(body: ChatBodyLike): unknown[] | undefined {
  const docs = body.documents;
  const kwargs = body.chat_template_kwargs;
  const format = body.response_format;
  if (docs == null && kwargs == null && format == null) return undefined;
  const out: unknown[] = [];
  if (docs != null) out.push(docs);
  if (kwargs != null) out.push(kwargs);
  const schema = typeof format === 'object' && format !== null ? (format as { json_schema?: unknown }).json_schema : undefined;
  if (schema != null) out.push(schema);
  return out;
}

/** `prompt_embeds` parts met by the estimate running now (it is synchronous): see PROMPT_EMBEDS_PARTS. */
let embedsParts = 0;

/** Message fields a template may render as text (role, content, name, ids, replayed reasoning). */
const STRING_FIELDS = ['role', 'content', 'name', 'tool_call_id', 'reasoning_content', 'reasoning', 'refusal'] as const;

function bytes(v: unknown): number {
  return typeof v === 'string' ? Buffer.byteLength(v, 'utf8') : 0;
}

/**
 * The text a content part carries into the prompt, or undefined for a part without text (an image, audio,
 * a file, an embeddings tensor). Besides OpenAI's `text` and `refusal`, vLLM renders the Responses-style
 * `input_text` / `output_text` parts' `text` and a `thinking` part's `thinking` as prompt text
 * (vllm.entrypoints.chat_utils MM_PARSER_MAP): held at the non-text allowance and counted 0 by the
 * fallback tokenizer, a 1 MB `input_text` part was under-held and, without usage, billed ~0 prompt tokens.
 */
export function partText(p: { type?: unknown; text?: unknown; refusal?: unknown; thinking?: unknown }): unknown {
  const t = p.type;
  if (t === 'text' || t === 'input_text' || t === 'output_text') return p.text;
  if (t === 'refusal') return p.refusal;
  if (t === 'thinking') return p.thinking;
  return undefined;
}

/** Upper bound for one message, or -1 when its shape is not understood. */
function messageBound(m: unknown): number {
  if (typeof m !== 'object' || m === null) return -1;
  const msg = m as Record<string, unknown>;
  let n = PER_MESSAGE;
  for (const f of STRING_FIELDS) n += bytes(msg[f]);
  // +1 covers the reference tokenizer's extra token for a name (a 1-byte name is 1 byte + 1).
  if (typeof msg['name'] === 'string') n += 1;
  const content = msg['content'];
  if (Array.isArray(content)) {
    for (const part of content) {
      const p = part as { type?: unknown; text?: unknown; refusal?: unknown; thinking?: unknown } | null;
      if (typeof p !== 'object' || p === null) return -1;
      const text = partText(p);
      // +1 per part: templates join parts with a separator.
      if (text !== undefined) n += bytes(text) + 1;
      else {
        n += PER_NON_TEXT_PART;
        if (EMBEDS_PART_TYPES.has(p.type as string)) embedsParts++;
      }
    }
  } else if (content !== undefined && content !== null && typeof content !== 'string') return -1;
  const calls = msg['tool_calls'];
  if (Array.isArray(calls)) {
    for (const call of calls) {
      const c = call as { id?: unknown; function?: { name?: unknown; arguments?: unknown } } | null;
      const args = c?.function?.arguments;
      n += PER_TOOL_CALL + bytes(c?.id) + bytes(c?.function?.name);
      // Arguments are a JSON string per the API; an object (lenient servers accept it) counts as its JSON.
      n += typeof args === 'string' || args === undefined ? bytes(args) : Buffer.byteLength(JSON.stringify(args) ?? '');
    }
  }
  return n;
}

/** Tool definitions: twice their compact JSON (templates re-render it with ", " and ": "), plus instructions. */
function toolsBound(tools: unknown): number {
  if (!Array.isArray(tools) || tools.length === 0) return 0;
  return PER_TOOLS_BLOCK + 2 * Buffer.byteLength(JSON.stringify(tools));
}

/**
 * A rendered field (renderedFields) as a tool list is held: twice its compact JSON, plus the instructions
 * a template wraps it in (Granite's document instructions ≈ 100 tokens, a thinking prompt a kwarg turns
 * on ≈ 60), plus one message's template tokens per document (each is rendered in a block of its own).
 * Linear in the field's size; an empty object or list still gets the block, as a template may branch on it.
 */
export function renderedBound(v: unknown): number {
  const n = PER_TOOLS_BLOCK + 2 * Buffer.byteLength(JSON.stringify(v) ?? '');
  return Array.isArray(v) ? n + v.length * PER_MESSAGE : n;
}

/**
 * Upper bound on the prompt tokens of a chat request: Σ UTF-8 bytes of every rendered string plus
 * template constants. `rawBodyBytes` (the request's length on the wire, ≥ the bytes of every string in
 * it) is the fallback when a message's shape is not understood, so an odd body is never under-held.
 */
export function estimatePromptTokens(body: ChatBodyLike, rawBodyBytes: number): number {
  const messages = body.messages;
  let fixed = PER_REQUEST + toolsBound(body.tools) + toolsBound(body.functions);
  const rendered = renderedFields(body);
  if (rendered !== undefined) for (const v of rendered) fixed += renderedBound(v);
  if (!Array.isArray(messages)) return fixed + rawBodyBytes;
  let n = fixed;
  embedsParts = 0;
  for (const m of messages) {
    const b = messageBound(m);
    // Not for a validated body (routes/chat-validate.ts refuses each shape messageBound gives up on), so
    // the parts this skips cannot hide a `prompt_embeds` part from the endpoint.
    if (b < 0) return fixed + rawBodyBytes + messages.length * PER_MESSAGE;
    n += b;
  }
  if (embedsParts > 0) body[PROMPT_EMBEDS_PARTS] = embedsParts;
  return n;
}
