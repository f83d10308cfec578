/**
 * A generating endpoint (chat completions, completions, responses): turns a parsed body and its
 * steering options into what an OpenAI-compatible server would send, or into the fault it was asked
 * for. What differs per API (its plan, its stream events, its JSON body) is a SimApi.
 */
import type { Exchange } from './exchange.ts';
import type { SimOptions } from './steer.ts';
import type { RecordedRequest } from './record.ts';
import { createEncoder } from './encode.ts';
import {
  answerJson,
  answeredBySteering,
  completionBody,
  DONE_EVENT,
  JSON_HEADERS,
  planCompletion,
  streamChunks,
  vllmTrue,
  type ChunkSource,
  type CompletionPlan,
} from './output.ts';

/** One API's wire shapes. */
export interface SimApi {
  /** `rec` is the request's record (its tokens sent so far), for an API that keeps what it answered. */
  plan(requestId: number, body: unknown, opts: SimOptions, rec?: RecordedRequest): CompletionPlan;
  /** The stream's events; token events are `firstToken … firstToken + plan.emit - 1`. */
  stream(plan: CompletionPlan, body: unknown): ChunkSource;
  /** The terminating event ([DONE]), or '' for an API whose last typed event ends the stream. */
  done: string;
  json(plan: CompletionPlan, body: unknown): string;
}

/** POST /v1/chat/completions. */
export const CHAT_API: SimApi = {
  plan: planCompletion,
  stream: (plan, body) => streamChunks(plan, includeUsage(body)),
  done: DONE_EVENT,
  json: completionBody,
};

// Node adds no `server` header; we add one so the gateway's header stripping has something to strip.
const SSE_HEADERS = {
  'content-type': 'text/event-stream; charset=utf-8',
  'cache-control': 'no-cache',
  server: 'tollgate-simulator',
};

/** Answers one generation request of `api` as steered by `opts`. */
export async function respondGenerate(x: Exchange, body: unknown, opts: SimOptions, api: SimApi = CHAT_API): Promise<void> {
  if (await answeredBySteering(x, opts)) return;
  const plan = api.plan(x.rec.id, body, opts, x.rec);
  const headers = { ...(isStream(body) ? SSE_HEADERS : JSON_HEADERS), 'x-sim-request-id': String(x.rec.id) };
  if (isStream(body)) return streamCompletion(x, plan, api.stream(plan, body), api.done, opts, headers);

  // A non-streaming server answers only when generation is over: headers after every token's delay.
  await x.sleep(opts.delayMs * plan.emit);
  if (x.done) return;
  if (opts.cutAfter === undefined && opts.corruptAfter === undefined) x.rec.completionTokensSent = plan.emit;
  answerJson(x, headers, api.json(plan, body), opts);
}

async function streamCompletion(
  x: Exchange,
  plan: CompletionPlan,
  chunks: ChunkSource,
  done: string,
  opts: SimOptions,
  headers: Record<string, string>,
): Promise<void> {
  const first = chunks.firstToken;
  const cutAt = opts.cutAfter ?? Number.POSITIVE_INFINITY;
  const corruptAt = opts.corruptAfter ?? Number.POSITIVE_INFINITY;
  if (opts.encoding === undefined) x.res.writeHead(200, headers);
  else {
    x.res.writeHead(200, { ...headers, 'content-encoding': opts.encoding });
    const encoder = createEncoder(opts.encoding);
    if (encoder) x.encodeWith(encoder);
  }
  // Without delays the whole stream is one synchronous burst: cork it into a single writev
  // (a 16-token stream is 19 chunks, 19 syscalls uncorked).
  let corked = opts.delayMs === 0;
  if (corked) x.res.cork();
  try {
    for (let k = 0; k < chunks.count; k++) {
      if (k >= cutAt) return x.cut();
      if (k >= corruptAt) return x.corrupt();
      const isToken = k >= first && k < first + plan.emit;
      if (isToken && opts.delayMs > 0) await x.sleep(opts.delayMs);
      if (x.done) return;
      if (!x.writeChunk(chunks.event(k), isToken ? 1 : 0)) {
        // A corked socket never drains: flush before waiting (only huge token counts get here).
        if (corked) x.res.uncork();
        corked = false;
        await x.drain();
        if (x.done) return;
      }
    }
    // A steered cut never sends [DONE], even when the stream had fewer chunks than cut_after.
    if (opts.cutAfter !== undefined) return x.cut();
    if (opts.corruptAfter !== undefined) return x.corrupt();
    x.end(done || undefined);
  } finally {
    // cut() may have uncorked already; never drive the count below zero.
    if (corked && x.res.writableCorked > 0) x.res.uncork();
  }
}

/** `stream` and `stream_options.include_usage` are lax booleans, as vLLM reads them (vllmTrue). */
function isStream(body: unknown): boolean {
  return typeof body === 'object' && body !== null && vllmTrue((body as { stream?: unknown }).stream);
}

function includeUsage(body: unknown): boolean {
  const so = (body as { stream_options?: unknown }).stream_options;
  return typeof so === 'object' && so !== null && vllmTrue((so as { include_usage?: unknown }).include_usage);
}
