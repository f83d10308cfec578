/**
 * Incremental SSE meter for an upstream OpenAI-format stream (chat completions, completions, responses:
 * where each keeps its usage and text is the table in formats.ts; OpenAI / vLLM wire format).
 *
 * Feed it the upstream's bytes with `push()`; it returns the bytes to forward now — whole events only,
 * byte-for-byte, never re-serialised — and holds an incomplete trailing event until its end arrives.
 * While doing so it records the latest `usage`, whether `data: [DONE]` was seen, and the raw text needed
 * by the tokenizer fallback.
 *
 * Hot-path budget (SPEC §1.2, STYLE "Per-chunk hot path"): O(bytes) scanning — Buffer.indexOf for line
 * feeds, one compiled-regex pass over each chunk's event data (data-scan.ts); no JSON.parse except for
 * an event whose data holds a `"usage":{` object (one per stream, normally the last); no
 * re-serialisation; the only buffers are the held tail (≤ maxPendingBytes), the retained text (see
 * TextCollector) and, during push(), a latin1 copy of the chunk for the key search.
 *
 * Events end at an empty line; lines end in LF or CRLF (see sse-event.ts).
 */
import { KeyFinder, scanData } from './data-scan.ts';
import { dataRange, eventData, isDone } from './sse-event.ts';
import { TextCollector } from './text-slices.ts';
import type { Usage } from './usage.ts';
import { CHAT, type ApiFormat } from './formats.ts';

const LF = 0x0a;
const CR = 0x0d;

/** Thrown by push() when one event grows beyond maxPendingBytes; the meter is unusable afterwards. */
export class SseEventTooLargeError extends Error {
  readonly code = 'SSE_EVENT_TOO_LARGE';
  readonly limit: number;
  constructor(limit: number) {
    super(`an upstream SSE event exceeded ${limit} bytes`);
    this.name = 'SseEventTooLargeError';
    this.limit = limit;
  }
}

export interface SseMeterOptions {
  /** Remove the `usage` + `"choices":[]` event (present only because the gateway forced include_usage). */
  dropUsageOnlyChunk: boolean;
  /** Largest single event, in bytes, including its terminating blank line. Default 1 MiB. */
  maxPendingBytes?: number;
  /** Cap on retained completion text bytes. Default 8 MiB (see TextCollector). */
  maxTextBytes?: number;
  /** Where the stream keeps its usage and text (formats.ts). Default chat. */
  format?: ApiFormat;
}

/** Bytes to forward: one buffer, or several to write in order. */
export type SseOutput = Buffer | readonly Buffer[];

/** The meter's public face; see createSseMeter. */
export interface SseMeter {
  /**
   * Feeds upstream bytes; returns the complete events to forward now: the chunk itself or a view of it,
   * several views in order when an event between them was dropped, or null. Throws SseEventTooLargeError.
   */
  push(chunk: Buffer): SseOutput | null;
  /** At upstream end: meters and returns the held incomplete tail as-is, or null. Call once, last. */
  end(): Buffer | null;
  /** Latest valid usage object seen (cumulative: the latest wins); null when none. */
  readonly usage: Usage | null;
  /** True once `data: [DONE]` was seen. */
  readonly sawDone: boolean;
  /** Complete events with a data field seen so far ([DONE] included; comments and keep-alives not). */
  readonly events: number;
  /**
   * Generated text (delta content, reasoning, refusal, tool-call arguments) produced AFTER the latest
   * usage object, or since the start when there was none. Usage is authoritative, so the text it covers
   * is released when it arrives: bill `usage + count(completionText())`, which is just `usage` in a
   * normal stream (usage is the last event). Decoding happens here, on demand.
   */
  completionText(): string;
  /** Raw text bytes beyond maxTextBytes that were counted but not retained (0 in practice). */
  readonly droppedTextBytes: number;
}

class Scanner implements SseMeter {
  usage: Usage | null = null;
  sawDone = false;
  events = 0;
  private readonly drop: boolean;
  private readonly format: ApiFormat;
  private readonly max: number;
  private readonly text: TextCollector;
  /** Copies of the bytes of the incomplete event, oldest first; copied so upstream chunks can be freed. */
  private pending: Buffer[] = [];
  private pendingLen = 0;
  /** The last two bytes seen (0 = none), to spot a blank line whose LF starts the next chunk. */
  private last1 = 0;
  private last2 = 0;
  private ended = false;
  /** Scratch for eventData: where the current event's data is. */
  private readonly data = dataRange();
  /** Key search over the chunk being pushed, shared by its events; released when push() returns. */
  private readonly keys: KeyFinder;

  constructor(opts: SseMeterOptions) {
    const max = opts.maxPendingBytes ?? 1024 * 1024;
    if (!Number.isSafeInteger(max) || max < 1) throw new RangeError(`maxPendingBytes must be a positive integer, got ${max}`);
    this.drop = opts.dropUsageOnlyChunk;
    this.format = opts.format ?? CHAT;
    this.keys = new KeyFinder(this.format.candidate);
    this.max = max;
    this.text = new TextCollector(opts.maxTextBytes === undefined ? {} : { maxBytes: opts.maxTextBytes });
  }

  get droppedTextBytes(): number {
    return this.text.overflowBytes;
  }

  completionText(): string {
    return this.text.text();
  }

  push(chunk: Buffer): SseOutput | null {
    if (this.ended) throw new Error('SseMeter.push() after end()');
    const len = chunk.length;
    if (len === 0) return null;
    let parts: Buffer[] | null = null;
    let keepFrom = 0; // start of the run of chunk bytes to forward that is not yet in `parts`
    let evStart = 0; // start in `chunk` of the event being read (its older bytes are in `pending`)
    let nl = chunk.indexOf(LF);
    while (nl !== -1) {
      const p1 = nl >= 1 ? chunk[nl - 1] : this.last1;
      const p2 = nl >= 2 ? chunk[nl - 2] : nl === 1 ? this.last1 : this.last2;
      // An LF that ends an empty line (previous byte LF, or CR preceded by LF) ends the event.
      if (p1 === LF || (p1 === CR && p2 === LF)) {
        const end = nl + 1;
        const size = this.pendingLen + end - evStart;
        if (size > this.max) throw new SseEventTooLargeError(this.max);
        if (this.pendingLen > 0) {
          // Only the first event of a chunk can have older bytes; join them once, at completion.
          this.pending.push(chunk.subarray(0, end));
          const ev = Buffer.concat(this.pending, size);
          this.pending = [];
          this.pendingLen = 0;
          if (this.meter(ev, 0, ev.length)) (parts ??= []).push(ev);
          keepFrom = end;
        } else if (!this.meter(chunk, evStart, end)) {
          if (evStart > keepFrom) (parts ??= []).push(chunk.subarray(keepFrom, evStart));
          keepFrom = end;
        }
        evStart = end;
      }
      // Usually the next line is the blank one: check its bytes directly instead of calling indexOf.
      const b = chunk[nl + 1];
      nl = b === LF ? nl + 1 : b === CR && chunk[nl + 2] === LF ? nl + 2 : chunk.indexOf(LF, nl + 1);
    }
    this.keys.release(); // the chunk is the upstream's: its copy must not outlive this call
    if (evStart < len) this.hold(chunk, evStart);
    this.last2 = len >= 2 ? chunk[len - 2]! : this.last1;
    this.last1 = chunk[len - 1]!;
    if (evStart > keepFrom) {
      // The common case: the upstream chunk itself (one or more whole events), or a view of it.
      const run = keepFrom === 0 && evStart === len ? chunk : chunk.subarray(keepFrom, evStart);
      if (parts === null) return run;
      parts.push(run);
    }
    if (parts === null) return null;
    // Several runs (an event dropped between them) go out as they are: joining them copied the whole
    // chunk (~16 KB for 64 tokens) into fresh external memory per stream, which drove most major GCs.
    return parts.length === 1 ? parts[0]! : parts;
  }

  end(): Buffer | null {
    if (this.ended) return null;
    this.ended = true;
    if (this.pendingLen === 0) return null;
    const tail = Buffer.concat(this.pending, this.pendingLen);
    this.pending = [];
    this.pendingLen = 0;
    // Metered (an upstream may omit the final blank line after usage or [DONE]) but forwarded as-is.
    this.meter(tail, 0, tail.length);
    this.keys.release();
    return tail;
  }

  private hold(chunk: Buffer, from: number): void {
    const n = chunk.length - from;
    if (this.pendingLen + n > this.max) throw new SseEventTooLargeError(this.max);
    this.pending.push(Buffer.from(chunk.subarray(from)));
    this.pendingLen += n;
  }

  /** Meters the event `buf[start, end)`; returns false when it must not be forwarded. */
  private meter(buf: Buffer, start: number, end: number): boolean {
    const d = this.data;
    if (!eventData(buf, start, end, d)) return true;
    this.events++;
    if (isDone(d)) {
      this.sawDone = true;
      return true;
    }
    // Text is collected first; if this event's usage proves valid, it covers that text and all before.
    if (scanData(d.buf, d.start, d.end, this.text, this.keys)) {
      let parsed: unknown;
      try {
        parsed = JSON.parse(d.buf.toString('utf8', d.start, d.end));
      } catch {
        parsed = null; // not JSON: forward untouched, meter only its text
      }
      const usage = this.format.eventUsage(parsed);
      if (usage !== null) {
        this.usage = usage;
        this.text.reset();
        const choices = (parsed as { choices?: unknown }).choices;
        return !(this.drop && Array.isArray(choices) && choices.length === 0);
      }
    }
    return true;
  }
}

/**
 * Creates a meter for one upstream stream. Usage: `const out = meter.push(chunk);` for each upstream
 * chunk, writing `out` (one buffer or several, in order) when not null, then
 * `const tail = meter.end(); if (tail) res.write(tail);`.
 */
export function createSseMeter(opts: SseMeterOptions): SseMeter {
  return new Scanner(opts);
}
