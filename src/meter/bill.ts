/**
 * What a request is billed (SPEC §1.2): the upstream's usage when it reported one, else the tokenizer
 * over the prompt and what was produced, counted in bounded slices (SPEC §12). Shared by every metered
 * endpoint (routes/metered.ts); `countPrompt` re-reads the prompt from the upstream payload (the parsed
 * body is not kept: SPEC §12), only on the rare path where the upstream reported no usage.
 */
import type { RelayOutcome } from './relay.ts';
import type { ApiFormat } from './formats.ts';
import type { Usage } from './usage.ts';
import type { UpstreamCall } from '../upstream/call.ts';
import type { Upstream } from '../upstream/pool.ts';
import { contentCoding, decodeWhole } from '../upstream/content-coding.ts';
import { COUNT_BUDGET_MS, type Budget, type Tokenizer } from './tokenizer.ts';
import type { UsageSource } from '../store/types.ts';

export interface Billed {
  promptTokens: number;
  completionTokens: number;
  /** The part of promptTokens the upstream reported as cached (SPEC §4 "Cached input"); 0 when estimated. */
  cachedTokens: number;
  source: UsageSource;
}

/** No answer from any upstream, or a refusal: nothing was produced. */
export const NOTHING_PRODUCED: Billed = { promptTokens: 0, completionTokens: 0, cachedTokens: 0, source: 'estimated' };

/**
 * A stateful request (SPEC §4), or one whose input the gateway cannot see in full: the upstream prepends
 * history (`/v1/responses` with `previous_response_id` or `conversation`), renders a stored template or
 * item (`prompt`, `item_reference`), or takes tensors whose rows are tokens (vLLM's `prompt_embeds` on
 * `/v1/completions`, its `prompt_embeds` content parts on `/v1/chat/completions`). The hold's input part
 * is the context window (per completions embeds item), and a request that
 * ends without usage is billed from the upstream's stored response where there is one, else that input
 * part (billStateful).
 */
export interface StatefulRequest {
  /** The input part of the hold (tokens): the context window, at least the new input's bound. */
  heldPrompt: number;
  /** Where the upstream keeps the answer of response `id`, below its base path (`/responses/{id}`); unset: nowhere. */
  retrievePath?: (id: string) => string;
}

/** A stateful request's billing needs (SPEC §4): see billStateful. */
export interface StatefulBilling {
  request: StatefulRequest;
  /** The answered call (undefined when no upstream answered). */
  call: UpstreamCall | undefined;
  format: ApiFormat;
  timeoutMs: number;
  /** Ends the usage lookup early (shutdown: the settle must still reach the spool); the estimate is billed. */
  cut?: AbortSignal | undefined;
  /** The client left after an upstream was sent the request and before an answer was relayed. */
  sentThenGone?: boolean;
}

/**
 * `promptEstimate` is the hold's byte bound; `maxOutput` what the request was held for; `stateful` set for
 * a stateful request, billed by billStateful when it ended without usage; `generatedUnseen` set when a
 * non-streaming attempt timed out before its headers after its request was sent (upstream/forward.ts
 * `onSentTimeout`): an upstream may have generated the answer, which nobody will see.
 */
export async function bill(
  tokenizer: Tokenizer,
  countPrompt: (budget: Budget) => Promise<number>,
  promptEstimate: number,
  answered: boolean,
  outcome: RelayOutcome | undefined,
  maxOutput: number,
  stateful?: StatefulBilling | undefined,
  generatedUnseen = false,
): Promise<Billed> {
  if (!answered || !outcome) {
    // A stateful request its client left after it was sent, before any upstream answered (SPEC §4: a client
    // abort is billed the held input part, never the new input alone): the upstream has read the history
    // the gateway never sees, and no answer means no id to ask for its usage. The same for one an upstream
    // timed out on after reading it.
    if (stateful && (stateful.sentThenGone || generatedUnseen))
      return { promptTokens: stateful.request.heldPrompt, completionTokens: 0, cachedTokens: 0, source: 'estimated' };
    // A non-streaming request an upstream had in full and did not answer before its headers timeout: its
    // headers come only after the whole generation, so it read the prompt and generated for that long
    // (then the gateway aborted it and tried the next upstream). Billed its prompt, counted, once however
    // many upstreams timed out: a 504 is not free generation (docs/behaviour.md "Billing").
    if (generatedUnseen)
      return {
        promptTokens: await countedPrompt(tokenizer, countPrompt, promptEstimate),
        completionTokens: 0,
        cachedTokens: 0,
        source: 'estimated',
      };
    // No answer from any upstream (or a refusal): nothing was produced, nothing is billed.
    return NOTHING_PRODUCED;
  }
  const counted = await billCounted(tokenizer, countPrompt, promptEstimate, outcome, maxOutput);
  if (!stateful?.call || outcome.usage) return counted;
  return billStateful(stateful.request, stateful.call, counted, stateful.format, stateful.timeoutMs, stateful.cut);
}

/** The prompt by the tokenizer (its byte bound, from above, if the tokenizer cannot load), in bounded slices. */
async function countedPrompt(
  tokenizer: Tokenizer,
  countPrompt: (budget: Budget) => Promise<number>,
  promptEstimate: number,
): Promise<number> {
  if (!tokenizer.loaded) await tokenizer.load().catch(() => {});
  return tokenizer.loaded ? countPrompt({ deadline: Date.now() + COUNT_BUDGET_MS }) : promptEstimate;
}

/** The upstream's usage, else the tokenizer's count (an answered request). */
async function billCounted(
  tokenizer: Tokenizer,
  countPrompt: (budget: Budget) => Promise<number>,
  promptEstimate: number,
  outcome: RelayOutcome,
  maxOutput: number,
): Promise<Billed> {
  // A body too large to keep, without usage: its text was relayed, not kept (or, with `echo`, it starts
  // with the prompt). Bill what the request was allowed to produce (the clamped output × choices it was
  // held for), never 0 for want of a buffer, and the prompt counted, as any answer without usage.
  if (!outcome.usage && outcome.uncounted)
    return {
      promptTokens: await countedPrompt(tokenizer, countPrompt, promptEstimate),
      completionTokens: maxOutput,
      cachedTokens: 0,
      source: 'estimated',
    };
  const extra = outcome.text();
  // Text past the meter's keep cap (TextCollector: 8 MiB, ~2 M tokens of prose) was relayed, not kept, so
  // it cannot be counted: each raw byte of it is billed as a token, an upper bound (a token is at least one
  // byte of UTF-8, and a JSON-escaped byte never stands for more than one). Like any count it is not capped
  // by the hold: text past the output cap is an overrun, debited in full (SPEC §4) and logged as one.
  const unseen = outcome.unseenTextBytes ?? 0;
  // The tokenizer (tens of MB and a fraction of a second to load: docs/notes.md §8) is only needed when
  // usage is missing. The gateway loads it before it reports ready (admin/warm-up.ts); here only when that failed.
  // If it cannot load, bytes bound the tokens from above: over-billed at worst, never unbilled.
  if ((!outcome.usage || extra) && !tokenizer.loaded) await tokenizer.load().catch(() => {});
  // Counted in bounded slices with the event loop served between them (SPEC §12), one deadline per request,
  // taken when the first count starts (wall time on this CPU, not the business clock): a request whose
  // usage came with nothing past it reads no clock.
  let budget: Budget | undefined;
  const budgetNow = () => (budget ??= { deadline: Date.now() + COUNT_BUDGET_MS });
  const countText = (s: string) => (tokenizer.loaded ? tokenizer.countTextBounded(s, budgetNow()) : Promise.resolve(Buffer.byteLength(s)));
  if (outcome.usage) {
    const more = (extra ? await countText(extra) : 0) + unseen;
    return {
      promptTokens: outcome.usage.prompt_tokens,
      completionTokens: outcome.usage.completion_tokens + more,
      cachedTokens: outcome.usage.cached_tokens ?? 0,
      source: more > 0 ? 'estimated' : 'upstream',
    };
  }
  const prompt = tokenizer.loaded ? await countPrompt(budgetNow()) : promptEstimate;
  return { promptTokens: prompt, completionTokens: (extra ? await countText(extra) : 0) + unseen, cachedTokens: 0, source: 'estimated' };
}

/** The id an answer starts with: a stream's first event carries `response.id`, a JSON body its own `id` first. */
export function answerId(head: string): string | undefined {
  return /"id"[ \t\r\n]*:[ \t\r\n]*"([^"\\]{1,256})"/.exec(head)?.[1];
}

/** The stored answer's GET is bounded: billing waits for it (shutdown too, through Credit.expect). */
const RETRIEVE_TIMEOUT_MS = 10_000;
/** A stored response larger than this is not read for its usage (its output text is in it). */
const RETRIEVE_MAX_BYTES = 8 * 1024 * 1024;

/** GET `path` on the upstream with the operator's credential; the usage of the stored answer, or null. */
async function retrieveUsage(up: Upstream, path: string, format: ApiFormat, timeoutMs: number, cut?: AbortSignal): Promise<Usage | null> {
  const ms = Math.min(timeoutMs, RETRIEVE_TIMEOUT_MS);
  if (cut?.aborted) return null;
  const res = await up.pool.request({
    path: up.basePath + path,
    method: 'GET',
    headers: {
      accept: 'application/json',
      'accept-encoding': 'identity',
      ...(up.authorization && { authorization: up.authorization }),
    },
    headersTimeout: ms,
    bodyTimeout: ms,
    signal: cut ? AbortSignal.any([AbortSignal.timeout(ms), cut]) : AbortSignal.timeout(ms),
  });
  if (res.statusCode !== 200) {
    await res.body.dump();
    return null;
  }
  const parts: Buffer[] = [];
  let size = 0;
  for await (const chunk of res.body as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > RETRIEVE_MAX_BYTES) {
      res.body.destroy();
      return null;
    }
    parts.push(chunk);
  }
  let raw: Buffer | undefined = Buffer.concat(parts, size);
  // An upstream that compresses although asked not to (upstream/content-coding.ts); an unknown coding throws.
  const coding = contentCoding(res.headers['content-encoding']);
  if (coding) raw = await decodeWhole(coding, raw, RETRIEVE_MAX_BYTES);
  if (raw === undefined) return null;
  const body = JSON.parse(raw.toString('utf8')) as Record<string, unknown> | null;
  return format.usage(body?.['usage']);
}

/**
 * A stateful request that ended without usage (SPEC §4: client gone, stream cut, usage omitted): the
 * upstream took input the gateway never saw, so the visible input alone would under-bill it. The
 * upstream's stored answer is asked for (`GET {upstream}{retrievePath(id)}`, the id from the answer's
 * first bytes) and its usage billed; without a retrievePath, failing that, or once `cut` fires (at
 * shutdown, so that the settle still reaches the spool), the hold's input part (the context window) plus
 * the output counted, `estimated`.
 */
export async function billStateful(
  s: StatefulRequest,
  call: UpstreamCall,
  counted: Billed,
  format: ApiFormat,
  timeoutMs: number,
  cut?: AbortSignal,
): Promise<Billed> {
  const path = s.retrievePath;
  const id = path ? answerId(call.head()) : undefined;
  if (path && id !== undefined) {
    const usage = await retrieveUsage(call.upstream, path(id), format, timeoutMs, cut).catch(() => null);
    if (usage) {
      return {
        promptTokens: usage.prompt_tokens,
        completionTokens: usage.completion_tokens,
        cachedTokens: usage.cached_tokens ?? 0,
        source: 'upstream',
      };
    }
  }
  return {
    promptTokens: Math.max(s.heldPrompt, counted.promptTokens),
    completionTokens: counted.completionTokens,
    cachedTokens: 0,
    source: 'estimated',
  };
}
