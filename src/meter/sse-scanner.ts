/**
 * Incremental SSE meter for an upstream OpenAI-format stream (chat completions, completions, responses:
 * where each keeps its usage and text is the table in formats.ts; OpenAI / vLLM wire format).
 *
 * Feed it the upstream's bytes with `add()`, chunk by chunk, and call `flush()` once per event-loop
 * turn: it meters the turn's complete events and returns the bytes to forward — whole events only,
 * byte-for-byte, never re-serialised; an incomplete trailing event is held until its end arrives.
 * `push()` is add + flush, for one chunk. The meter records the latest `usage`, whether `data: [DONE]`
 * was seen, and the raw text needed by the tokenizer fallback.
 *
 * Why per turn: a usage object covers all the text before it, so when a turn holds many events (a
 * stream that arrives in one burst: a fast upstream, or a gateway that is behind, which is when its CPU
 * matters) and one of its last two events with data carries the usage (where a stream puts it: last
 * before [DONE]), found by one native `lastIndexOf` for `usage"` each (data-scan.ts UsageFinder), the
 * events before it are not looked at: their text is covered, and none of them is the usage-only chunk
 * to drop, which a stream sends once. Every other turn — a token-paced stream's one event, a burst cut
 * before its end — is metered front to back, text and usage in one regex pass per event, as before.
 * The relay corks the client's socket per turn anyway, so the bytes leave at the same moment.
 *
 * The events are told apart only where they are looked at. add() finds where a chunk's last whole
 * event ends, searching back from the chunk's end (one byte compare when the chunk ends with one, as an
 * upstream's writes do), and records the whole events before it as one segment; flush() walks back
 * from a turn's end to its last events, and front to back only through the events it meters. A burst
 * of 64 events with its usage at the end cost 64 native `indexOf` calls in add(), ~50k instructions a
 * stream (bench/results/stream-instructions.md); now a few.
 *
 * Hot-path budget (SPEC §1.2, STYLE "Per-chunk hot path"): O(bytes) scanning — Buffer.indexOf and
 * lastIndexOf for line feeds and the usage key, one compiled-regex pass over the data of each event
 * whose text is needed; no JSON.parse except for an event whose data holds a `"usage":{` object (one
 * per stream, normally the last); no re-serialisation; the only buffers are the held tail (≤
 * maxPendingBytes), the retained text (see TextCollector), references to the current turn's segments
 * (views of the upstream's chunks of this turn: at most one socket read) and, during a scan, a latin1
 * copy of the chunk for the key search.
 *
 * A `/v1/responses` event larger than maxPendingBytes (a long answer repeated in the `.done` events and
 * `response.completed`, a hosted image's base64), or a `/v1/completions` one (vLLM's `echo` with
 * `logprobs`: the prompt's logprobs in the first chunk), is not held: with maxPassedEventBytes it is forwarded
 * as its bytes arrive, as segments of their own, and a turn holding such pieces is metered front to back
 * with each piece read by sse-large-event.ts in its place. The common path pays one field test per
 * add() and per flush() for it.
 *
 * Events end at an empty line; lines end in LF or CRLF (see sse-event.ts).
 */
import { KeyFinder, scanData, UsageFinder } from './data-scan.ts';
import { dataRange, eventData, isDone } from './sse-event.ts';
import { TextCollector } from './text-slices.ts';
import { LargeEventScanner } from './sse-large-event.ts';
import type { Usage } from './usage.ts';
import { CHAT, type ApiFormat } from './formats.ts';

const LF = 0x0a;
const CR = 0x0d;

/** Thrown by add() / push() when one event grows beyond maxPendingBytes; the meter is unusable afterwards. */
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
  /** Cap on retained completion text bytes. Default (also when undefined) 8 MiB (see TextCollector). */
  maxTextBytes?: number | undefined;
  /** Where the stream keeps its usage and text (formats.ts). Default chat. */
  format?: ApiFormat;
  /**
   * The request asked for more than one choice (`n`, several prompts): a usage on a chunk that carries
   * choices may be that choice's alone (vLLM's `continuous_usage_stats`: `completion_tokens` of choice i,
   * the prompt tokens of its prompt), so only a chunk without choices (the usage-only one, which sums them)
   * gives the answer's usage. A stream cut before it is billed from its text. Default false. Such a
   * stream has every chunk's usage parsed and refused (a JSON.parse a chunk): only a client asking for
   * continuous usage with several choices pays that.
   */
  severalChoices?: boolean | undefined;
  /**
   * `/v1/responses` and `/v1/completions` (sse-large-event.ts reads their events): an event larger than
   * maxPendingBytes is not held but passed through as its bytes arrive, in order, metered as they pass
   * (Responses: its `response.usage`, its top-level `delta`; completions: its top-level `usage`, its
   * text left unread: unreadText), up to this many bytes; a larger one throws SseEventTooLargeError.
   * Unset (chat): an event larger than maxPendingBytes throws.
   */
  maxPassedEventBytes?: number | undefined;
}

/** Bytes to forward: one buffer, or several to write in order. */
export type SseOutput = Buffer | readonly Buffer[];

/** The meter's public face; see createSseMeter. */
export interface SseMeter {
  /** Takes upstream bytes; their complete events are metered and returned by the next flush(). Throws SseEventTooLargeError. */
  add(chunk: Buffer): void;
  /**
   * Meters the events added since the last flush and returns those to forward, in order: one buffer (a
   * chunk itself or a view of it) or several (one per chunk, and split where an event was dropped), or
   * null. Call at least once per event-loop turn: the events are views of the upstream's chunks.
   */
  flush(): SseOutput | null;
  /** add() then flush(): one chunk's complete events. */
  push(chunk: Buffer): SseOutput | null;
  /**
   * At upstream end, after the last flush(): meters and returns the held incomplete tail as-is, or null
   * (none, or the usage-only chunk to drop). Call once, last.
   */
  end(): Buffer | null;
  /** Latest valid usage object seen (cumulative: the latest wins); null when none. */
  readonly usage: Usage | null;
  /** True once `data: [DONE]` was seen (as a stream's last event, which is where it is). */
  readonly sawDone: boolean;
  /** True while part of an event passed through (maxPassedEventBytes) was returned and its end has not come. */
  readonly midEvent: boolean;
  /**
   * True once a completions event was passed through (maxPassedEventBytes): its text (vLLM's echo of the
   * prompt, then the first token) was relayed but not read, so completionText() lacks it. Without usage
   * such a stream is billed the output it was held for (relay.ts `uncounted`), never the echoed prompt
   * as completion.
   */
  readonly unreadText: boolean;
  /**
   * Generated text (delta content, reasoning, refusal, tool-call arguments) produced AFTER the latest
   * usage object, or since the start when there was none. Usage is authoritative, so the text it covers
   * is released (or never scanned) when it arrives: bill `usage + count(completionText())`, which is
   * just `usage` in a normal stream (usage is the last event). Decoding happens here, on demand.
   */
  completionText(): string;
  /**
   * Raw text bytes after the latest usage beyond maxTextBytes, counted but not retained: relayed text
   * completionText() leaves out (billed as an upper bound, meter/bill.ts).
   */
  readonly droppedTextBytes: number;
}

const EMPTY = Buffer.alloc(0);

/** How many of a turn's last events with data are looked at for the usage chunk (it is normally the last one). */
const LOOK_BACK = 2;

/**
 * A segment that is a piece of an event passed through (maxPassedEventBytes) has `-(1 | flags)` where
 * other segments have the byte before them (LF or 0): PASSED_START on its first piece, PASSED_END on
 * the piece its blank line ends.
 */
const PASSED_START = 2;
const PASSED_END = 4;

class Scanner implements SseMeter {
  usage: Usage | null = null;
  sawDone = false;
  unreadText = false;
  private readonly drop: boolean;
  private readonly severalChoices: boolean;
  private readonly format: ApiFormat;
  private readonly max: number;
  private readonly text: TextCollector;
  /** Copies of the bytes of the incomplete event, oldest first; copied so upstream chunks can be freed. */
  private pending: Buffer[] = [];
  private pendingLen = 0;
  /** The byte before the incomplete event: LF (an event's end), or 0 at the stream's start. */
  private pendingPre = 0;
  /** The last two bytes seen (0 = none), to spot a blank line whose LF starts the next chunk. */
  private last1 = 0;
  private last2 = 0;
  private ended = false;
  /**
   * This turn's complete events, in order, as segments: runs of whole events, each in one buffer (a
   * chunk, or an event joined from held bytes). Per segment: its buffer, and in `turnRanges` its start,
   * end and the byte before it (LF, or 0 at the stream's start: see endsEvent). The events inside a
   * segment are only told apart when needed (flush), so a burst of events costs one search per chunk.
   */
  private readonly turnBufs: Buffer[] = [];
  private readonly turnRanges: number[] = [];
  /** Segments in this turn (the arrays are reused: resetting an array's length is a runtime call). */
  private turnCount = 0;
  /** Events of this turn not to forward (usage-only chunks the client did not ask for), as segment, start, end; rarely more than one. */
  private readonly dropped: number[] = [];
  private droppedCount = 0;
  /** Scratch for eventData: where the current event's data is. */
  private readonly data = dataRange();
  /** Key search over the buffer being scanned, shared by its events; released after each flush. */
  private readonly keys: KeyFinder;
  /** Usage key search, likewise. */
  private readonly usageKeys = new UsageFinder();
  /** maxPassedEventBytes, or 0 (events past `max` throw). */
  private readonly passMax: number;
  /** Bytes so far of the event being passed through (add's side), or -1 when none is. */
  private passed = -1;
  /** Segments of this turn that are pieces of passed events: such a turn is metered front to back. */
  private passedPieces = 0;
  /** The meter of the passed event flush() is reading (flush's side), or null. */
  private large: LargeEventScanner | null = null;

  constructor(opts: SseMeterOptions) {
    const max = opts.maxPendingBytes ?? 1024 * 1024;
    if (!Number.isSafeInteger(max) || max < 1) throw new RangeError(`maxPendingBytes must be a positive integer, got ${max}`);
    this.drop = opts.dropUsageOnlyChunk;
    this.severalChoices = opts.severalChoices === true;
    this.format = opts.format ?? CHAT;
    this.keys = new KeyFinder(this.format.candidate);
    this.max = max;
    const passMax = opts.maxPassedEventBytes ?? 0;
    if (!Number.isSafeInteger(passMax) || passMax < 0)
      throw new RangeError(`maxPassedEventBytes must be a non-negative integer, got ${passMax}`);
    this.passMax = passMax === 0 ? 0 : Math.max(passMax, max);
    this.text = new TextCollector(opts.maxTextBytes === undefined ? {} : { maxBytes: opts.maxTextBytes });
  }

  get midEvent(): boolean {
    return this.passed >= 0;
  }

  get droppedTextBytes(): number {
    return this.text.overflowBytes;
  }

  completionText(): string {
    return this.text.text();
  }

  push(chunk: Buffer): SseOutput | null {
    this.add(chunk);
    return this.flush();
  }

  add(chunk: Buffer): void {
    if (this.ended) throw new Error('SseMeter.add() after end()');
    const len = chunk.length;
    if (len === 0) return;
    let from = 0; // start in `chunk` of the bytes not yet in a recorded event
    // The byte before `from`: with nothing held, the previous chunk ended an event (LF) or there was none (0).
    let pre = this.last1;
    if (this.passed >= 0) {
      // Inside an event passed through: its bytes go out as they come, up to its end.
      const end = this.firstEnd(chunk);
      this.pass(chunk, 0, end === -1 ? len : end, end === -1 ? 0 : PASSED_END);
      if (end === -1) {
        this.track(chunk);
        return;
      }
      this.passed = -1;
      from = end;
      pre = LF;
    } else if (this.pendingLen > 0) {
      // The held event ends at this chunk's first event end: joined once, at completion.
      const end = this.firstEnd(chunk);
      if (end === -1) {
        this.hold(chunk, 0, pre);
        this.track(chunk);
        return;
      }
      const size = this.pendingLen + end;
      if (size > this.max) {
        this.passHeld();
        this.pass(chunk, 0, end, PASSED_END);
        this.passed = -1;
      } else {
        this.pending.push(chunk.subarray(0, end));
        const ev = Buffer.concat(this.pending, size);
        this.pending = [];
        this.pendingLen = 0;
        this.record(ev, 0, size, this.pendingPre);
      }
      from = end;
      pre = LF;
    }
    // The rest of the chunk's whole events, as one segment: found by the last event end alone.
    const end = lastEnd(chunk, from, pre);
    if (end > from) {
      // Only a segment longer than the limit can hold an event that is: then each is measured.
      if (end - from > this.max) this.recordSized(chunk, from, end, pre);
      else this.record(chunk, from, end, pre);
    }
    if (end < len) this.hold(chunk, end, end > 0 ? LF : pre);
    this.track(chunk);
  }

  flush(): SseOutput | null {
    const n = this.turnCount;
    if (n === 0) return null;
    if (this.passedPieces > 0) return this.flushInOrder(n);
    const bufs = this.turnBufs;
    const ranges = this.turnRanges;
    if (n === 1) {
      const buf = bufs[0]!;
      const start = ranges[0]!;
      const end = ranges[1]!;
      if (eventEnd(buf, start, start, ranges[2]!, end) === end) {
        // A token-paced stream: one event a turn, forwarded unless it is the usage-only chunk to drop.
        bufs[0] = EMPTY;
        this.turnCount = 0;
        const keep = this.meter(buf, start, end);
        this.keys.release();
        return keep ? run(buf, start, end) : null;
      }
    }
    // The usage chunk is a stream's last event with data before [DONE]: look for it among the turn's
    // last LOOK_BACK events with data, from the end.
    let last = -1; // segment of the usage event, which is at [usageStart, usageEnd) there
    let usageStart = 0;
    let usageEnd = 0;
    let keepLast = true;
    let looked = 0;
    for (let i = n - 1; i >= 0 && looked < LOOK_BACK && last === -1; i--) {
      const buf = bufs[i]!;
      const s = ranges[3 * i]!;
      const pre = ranges[3 * i + 2]!;
      for (let e = ranges[3 * i + 1]!; e > s && looked < LOOK_BACK;) {
        const start = eventStart(buf, e, s, pre);
        const keep = this.usageEvent(buf, start, e);
        if (keep !== null) {
          last = i;
          usageStart = start;
          usageEnd = e;
          keepLast = keep;
          break;
        }
        if (this.data.end > this.data.start) looked++; // an event with data that had no usage
        e = start;
      }
    }
    if (last === -1) {
      // No usage at the turn's end: every event metered front to back, text and usage in one pass each.
      for (let i = 0; i < n; i++) {
        const buf = bufs[i]!;
        const s = ranges[3 * i]!;
        const e = ranges[3 * i + 1]!;
        const pre = ranges[3 * i + 2]!;
        for (let start = s; start < e;) {
          const end = eventEnd(buf, start, s, pre, e);
          if (!this.meter(buf, start, end)) this.drops(i, start, end);
          start = end;
        }
      }
    } else {
      // The events before it are not looked at: their text is covered, and none of them is the
      // usage-only chunk to drop, which a stream sends once, last before [DONE] (OpenAI: "an
      // additional chunk will be streamed before the data: [DONE] message").
      if (!keepLast) this.drops(last, usageStart, usageEnd);
      for (let i = last; i < n; i++) {
        const buf = bufs[i]!;
        const s = ranges[3 * i]!;
        const e = ranges[3 * i + 1]!;
        const pre = ranges[3 * i + 2]!;
        for (let start = i === last ? usageEnd : s; start < e;) {
          const end = eventEnd(buf, start, s, pre, e);
          this.scanText(buf, start, end);
          start = end;
        }
      }
    }
    this.keys.release(); // the buffers are the upstream's: their copy must not outlive this call
    this.usageKeys.release();
    const out = this.output();
    for (let i = 0; i < n; i++) bufs[i] = EMPTY; // let go of the upstream's chunks
    this.turnCount = 0;
    this.droppedCount = 0;
    return out;
  }

  end(): Buffer | null {
    if (this.ended) return null;
    if (this.turnCount > 0) throw new Error('SseMeter.end() before flush()');
    this.ended = true;
    // A passed event the stream ended in: its usage counts if its data's JSON was whole.
    if (this.large !== null) this.endLarge();
    if (this.pendingLen === 0) return null;
    const tail = Buffer.concat(this.pending, this.pendingLen);
    this.pending = [];
    this.pendingLen = 0;
    // Metered (an upstream may omit the final blank line after usage or [DONE]) and forwarded as-is,
    // unless it is the usage-only chunk the client did not ask for (the last event of a stream without [DONE]).
    const keep = this.meter(tail, 0, tail.length);
    this.keys.release();
    return keep ? tail : null;
  }

  /**
   * flush() for a turn with pieces of passed events: every event metered front to back, as a turn
   * without usage at its end is, and each piece read by the passed event's meter in its place, so a
   * usage it carries covers exactly the text before it.
   */
  private flushInOrder(n: number): SseOutput | null {
    const bufs = this.turnBufs;
    const ranges = this.turnRanges;
    for (let i = 0; i < n; i++) {
      const buf = bufs[i]!;
      const s = ranges[3 * i]!;
      const e = ranges[3 * i + 1]!;
      const pre = ranges[3 * i + 2]!;
      if (pre < 0) {
        const flags = -pre;
        if ((flags & PASSED_START) !== 0) {
          const chunk = this.format.name !== 'responses';
          this.large = new LargeEventScanner(this.text, chunk);
          if (chunk) this.unreadText = true;
        }
        this.large!.feed(buf, s, e);
        if ((flags & PASSED_END) !== 0) this.endLarge();
        continue;
      }
      for (let start = s; start < e;) {
        const end = eventEnd(buf, start, s, pre, e);
        if (!this.meter(buf, start, end)) this.drops(i, start, end);
        start = end;
      }
    }
    this.keys.release();
    const out = this.output();
    for (let i = 0; i < n; i++) bufs[i] = EMPTY;
    this.turnCount = 0;
    this.droppedCount = 0;
    this.passedPieces = 0;
    return out;
  }

  /** The passed event flush() was reading is over: its usage, when whole and valid, covers the text so far. */
  private endLarge(): void {
    const json = this.large!.usage();
    // One choice's usage (several asked for) covers neither the others' text nor the answer (takeUsage).
    const partial = this.severalChoices && this.large!.hasChoices;
    this.large = null;
    if (json === null || partial) return;
    let usage: Usage | null = null;
    try {
      usage = this.format.usage(JSON.parse(json));
    } catch {
      // not JSON: no usage
    }
    if (usage === null) return;
    this.usage = usage;
    this.text.reset();
  }

  /** Records `buf[start, end)`, bytes of the event passed through, with PASSED_* `flags`; throws past maxPassedEventBytes. */
  private pass(buf: Buffer, start: number, end: number, flags: number): void {
    this.passed += end - start;
    if (this.passed > this.passMax) throw new SseEventTooLargeError(this.passMax);
    if (end > start || flags !== 0) {
      this.record(buf, start, end, -(1 | flags));
      this.passedPieces++;
    }
  }

  /** The held event outgrew the hold bound: passes it through from now on (or throws when that is off). */
  private passHeld(): void {
    if (this.passMax === 0) throw new SseEventTooLargeError(this.max);
    this.passed = 0;
    const held = this.pending;
    this.pending = [];
    this.pendingLen = 0;
    for (let i = 0; i < held.length; i++) this.pass(held[i]!, 0, held[i]!.length, i === 0 ? PASSED_START : 0);
  }

  /** The turn's segments minus the dropped events, as runs of adjacent bytes: whole chunks where possible. */
  private output(): SseOutput | null {
    const bufs = this.turnBufs;
    const ranges = this.turnRanges;
    const dropped = this.dropped;
    let parts: Buffer[] | null = null;
    let runBuf: Buffer | null = null;
    let runStart = 0;
    let runEnd = 0;
    let d = 0;
    const dn = this.droppedCount;
    for (let i = 0; i < this.turnCount; i++) {
      const buf = bufs[i]!;
      let start = ranges[3 * i]!;
      const end = ranges[3 * i + 1]!;
      for (;;) {
        // The segment's bytes up to its next dropped event, or to its end.
        const dropHere = d < dn && dropped[3 * d] === i;
        const cut = dropHere ? dropped[3 * d + 1]! : end;
        if (cut > start) {
          if (buf === runBuf && start === runEnd) runEnd = cut;
          else {
            if (runBuf !== null) (parts ??= []).push(run(runBuf, runStart, runEnd));
            runBuf = buf;
            runStart = start;
            runEnd = cut;
          }
        }
        if (!dropHere) break;
        start = dropped[3 * d + 2]!;
        d++;
      }
    }
    if (runBuf === null) return parts === null ? null : parts.length === 1 ? parts[0]! : parts;
    const last = run(runBuf, runStart, runEnd);
    if (parts === null) return last;
    // Several runs go out as they are: joining them copied the whole turn (~16 KB for 64 tokens) into
    // fresh external memory per stream, which drove most major GCs.
    parts.push(last);
    return parts;
  }

  /** Records a segment of whole events, `buf[start, end)`; `pre` is the byte before it (see endsEvent). */
  private record(buf: Buffer, start: number, end: number, pre: number): void {
    const i = this.turnCount++;
    this.turnBufs[i] = buf;
    this.turnRanges[3 * i] = start;
    this.turnRanges[3 * i + 1] = end;
    this.turnRanges[3 * i + 2] = pre;
  }

  /** The event `[start, end)` of segment `i` is not forwarded. Called in the events' order. */
  private drops(i: number, start: number, end: number): void {
    const d = 3 * this.droppedCount++;
    this.dropped[d] = i;
    this.dropped[d + 1] = start;
    this.dropped[d + 2] = end;
  }

  /** Keeps a copy of `chunk[from, …)`, the start (or more) of an incomplete event; `pre` is the byte before it. */
  private hold(chunk: Buffer, from: number, pre: number): void {
    const n = chunk.length - from;
    if (this.pendingLen + n > this.max) {
      // Too large to hold: passed through from here (what was held goes first), or the stream is cut.
      const first = this.pendingLen === 0;
      this.passHeld();
      this.pass(chunk, from, chunk.length, first ? PASSED_START : 0);
      return;
    }
    if (this.pendingLen === 0) this.pendingPre = pre;
    this.pending.push(Buffer.from(chunk.subarray(from)));
    this.pendingLen += n;
  }

  /** Remembers the chunk's last two bytes (a blank line may end at the next chunk's first byte). */
  private track(chunk: Buffer): void {
    const len = chunk.length;
    this.last2 = len >= 2 ? chunk[len - 2]! : this.last1;
    this.last1 = chunk[len - 1]!;
  }

  /** End (after its LF) of the first event end in `chunk`, with the held bytes before it; -1 when none. */
  private firstEnd(chunk: Buffer): number {
    let nl = chunk.indexOf(LF);
    while (nl !== -1) {
      const p1 = nl >= 1 ? chunk[nl - 1] : this.last1;
      const p2 = nl >= 2 ? chunk[nl - 2] : nl === 1 ? this.last1 : this.last2;
      // An LF that ends an empty line (previous byte LF, or CR preceded by LF) ends the event.
      if (p1 === LF || (p1 === CR && p2 === LF)) return nl + 1;
      // Usually the next line is the blank one: check its bytes directly instead of calling indexOf.
      const b = chunk[nl + 1];
      nl = b === LF ? nl + 1 : b === CR && chunk[nl + 2] === LF ? nl + 2 : chunk.indexOf(LF, nl + 1);
    }
    return -1;
  }

  /**
   * Records the segment `buf[s, e)` of whole events, longer than the limit: an event in it larger than
   * the limit is passed through (a segment of its own) or throws when that is off.
   */
  private recordSized(buf: Buffer, s: number, e: number, pre: number): void {
    let run = s; // start of the events not recorded yet
    let runPre = pre;
    for (let start = s; start < e;) {
      const end = eventEnd(buf, start, s, pre, e);
      if (end - start > this.max) {
        if (this.passMax === 0) throw new SseEventTooLargeError(this.max);
        if (start > run) this.record(buf, run, start, runPre);
        this.passed = 0;
        this.pass(buf, start, end, PASSED_START | PASSED_END);
        this.passed = -1;
        run = end;
        runPre = LF;
      }
      start = end;
    }
    if (e > run) this.record(buf, run, e, runPre);
  }

  /**
   * Looking back from the end of a turn: when the event `buf[start, end)` carries a valid usage, records
   * it and returns whether to forward the event (false: the usage-only chunk the client did not ask
   * for); null when it has no valid usage.
   */
  private usageEvent(buf: Buffer, start: number, end: number): boolean | null {
    const d = this.data;
    if (!eventData(buf, start, end, d) || isDone(d)) {
      d.end = d.start; // not counted as looked at
      return null;
    }
    return this.usageKeys.hasObject(d.buf, d.start, d.end) ? this.takeUsage(d.buf, d.start, d.end) : null;
  }

  /** Collects the text of the event `buf[start, end)`: one that no later usage covers. */
  private scanText(buf: Buffer, start: number, end: number): void {
    const d = this.data;
    if (!eventData(buf, start, end, d)) return;
    if (isDone(d)) this.sawDone = true;
    else scanData(d.buf, d.start, d.end, this.text, this.keys);
  }

  /** Meters the event `buf[start, end)` on its own; returns false when it must not be forwarded. */
  private meter(buf: Buffer, start: number, end: number): boolean {
    const d = this.data;
    if (!eventData(buf, start, end, d)) return true;
    if (isDone(d)) {
      this.sawDone = true;
      return true;
    }
    // Text is collected first; if this event's usage proves valid, it covers that text and all before.
    if (scanData(d.buf, d.start, d.end, this.text, this.keys)) return this.takeUsage(d.buf, d.start, d.end) ?? true;
    return true;
  }

  /**
   * Parses an event's data that has a `"usage":{`: when its usage is valid, records it (the text so far
   * is covered) and returns whether to forward the event; null when there is no valid usage.
   */
  private takeUsage(buf: Buffer, start: number, end: number): boolean | null {
    let parsed: unknown;
    try {
      parsed = JSON.parse(buf.toString('utf8', start, end));
    } catch {
      return null; // not JSON: forward untouched, meter only its text
    }
    const usage = this.format.eventUsage(parsed);
    if (usage === null) return null;
    const choices = (parsed as { choices?: unknown }).choices;
    // One choice's usage (several asked for) covers neither the others' text nor the answer: not taken.
    if (this.severalChoices && Array.isArray(choices) && choices.length > 0) return null;
    this.usage = usage;
    this.text.reset();
    return !(this.drop && Array.isArray(choices) && choices.length === 0);
  }
}

/**
 * True when the LF at `p` in a segment starting at `s` ends an event: the line it ends is empty (the
 * byte before is LF, or CR preceded by LF). Bytes before `s` read as `pre`: a segment starts right
 * after an event's end (LF) or at the stream's start (0, where an LF ends no event), so `pre` is never
 * CR and one byte of it is all that can matter.
 */
function endsEvent(buf: Buffer, p: number, s: number, pre: number): boolean {
  const b1 = p > s ? buf[p - 1] : pre;
  if (b1 === LF) return true;
  return b1 === CR && (p - 1 > s ? buf[p - 2] : pre) === LF;
}

/** End (after its LF) of the last event ending in `buf[from, buf.length)`, or `from` when none does. */
function lastEnd(buf: Buffer, from: number, pre: number): number {
  let p = buf.length - 1;
  while (p >= from) {
    if (buf[p] !== LF) {
      p = buf.lastIndexOf(LF, p);
      if (p < from) break;
    }
    if (endsEvent(buf, p, from, pre)) return p + 1;
    p--;
  }
  return from;
}

/** End (after its LF) of the event starting at `start` in the segment `buf[s, e)` of whole events. */
function eventEnd(buf: Buffer, start: number, s: number, pre: number, e: number): number {
  let nl = buf.indexOf(LF, start);
  while (nl !== -1 && nl < e) {
    if (endsEvent(buf, nl, s, pre)) return nl + 1;
    // Usually the next line is the blank one: check its bytes directly instead of calling indexOf.
    const b = buf[nl + 1];
    nl = b === LF ? nl + 1 : b === CR && buf[nl + 2] === LF ? nl + 2 : buf.indexOf(LF, nl + 1);
  }
  return e; // not reached: a segment ends with an event's end
}

/** Start of the event ending at `end` in a segment starting at `s`: after the event end before it, or `s`. */
function eventStart(buf: Buffer, end: number, s: number, pre: number): number {
  let p = end - 2; // end - 1 is the event's own end
  while (p >= s) {
    if (buf[p] !== LF) {
      p = buf.lastIndexOf(LF, p);
      if (p < s) break;
    }
    if (endsEvent(buf, p, s, pre)) return p + 1;
    p--;
  }
  return s;
}

/** `buf[start, end)`: the buffer itself when that is all of it (no view to allocate). */
function run(buf: Buffer, start: number, end: number): Buffer {
  return start === 0 && end === buf.length ? buf : buf.subarray(start, end);
}

/**
 * Creates a meter for one upstream stream. Usage: `const out = meter.push(chunk);` for each upstream
 * chunk, writing `out` (one buffer or several, in order) when not null, then
 * `const tail = meter.end(); if (tail) res.write(tail);`.
 */
export function createSseMeter(opts: SseMeterOptions): SseMeter {
  return new Scanner(opts);
}
