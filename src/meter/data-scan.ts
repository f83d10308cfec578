/**
 * Finds, in an event's JSON data and without parsing it, the string values of the keys that carry
 * generated text (handing their raw bytes to a TextCollector), and tells whether a `"usage"` key holds
 * an object (so the event must be parsed) rather than `null` (OpenAI sends that on every chunk).
 *
 * Why a regular expression over a latin1 copy of the chunk: a JS byte loop that stops at every quote
 * costs ~1.4 ns per byte on a realistic stream (a chunk event has ~30 quotes, and each is a
 * mispredicted branch plus a two-letter check), ~23 µs for a 64-token stream. V8 compiles the pattern
 * below to machine code (~0.55 ns per byte) and returns only at a key followed by a string or object
 * value, ~2 per event; with one latin1 copy per upstream chunk (~0.05 ns per byte, byte offsets
 * unchanged) the scan of that stream costs ~12 µs, and the whole meter 30 → 20–26 µs
 * (`node bench/micro/sse-scanner.bench.ts`; other approaches measured: bench/README.md).
 *
 * Why it is sound without tracking string state: inside a JSON string every quote is escaped, so
 * `"content"` with an unescaped closing quote followed by `:` can only be a key. The one way to fake it,
 * an escaped opening quote (`"x\"content":`), is rejected by checking for an escaping backslash.
 */
import type { TextCollector } from './text-slices.ts';

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_BRACE = 0x7b;
const CLOSE_BRACE = 0x7d;
const U = 0x75;
const R = 0x72;
const A = 0x61;
const UNDERSCORE = 0x5f;

/**
 * A key we look at, then the first byte of its value when that is a string or an object. Text keys:
 * `content`, `reasoning_content` (vLLM < 0.10) / `reasoning` (vLLM ≥ 0.10), `refusal`, tool-call
 * `arguments`; plus `usage`. The kind is told afterwards by the key's first letter and the value's byte.
 */
export const CHAT_CANDIDATE = /"(?:content|reasoning_content|reasoning|refusal|arguments|usage)"[ \t\n\r]*:[ \t\n\r]*["{]/g;

/**
 * Finds candidates in one buffer at a time. It keeps the buffer's latin1 copy (one byte per char, so
 * string indexes are byte offsets) and the last answer, so the events of one chunk share one copy and
 * one forward pass: a search that ran past an event's end is kept for the next event. Call `release()`
 * when the buffer may change or be freed.
 */
export class KeyFinder {
  /** The API's candidate pattern (formats.ts; chat's is CHAT_CANDIDATE): shared, lastIndex set before every (synchronous) use. */
  private readonly re: RegExp;
  private buf: Buffer | null = null;
  private str = '';
  /** Cached answer: the first candidate at or after `from` is at `at` (-1: none, -2: no answer cached),
   * the first byte of its value at `value`. */
  private from = 0;
  private at = -2;
  private value = 0;

  constructor(candidate: RegExp = CHAT_CANDIDATE) {
    this.re = candidate;
  }

  /** Index of the first candidate at or after `pos` in `buf` (its opening quote), or -1. */
  next(buf: Buffer, pos: number): number {
    if (buf !== this.buf) {
      this.buf = buf;
      this.str = buf.toString('latin1');
      this.at = -2;
    } else if (this.at !== -2 && this.from <= pos && (this.at === -1 || this.at >= pos)) {
      return this.at;
    }
    const re = this.re;
    re.lastIndex = pos;
    const m = re.exec(this.str);
    this.from = pos;
    if (m === null) this.at = -1;
    else {
      this.at = m.index;
      this.value = re.lastIndex - 1;
    }
    return this.at;
  }

  /** Index of the first byte of the value of the candidate `next()` returned last (`"` or `{`). */
  valueAt(): number {
    return this.value;
  }

  /** Forgets the buffer and its copy. */
  release(): void {
    this.buf = null;
    this.str = '';
    this.at = -2;
  }
}

/** Index of the quote closing the JSON string whose body starts at `from`, or -1 if it is not before `limit`. */
export function findStringEnd(buf: Buffer, from: number, limit = buf.length): number {
  for (let i = from; i < limit; i++) {
    const b = buf[i];
    if (b === BACKSLASH)
      i++; // skip the escaped byte (\" \\ \n \uXXXX's 'u')
    else if (b === QUOTE) return i;
  }
  return -1;
}

/**
 * The needle of UsageFinder: `"usage`, the one key every API keeps its usage under (formats.ts), without
 * its closing quote, which is checked after. Node's backward search ran faster with it than with
 * `usage"` or `"usage"` over a chunk event that has no usage (measured when this was written).
 */
const USAGE_KEY = Buffer.from('"usage', 'latin1');
const COLON = 0x3a;

function isJsonSpace(b: number | undefined): boolean {
  return b === 0x20 || b === 0x09 || b === 0x0a || b === 0x0d;
}

/**
 * Tells whether an event has a `"usage"` key holding an object, by a native `Buffer.lastIndexOf` for
 * the key alone, without the text scan: the SSE meter asks it of a turn's last events, from the end
 * (sse-scanner.ts). The search state is kept per buffer, so asking events of one buffer from its end
 * back is one backward pass over it (a search per event from its start would rescan the rest of the
 * buffer each time). Sound for the reason scanData is: a `"usage"` with both quotes unescaped and a `:`
 * after it is a key.
 */
export class UsageFinder {
  private buf: Buffer | null = null;
  /** In `buf`, the last needle at or before `limit` starts at `at` (-1: none at or before `limit`). */
  private limit = -1;
  private at = -1;

  /** True when `data[start, end)` has a `"usage"` key whose value is an object. */
  hasObject(data: Buffer, start: number, end: number): boolean {
    // Room for the closing quote after the needle.
    let i = this.last(data, end - USAGE_KEY.length - 1);
    while (i >= start) {
      const close = i + USAGE_KEY.length;
      if (data[close] === QUOTE && !(i > start && data[i - 1] === BACKSLASH && isEscaped(data, i, start))) {
        let j = close + 1;
        while (j < end && isJsonSpace(data[j])) j++;
        if (j < end && data[j] === COLON) {
          j++;
          while (j < end && isJsonSpace(data[j])) j++;
          if (j < end && data[j] === OPEN_BRACE) return true;
        }
      }
      i = this.last(data, i - 1);
    }
    return false;
  }

  /** Forgets the buffer. */
  release(): void {
    this.buf = null;
    this.limit = -1;
    this.at = -1;
  }

  /** Start of the last needle in `buf` at or before `pos`, or -1. */
  private last(buf: Buffer, pos: number): number {
    if (pos < 0) return -1;
    if (buf === this.buf && pos <= this.limit && this.at <= pos) return this.at; // none in (at, limit]
    this.buf = buf;
    this.limit = pos;
    this.at = buf.lastIndexOf(USAGE_KEY, pos);
    return this.at;
  }
}

/** True when the byte at `pos` follows an odd run of backslashes (none before `floor` count). */
function isEscaped(buf: Buffer, pos: number, floor: number): boolean {
  let n = 0;
  for (let i = pos - 1; i >= floor && buf[i] === BACKSLASH; i--) n++;
  return (n & 1) === 1;
}

/** True when the candidate key whose opening quote is at `i` is `reasoning_content` or `reasoning` (not `refusal`). */
function isReasoningKey(buf: Buffer, i: number): boolean {
  return buf[i + 1] === R && buf[i + 3] === A;
}

/** True when `buf[from, to)` has a brace: between two keys with none, both are members of one object. */
function hasBrace(buf: Buffer, from: number, to: number): boolean {
  for (let i = from; i < to; i++) if (buf[i] === OPEN_BRACE || buf[i] === CLOSE_BRACE) return true;
  return false;
}

/**
 * Reasoning sent under both `reasoning_content` and its alias `reasoning` in the same object (mlx-vlm and
 * some vLLM versions send the same text twice) is counted once: of such a pair, the longer value, the
 * first met when they are equally long. Two keys are members of one object when no brace lies between the
 * first's value and the second key (a brace inside a string in between makes them two: counted twice,
 * never less). Values are appended as they come, so the text keeps its order: when the second of a pair
 * is the longer, the first is taken back if nothing was appended after it (else both count). A value of
 * each name alone, or in different objects (choices), counts as it comes. Reset by every scan.
 */
class ReasoningPair {
  /** A reasoning value was met in this scan and is not paired yet. */
  active = false;
  /** Its closing quote, its length, whether its key is `reasoning_content`. */
  private end = 0;
  private size = 0;
  private content = false;
  /** The collector's length and overflow before and after it was appended. */
  private lenBefore = 0;
  private overBefore = 0;
  private lenAfter = 0;
  private overAfter = 0;

  /** Appends (or not) the reasoning value `buf[vStart, vEnd)` whose key's opening quote is at `key`. */
  meet(buf: Buffer, key: number, vStart: number, vEnd: number, text: TextCollector): void {
    const content = buf[key + 10] === UNDERSCORE; // `"reasoning_` (vs `"reasoning"`)
    const n = vEnd - vStart;
    if (this.active && content !== this.content && !hasBrace(buf, this.end + 1, key)) {
      this.active = false;
      if (n <= this.size) return; // the first one counts
      if (text.byteLength === this.lenAfter && text.overflowBytes === this.overAfter) text.rollback(this.lenBefore, this.overBefore);
      text.append(buf, vStart, vEnd);
      return;
    }
    this.active = true;
    this.end = vEnd;
    this.size = n;
    this.content = content;
    this.lenBefore = text.byteLength;
    this.overBefore = text.overflowBytes;
    text.append(buf, vStart, vEnd);
    this.lenAfter = text.byteLength;
    this.overAfter = text.overflowBytes;
  }
}

/** One per process: scans are synchronous and each starts by clearing it. */
const pair = new ReasoningPair();

/**
 * Scans one event's data, `data[start, end)`: appends text values to `text` and returns true when a
 * `"usage"` key has an object value. Malformed data (an unterminated string) ends the scan quietly:
 * metering never throws. Pass the same `finder` for the events of one buffer (see KeyFinder). Reasoning
 * sent under both its names in one delta is counted once (ReasoningPair).
 */
export function scanData(data: Buffer, start: number, end: number, text: TextCollector, finder = new KeyFinder()): boolean {
  let usageObject = false;
  let pos = start;
  pair.active = false;
  for (;;) {
    const i = finder.next(data, pos);
    // Past this event (kept for the next one), or cut by its end: nothing more here.
    if (i === -1 || i >= end) break;
    const v = finder.valueAt();
    if (v >= end) break;
    pos = i + 1;
    if (i > start && data[i - 1] === BACKSLASH && isEscaped(data, i, start)) continue;
    if (data[i + 1] === U) {
      if (data[v] === OPEN_BRACE) usageObject = true;
      continue;
    }
    if (data[v] !== QUOTE) continue; // a text key holding an object: not text
    const close = findStringEnd(data, v + 1, end);
    if (close === -1) break; // malformed: nothing after this is trustworthy
    if (isReasoningKey(data, i)) pair.meet(data, i, v + 1, close, text);
    else text.append(data, v + 1, close);
    pos = close + 1; // the value's bytes cannot hold a key
  }
  return usageObject;
}

/**
 * Appends to `text` the text values of a JSON body cut mid-way (an upstream that failed after its first
 * byte: it cannot be parsed), found by the format's `bodyCandidate` (formats.ts): every complete string
 * value of a text key, and the one the cut fell in up to the cut, less an escape cut in half; reasoning
 * under both its names in one message once, as scanData. Runs once, on that rare path only: one regex
 * pass, as scanData.
 */
export function scanTruncated(body: Buffer, text: TextCollector, candidate: RegExp): void {
  const finder = new KeyFinder(candidate);
  const end = body.length;
  let pos = 0;
  pair.active = false;
  for (;;) {
    const i = finder.next(body, pos);
    if (i === -1) break;
    const v = finder.valueAt();
    pos = i + 1;
    if (i > 0 && body[i - 1] === BACKSLASH && isEscaped(body, i, 0)) continue;
    if (body[i + 1] === U || body[v] !== QUOTE) continue; // usage, or a text key holding an object
    const close = findStringEnd(body, v + 1, end);
    const valueEnd = close === -1 ? cutEscape(body, v + 1, end) : close;
    if (isReasoningKey(body, i)) pair.meet(body, i, v + 1, valueEnd, text);
    else text.append(body, v + 1, valueEnd);
    if (close === -1) break;
    pos = close + 1;
  }
  finder.release();
}

/** End of `buf[start, end)` without a trailing escape the cut fell in (`\`, `\u` plus up to three hex digits). */
function cutEscape(buf: Buffer, start: number, end: number): number {
  for (let i = end - 1; i >= start && i >= end - 6; i--) {
    if (buf[i] !== BACKSLASH || isEscaped(buf, i, start)) continue;
    // An unescaped backslash in the last 6 bytes: complete only as `\uXXXX` or a two-byte escape ending before `end`.
    const complete = buf[i + 1] === U ? end - i >= 6 : end - i >= 2;
    return complete ? end : i;
  }
  return end;
}
