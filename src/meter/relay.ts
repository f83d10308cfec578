/**
 * Relays an answered upstream response to the client while metering it. SSE bytes go through the
 * incremental meter (whole events, byte-for-byte, the usage-only chunk dropped when the client did not
 * ask for it), metered and written once per event-loop turn; JSON bodies are written through as they
 * arrive and read for usage once, at the end. Backpressure: a full client pauses the upstream read until
 * it drains. Per chunk: no await, no Redis, no logging, no JSON parse (except the usage event).
 *
 * A JSON body only starts once the upstream has generated all of it: a client that leaves during it
 * does not stop the read at once (the route lets the rest be read, not written, for JSON_TAIL_GRACE_MS,
 * inside SPEC's 100 ms), and a body read to its end is billed the upstream's usage as if the client had
 * stayed. A body the upstream breaks off, or that the route's abort cut, is billed from what arrived
 * (relayJson's `cut`).
 */
import type { ServerResponse } from 'node:http';
import type { UpstreamCall } from '../upstream/call.ts';
import { createSseMeter, SseEventTooLargeError, type SseOutput } from './sse-scanner.ts';
import { readUsageFromJson } from './usage.ts';
import { JsonUsageScanner } from './json-usage.ts';
import { scanTruncated } from './data-scan.ts';
import { TextCollector } from './text-slices.ts';
import type { Usage } from './usage.ts';
import { CHAT, type ApiFormat } from './formats.ts';
import { GatewayError } from '../http/errors.ts';

export interface RelayOutcome {
  /** The upstream's usage, when it reported one (0 is a real value; absent is null). */
  usage: Usage | null;
  /** Produced text not covered by `usage` (all of it when usage is absent); decoded on demand. */
  text: () => string;
  /**
   * Raw (JSON-escaped) bytes of produced text past the meter's keep cap (TextCollector): relayed, not in
   * `text()`. A stream's only; billed as an upper bound (meter/bill.ts).
   */
  unseenTextBytes?: number;
  /** How the relay ended (`shutting_down`: cut at the drain deadline, SPEC §14). */
  end: 'complete' | 'client_gone' | 'upstream_failed' | 'shutting_down';
  /**
   * With `upstream_failed`: the gateway cut the stream itself (an event past its bound), the upstream did
   * not fail: a broken stream for the client, billed as one, but no failure toward ejecting the upstream.
   */
  cutByGateway?: true;
  /** Nanoseconds the gateway spent on chunks. */
  chunkNs: bigint;
  /**
   * No usage, and text that could not be counted: a non-streaming body too large to keep whole, or a
   * stream with a completions event passed through unread (SseMeter.unreadText).
   */
  uncounted?: boolean;
  /**
   * The upstream's error when it failed (`upstream_failed`) before any byte of a JSON answer was written:
   * the response is untouched, and the route answers the error SPEC §2a names instead (502 / 504).
   */
  unsent?: Error;
}

/**
 * Non-streaming bodies up to this size are kept whole and parsed once at the end (usage and, without
 * usage, the text to count). A larger one (logprobs can make a 16 MiB answer) is relayed as it comes and
 * only scanned for its top-level usage (json-usage.ts), so a request's memory never grows with its answer.
 */
const MAX_JSON_RETAINED = 1024 * 1024;

/** Aborts a stream still open at the drain deadline (SPEC §14): relaySse ends it with `shuttingDownEvent`. */
export function shuttingDown(): GatewayError {
  return new GatewayError('shutting_down', 'The gateway is shutting down: this stream was cut at its drain deadline.');
}

/** The event a stream cut at the drain deadline ends with, in its API's error shape (as formats.ts streamError), no [DONE]. */
function shuttingDownEvent(format: ApiFormat, e: GatewayError): string {
  if (format.name === 'responses')
    return `event: error\ndata: ${JSON.stringify({ type: 'error', code: e.code, message: e.message, param: null })}\n\n`;
  return `data: ${JSON.stringify({ error: { message: e.message, type: e.type, code: e.code, param: null } })}\n\n`;
}

/** Writes `out` (corked by the caller: several buffers still go out as one socket write); false when the client is full. */
function write(res: ServerResponse, out: SseOutput): boolean {
  if (Buffer.isBuffer(out)) return res.write(out);
  let ok = true;
  for (const b of out) ok = res.write(b);
  return ok;
}

/**
 * Feeds the call's body chunks through `transform` to the client, and once per event-loop turn that had
 * chunks, after the last of them, writes what `turn` returns; returns the time spent so far. A full
 * client pauses the upstream until it drains; a destroyed one (it never drains) stops the upstream, or,
 * with `readOnGone`, resumes it and has the rest of the body go through `transform` without being written.
 */
function pipe(
  call: UpstreamCall,
  res: ServerResponse,
  transform: (chunk: Buffer) => SseOutput | null,
  end: () => void,
  turn?: () => SseOutput | null,
  readOnGone = false,
): () => bigint {
  let ns = 0n;
  // Writes of one tick share a socket write, the response's end included (it comes in the tick of the
  // last chunk): Node's ServerResponse no longer corks per tick by itself, and the end of a chunked
  // response was a write (and a receiver wake-up) of its own.
  let corked = false;
  // Time on chunks is taken per turn, from its first chunk to its writes (two clock reads a turn, not
  // two a chunk: a 64-token burst is 68 chunks); undici's parsing between the chunks is counted too.
  let turnStart = 0n;
  /** Bytes taken this turn and not written yet (written at its end, by `turn`), and how many fit under the high-water mark. */
  let turnBytes = 0;
  let turnRoom = 0;
  /** Waiting for the client's 'drain'. */
  let full = false;
  /** The upstream was told to pause (a chunk returned false); resumed at the drain, or at the turn's end if its writes fit. */
  let paused = false;
  let resume: () => void = () => {};
  const resumeIfPaused = () => {
    if (!paused) return;
    paused = false;
    resume();
  };
  const drained = () => {
    full = false;
    resumeIfPaused();
  };
  const written = (ok: boolean) => {
    if (ok || full) return;
    full = true;
    // Registered before the tick's uncork, which may flush everything and emit 'drain' at once.
    res.once('drain', drained);
  };
  const uncork = () => {
    corked = false;
    if (turn) {
      try {
        const out = turn();
        if (out && !res.writableEnded && !res.destroyed) written(write(res, out));
      } catch (err) {
        call.abort(err as Error);
      }
      turnBytes = 0;
      if (!full) resumeIfPaused();
    }
    ns += process.hrtime.bigint() - turnStart;
    // end() already flushed and reset the response's cork count; uncorking again would take it below zero.
    if (!res.writableEnded) res.uncork();
  };
  call.attach({
    end,
    data(chunk, resumeUpstream) {
      if (res.destroyed) {
        if (!readOnGone) call.abort(new Error('client connection closed'));
        else {
          try {
            transform(chunk); // metered, not written
          } catch (err) {
            call.abort(err as Error);
          }
        }
        return true;
      }
      resume = resumeUpstream;
      if (!corked) {
        corked = true;
        turnStart = process.hrtime.bigint();
        // Nothing is written until the turn's end: what the client's buffer can still take is fixed for the turn.
        turnRoom = res.writableHighWaterMark - res.writableLength;
        res.cork();
        process.nextTick(uncork);
      }
      try {
        const out = transform(chunk);
        if (out) written(write(res, out));
        else if (turn) turnBytes += chunk.length;
      } catch (err) {
        call.abort(err as Error);
      }
      // Past the high-water mark (counting what this turn will write at its end): pause the upstream.
      if (full || (turn !== undefined && turnBytes > turnRoom)) {
        paused = true;
        return false;
      }
      return true;
    },
  });
  // A client gone while it was full never drains: the read it paused goes on without it.
  if (readOnGone) res.once('close', drained);
  return () => ns;
}

/**
 * The largest single SSE event a stream may carry (the meter holds an event whole until its end): 1 MiB
 * plus twice the upstream request's bytes. A `/v1/responses` upstream echoes the request's
 * `instructions` and `tools` in `response.created` and `response.completed` (OpenAI, vLLM), and an
 * echo may escape what the request sent raw (`é` as `\u00e9`: at most 2× for the BMP), so the bound
 * follows the request, and a request's memory stays bounded by its own size (its body is bounded by
 * `limits.max_body_bytes`).
 */
export function maxEventBytes(requestBytes: number): number {
  return 2 * requestBytes + 1024 * 1024;
}

/**
 * The largest `/v1/responses` event passed through rather than held (sse-scanner.ts
 * maxPassedEventBytes): such a stream repeats its whole answer in the `.done` events and in
 * `response.completed` (beside its usage), and a hosted image_generation call sends each partial image
 * and the result as one base64 event (1–3 MB at 1024×1024, more at larger sizes): events past
 * maxEventBytes are relayed as they arrive and read for their usage without being kept, so their size
 * costs no memory. This bound only cuts an event that never ends (a decompression bomb): 64 MiB, over
 * any image the image tools make.
 */
export const MAX_PASSED_EVENT_BYTES = 64 * 1024 * 1024;

/** Bytes of a passed `/v1/completions` event allowed per byte of the upstream request, over MAX_PASSED_EVENT_BYTES. */
export const PASSED_BYTES_PER_REQUEST_BYTE = 256;

/**
 * The largest event of `format`'s stream passed through rather than held (sse-scanner.ts
 * maxPassedEventBytes), or undefined where a larger event than maxEventBytes cuts the stream (chat).
 * `/v1/responses`: MAX_PASSED_EVENT_BYTES. `/v1/completions`: vLLM's `echo` with `logprobs: N` puts the
 * prompt and a logprob entry per prompt token (N + 1 alternatives each) in the first chunk, ~185 bytes
 * a prompt token at N = 5 and ~575 at N = 20 (vLLM's default `max_logprobs`), ~145 per byte of a text
 * prompt: MAX_PASSED_EVENT_BYTES (over 100k prompt tokens at N = 20) plus
 * PASSED_BYTES_PER_REQUEST_BYTE per request byte, linear in what the request can ask for. The bound only
 * cuts an event that never ends (a decompression bomb): a passed event costs no memory.
 */
export function maxPassedEventBytes(format: ApiFormat, requestBytes: number): number | undefined {
  if (format.name === 'responses') return MAX_PASSED_EVENT_BYTES;
  if (format.name === 'completions') return MAX_PASSED_EVENT_BYTES + PASSED_BYTES_PER_REQUEST_BYTE * requestBytes;
  return undefined;
}

/**
 * Relays an SSE stream; resolves when the upstream ended, failed, or the client left. `maxEvent`: see
 * maxEventBytes; `maxText`: the completion text kept for the tokenizer (default TextCollector's 8 MiB);
 * `severalChoices`: the request asked for more than one choice (see SseMeterOptions); `maxPassed`: see
 * maxPassedEventBytes (default: the format's for a request of 0 bytes).
 */
export async function relaySse(
  call: UpstreamCall,
  res: ServerResponse,
  dropUsageOnlyChunk: boolean,
  clientGone: () => boolean,
  format: ApiFormat = CHAT,
  maxEvent = maxEventBytes(0),
  maxText?: number,
  severalChoices = false,
  maxPassed = maxPassedEventBytes(format, 0),
): Promise<RelayOutcome> {
  const meter = createSseMeter({
    dropUsageOnlyChunk,
    format,
    maxPendingBytes: maxEvent,
    maxTextBytes: maxText,
    severalChoices,
    maxPassedEventBytes: maxPassed,
  });
  let finished = false;
  /** The upstream body is complete: the turn's events, the held tail (if any) and the response's end go out with the last chunk. */
  const finish = () => {
    if (finished) return;
    finished = true;
    try {
      const out = meter.flush();
      if (out) write(res, out);
      const tail = meter.end();
      if (tail) res.write(tail);
    } finally {
      res.end();
    }
  };
  const spent = pipe(
    call,
    res,
    (chunk) => {
      meter.add(chunk);
      return null;
    },
    finish,
    () => meter.flush(),
  );
  let end: RelayOutcome['end'] = 'complete';
  let cutByGateway = false;
  try {
    await call.done;
    finish(); // when the body ended before the relay attached
  } catch (err) {
    // Meter the held tail too: a usage event cut before its blank line still counts.
    try {
      // This turn's complete events go out before the error event, as they would have at the turn's end.
      const out = meter.flush();
      if (out && !clientGone()) write(res, out);
      meter.end();
    } catch {
      // a meter that already failed (event too large) has nothing more to give
    }
    // Cut inside an event passed through (part of it was relayed): a blank line ends it, so the error
    // event that follows is an event of its own, not data lines appended to the cut one.
    if (meter.midEvent && !clientGone()) res.write('\n\n');
    if (clientGone()) end = 'client_gone';
    else if (err instanceof GatewayError && err.code === 'shutting_down') {
      end = 'shutting_down';
      res.end(shuttingDownEvent(format, err));
    } else {
      // A stream that breaks after its first byte ends with the API's error event and no [DONE] (SPEC §2a).
      end = 'upstream_failed';
      cutByGateway = err instanceof SseEventTooLargeError;
      res.end(format.streamError);
    }
  }
  return {
    usage: meter.usage,
    text: () => meter.completionText(),
    unseenTextBytes: meter.droppedTextBytes,
    end,
    chunkNs: spent(),
    ...(cutByGateway && { cutByGateway: true }),
    // A passed completions event's text (the echoed prompt) was not read: without usage, bill what the request was held for.
    ...(meter.usage === null && meter.unreadText && { uncounted: true }),
  };
}

/**
 * Relays a JSON body unchanged; usage is read from the whole body at the end, or by a scan when it is
 * large. `head` writes the response's status and headers: called with the first body byte (or at the
 * end of an empty body), so an upstream that fails before any byte leaves the response untouched
 * (`unsent`) for the route to answer SPEC's error instead. The client leaving does not stop the read
 * at once (see the top of this file).
 */
export async function relayJson(
  call: UpstreamCall,
  res: ServerResponse,
  clientGone: () => boolean,
  format: ApiFormat = CHAT,
  head: () => void = () => {},
): Promise<RelayOutcome> {
  let chunks: Buffer[] = [];
  let size = 0;
  let scanner: JsonUsageScanner | undefined;
  let headed = false;
  const spent = pipe(
    call,
    res,
    (chunk) => {
      if (!headed) {
        headed = true;
        if (!res.destroyed) head();
      }
      size += chunk.length;
      if (scanner) scanner.push(chunk);
      else if (size <= MAX_JSON_RETAINED) chunks.push(chunk);
      else {
        // Past the limit: scan what was kept, let it go, and scan the rest as it comes.
        scanner = new JsonUsageScanner();
        for (const c of chunks) scanner.push(c);
        scanner.push(chunk);
        chunks = [];
      }
      return chunk;
    },
    () => {
      if (res.destroyed) return;
      if (!headed) {
        headed = true;
        head();
      }
      res.end();
    },
    undefined,
    true,
  );
  try {
    await call.done;
    if (!res.writableEnded && !res.destroyed) {
      // when the body ended before the relay attached
      if (!headed) head();
      res.end();
    }
  } catch (err) {
    const gone = clientGone();
    // Nothing was written yet: the route answers the error instead of a response cut before its first byte.
    if (headed && !gone) res.destroy();
    return cut(
      chunks,
      size,
      scanner,
      format,
      gone ? 'client_gone' : 'upstream_failed',
      spent(),
      headed || gone ? undefined : (err as Error),
    );
  }
  // Read to its end, also when the client left during it: billed as if it had stayed.
  const end: RelayOutcome['end'] = clientGone() ? 'client_gone' : 'complete';
  const t = process.hrtime.bigint();
  if (scanner) {
    let usage = null;
    try {
      usage = scanner.result === null ? null : format.usage(JSON.parse(scanner.result));
    } catch {
      // not JSON after all: no usage
    }
    return { usage, text: () => '', end, chunkNs: spent() + process.hrtime.bigint() - t, ...(usage === null && { uncounted: true }) };
  }
  const parsed = readUsageFromJson(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size), format);
  const chunkNs = spent() + process.hrtime.bigint() - t;
  // With usage present it covers the whole body; the text is only needed when it is absent.
  return { usage: parsed.usage, text: parsed.usage ? () => '' : parsed.completionText, end, chunkNs };
}

/**
 * The outcome of a JSON body the upstream broke off (or the total timeout cut): the generation was over
 * before the body started, so what arrived is billed. A top-level usage that arrived whole is the
 * upstream's; otherwise the text that arrived is counted (the cut string up to the cut: scanTruncated),
 * `estimated`. A body past the keep limit kept no text: without usage it is billed as `uncounted` (the
 * clamped output it was held for), as a whole one is.
 */
function cut(
  chunks: Buffer[],
  size: number,
  scanner: JsonUsageScanner | undefined,
  format: ApiFormat,
  end: RelayOutcome['end'],
  chunkNs: bigint,
  unsent: Error | undefined,
): RelayOutcome {
  const t = process.hrtime.bigint();
  const rest = unsent ? { unsent } : {};
  let text: () => string = () => '';
  if (!scanner && size > 0) {
    scanner = new JsonUsageScanner();
    for (const c of chunks) scanner.push(c);
    const body = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size);
    text = () => {
      const collected = new TextCollector();
      scanTruncated(body, collected, format.bodyCandidate);
      return collected.text();
    };
  }
  let usage = null;
  try {
    usage = scanner?.result ? format.usage(JSON.parse(scanner.result)) : null;
  } catch {
    // not JSON: no usage
  }
  chunkNs += process.hrtime.bigint() - t;
  if (usage) return { usage, text: () => '', end, chunkNs, ...rest };
  if (size > MAX_JSON_RETAINED) return { usage: null, text, end, chunkNs, uncounted: true, ...rest };
  return { usage: null, text, end, chunkNs, ...rest };
}
