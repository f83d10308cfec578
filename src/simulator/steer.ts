/**
 * Per-request steering of the simulator. Options come from `x-sim-<name>` headers and from a body
 * field `sim: { <name>: value }`; a header wins over the body field of the same name. Header names may
 * spell the option with `-` or `_` (`x-sim-delay-ms` = `x-sim-delay_ms`), because some proxies drop
 * headers with underscores (nginx does by default).
 */
import type { IncomingHttpHeaders } from 'node:http';

/** What a request asked the simulator to do. Absent optional fields mean "not asked for". */
export interface SimOptions {
  /** Completion tokens to produce before the max_tokens cap (default 16). */
  tokens: number;
  /** Delay before each completion token, in ms (default 0). */
  delayMs: number;
  /** Delay before the response headers (or the error status) are sent, in ms (default 0). */
  headersDelayMs: number;
  /** `present` (default): real usage; `absent`: no usage anywhere; `zero`: usage with 0 tokens. */
  usage: 'present' | 'absent' | 'zero';
  /** Answer with this HTTP status (400–599) and an OpenAI error body instead of a completion. */
  status?: number;
  /** Destroy the socket without any response. */
  refuse: boolean;
  /** Send this many JSON chunks (SSE) then close the socket without `[DONE]`. */
  cutAfter?: number;
  /** Produce `tokens` even when max_tokens / max_completion_tokens is lower. */
  ignoreMaxTokens: boolean;
  /**
   * Report this many of the prompt tokens as cached (prefix caching, as vLLM and OpenAI do), clamped to
   * the prompt count: `usage.prompt_tokens_details.cached_tokens` (chat, completions) and
   * `usage.input_tokens_details.cached_tokens` (Responses). Unset: no details for chat/completions, 0 for Responses.
   */
  cachedTokens?: number;
  /**
   * Answer in this content coding although the gateway asked for identity: `gzip`, `x-gzip`, `deflate`,
   * `br` and `zstd` really compress (encode.ts); any other name is only sent in `content-encoding`.
   */
  encoding?: string;
  /**
   * With `encoding`: send this many SSE chunks, then bytes no decoder accepts, then end the response
   * normally; a JSON answer gets half of its encoded bytes, then those. A body broken in its coding.
   */
  corruptAfter?: number;
  /**
   * Prompt tokens each `prompt_embeds` item of /v1/completions, and each `prompt_embeds` content part of a
   * /v1/chat/completions message, stands for (vLLM: the rows of its tensor, which a sparse tensor makes
   * many of in a few bytes). Unset: its base64 length ÷ 4, rounded up.
   */
  embedsTokens?: number;
  /**
   * Chat: the first this many completion tokens are reasoning, streamed in `delta` (and, without a stream,
   * put in `message`) under `reasoningFields` instead of `content`. Unset: no reasoning.
   */
  reasoningTokens?: number;
  /**
   * Where reasoning goes: `reasoning` (vLLM ≥ 0.10, the default), `reasoning_content` (vLLM < 0.10,
   * DeepSeek), or `both` with the same text, as servers that keep the old name as an alias send it
   * (mlx-vlm; some vLLM versions).
   */
  reasoningFields?: 'reasoning' | 'reasoning_content' | 'both';
  /**
   * Responses only: each token's text is this many bytes (`tok<i>`, dots, a space), so an answer's text
   * (repeated whole in the `.done` events and `response.completed`) grows large without many events.
   */
  tokenBytes?: number;
  /**
   * Responses only: the response first makes one hosted `image_generation_call` (the image_generation
   * tool, as OpenAI streams it) whose `partial_image_b64` and `result` are this many base64 characters.
   */
  imageBytes?: number;
}

/** A steering value the simulator cannot use; the request gets a 400 naming it. */
export class SimSteerError extends Error {
  override name = 'SimSteerError';
}

type Setter = (o: SimOptions, v: unknown, name: string) => void;

// One setter per option name (the `_` spelling); header names are mapped onto these.
const SETTERS: Record<string, Setter> = {
  tokens: (o, v, n) => {
    o.tokens = toCount(v, n);
  },
  delay_ms: (o, v, n) => {
    o.delayMs = toCount(v, n);
  },
  headers_delay_ms: (o, v, n) => {
    o.headersDelayMs = toCount(v, n);
  },
  usage: (o, v, n) => {
    if (v !== 'present' && v !== 'absent' && v !== 'zero') throw bad(n, v, 'present, absent or zero');
    o.usage = v;
  },
  status: (o, v, n) => {
    const s = toCount(v, n);
    if (s < 400 || s > 599) throw bad(n, v, 'an HTTP error status 400-599');
    o.status = s;
  },
  refuse: (o, v, n) => {
    o.refuse = toBool(v, n);
  },
  cut_after: (o, v, n) => {
    o.cutAfter = toCount(v, n);
  },
  ignore_max_tokens: (o, v, n) => {
    o.ignoreMaxTokens = toBool(v, n);
  },
  cached_tokens: (o, v, n) => {
    o.cachedTokens = toCount(v, n);
  },
  encoding: (o, v, n) => {
    // A header token (RFC 9110 §5.6.2): it goes into the content-encoding header as it is.
    if (typeof v !== 'string' || !/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(v)) throw bad(n, v, 'a content coding name');
    o.encoding = v.toLowerCase();
  },
  corrupt_after: (o, v, n) => {
    o.corruptAfter = toCount(v, n);
  },
  embeds_tokens: (o, v, n) => {
    o.embedsTokens = toCount(v, n);
  },
  reasoning_tokens: (o, v, n) => {
    o.reasoningTokens = toCount(v, n);
  },
  reasoning_fields: (o, v, n) => {
    if (v !== 'reasoning' && v !== 'reasoning_content' && v !== 'both') throw bad(n, v, 'reasoning, reasoning_content or both');
    o.reasoningFields = v;
  },
  token_bytes: (o, v, n) => {
    o.tokenBytes = toCount(v, n);
  },
  image_bytes: (o, v, n) => {
    o.imageBytes = toCount(v, n);
  },
};

/** The default options: 16 tokens, no delays, usage present, no faults. */
export function defaultSimOptions(): SimOptions {
  return { tokens: 16, delayMs: 0, headersDelayMs: 0, usage: 'present', refuse: false, ignoreMaxTokens: false };
}

/** Reads the steering options of one request (body `sim` first, then `x-sim-*` headers over it). */
export function readSimOptions(headers: IncomingHttpHeaders, body: unknown): SimOptions {
  const o = defaultSimOptions();
  const sim = isObject(body) ? body['sim'] : undefined;
  if (sim !== undefined && sim !== null) {
    if (!isObject(sim)) throw new SimSteerError('body field sim must be an object');
    for (const key of Object.keys(sim)) apply(o, key, sim[key], `sim.${key}`);
  }
  for (const key in headers) {
    // Node lower-cases header names, so one prefix check covers every spelling.
    if (!key.startsWith('x-sim-')) continue;
    const raw = headers[key];
    apply(o, key.slice(6).replaceAll('-', '_'), Array.isArray(raw) ? raw[0] : raw, key);
  }
  if (o.corruptAfter !== undefined && o.encoding === undefined) throw new SimSteerError('corrupt_after needs an encoding');
  return o;
}

function apply(o: SimOptions, option: string, value: unknown, name: string): void {
  const set = SETTERS[option];
  if (set === undefined) throw new SimSteerError(`unknown steering option ${name}`);
  set(o, value, name);
}

function toCount(v: unknown, name: string): number {
  const n = typeof v === 'string' && v.trim() !== '' ? Number(v) : v;
  if (typeof n !== 'number' || !Number.isSafeInteger(n) || n < 0) throw bad(name, v, 'a non-negative integer');
  return n;
}

function toBool(v: unknown, name: string): boolean {
  if (v === true || v === 'true' || v === '1' || v === 1) return true;
  if (v === false || v === 'false' || v === '0' || v === 0) return false;
  throw bad(name, v, 'true or false');
}

function bad(name: string, v: unknown, want: string): SimSteerError {
  return new SimSteerError(`${name} must be ${want}, got ${JSON.stringify(v)}`);
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}
