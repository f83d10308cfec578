/**
 * Meters one SSE event too large to hold whole (sse-scanner.ts passes it through piece by piece
 * instead): it reads the event's `data` lines as they pass and keeps only what billing needs. A
 * `/v1/responses` event: the `response.usage` object (response.completed, .incomplete, .failed:
 * formats.ts RESPONSES), at most MAX_USAGE_BYTES, and the raw bytes of a top-level `delta` string (into
 * the meter's TextCollector); everything else (the answer repeated in the `.done` events and
 * `response.completed`, a hosted image's base64) is skipped, not kept. A `/v1/completions` chunk (vLLM's
 * `echo` with `logprobs`: the prompt and an entry per prompt token in the first chunk): its top-level
 * `usage` object and whether its `choices` list has an item; its text (mostly the echoed prompt) is
 * not read (the meter reports it as unread: see SseMeter.unreadText).
 *
 * One pass, tracking JSON nesting and string state (escapes included) as json-usage.ts does, so a
 * `"usage"` inside a string never matches; string bodies are skipped with native `indexOf` for the next
 * quote and backslash (each searched once per occurrence), so a base64 image costs a few native
 * searches, not a JS loop over its bytes. Only the short strings that can be keys are looked at byte by
 * byte (their first KEY_BYTES bytes). Runs only for events past the hold bound: never on the common path.
 */
import type { TextCollector } from './text-slices.ts';

/** A usage object larger than this is not a usage object (as json-usage.ts). */
const MAX_USAGE_BYTES = 8 * 1024;
/** Bytes of a string kept to compare it with a key name (`response` is the longest: 8). */
const KEY_BYTES = 9;

const LF = 0x0a;
const SPACE = 0x20;
const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const COLON = 0x3a;
const COMMA = 0x2c;
const OPEN_OBJ = 0x7b;
const CLOSE_OBJ = 0x7d;
const OPEN_ARR = 0x5b;
const CLOSE_ARR = 0x5d;
const DATA = [0x64, 0x61, 0x74, 0x61]; // "data"

// Where the line reader is: the field name at a line's start, the optional space after `data:`, a data
// value (fed to the JSON reader), or the rest of a line that is not data.
const FIELD = 0;
const SPACE_AFTER = 1;
const VALUE = 2;
const SKIP = 3;

// What the value after the current key is for.
const NONE = 0;
const RESPONSE = 1;
const USAGE = 2;
const DELTA = 3;
const CHOICES = 4;
const FIRST_ITEM = 5;

export class LargeEventScanner {
  private line = FIELD;
  /** Bytes of `data` matched at the line's start. */
  private fieldLen = 0;
  // JSON state.
  private depth = 0;
  private opened = false;
  private inString = false;
  private escaped = false;
  /** The first KEY_BYTES bytes of the last string at a depth where keys matter, and its length. */
  private str = '';
  private strLen = 0;
  private keepStr = false;
  /** The current string is a `delta` value: its raw bytes go to `text`. */
  private textString = false;
  /** After a key's colon: what its value is for. */
  private expect = NONE;
  /** Depth of the `response` object's members (2) while inside it, else -1. */
  private responseDepth = -1;
  /** Depth at which the usage object started, while it is captured, else -1. */
  private usageDepth = -1;
  private usageParts: Buffer[] = [];
  private usageBytes = 0;
  /** The usage object's JSON text once captured whole. */
  private usageText: string | null = null;
  /** A chunk's top-level `choices` list has an item. */
  private choices = false;
  private readonly text: TextCollector;
  /** A chat-style chunk (top-level `usage` and `choices`), else a Responses event. */
  private readonly chunk: boolean;

  constructor(text: TextCollector, chunk = false) {
    this.text = text;
    this.chunk = chunk;
  }

  /** A chunk whose `choices` list had an item: its usage may be one choice's (sse-scanner.ts severalChoices). */
  get hasChoices(): boolean {
    return this.choices;
  }

  /** The usage object's JSON text, when one was captured and the data's JSON closed (a whole document, as JSON.parse would need). */
  usage(): string | null {
    return this.opened && this.depth === 0 ? this.usageText : null;
  }

  /** Reads the next bytes of the event, `buf[s, e)`. */
  feed(buf: Buffer, s: number, e: number): void {
    let i = s;
    while (i < e) {
      const line = this.line;
      if (line === VALUE || line === SKIP) {
        let nl = buf.indexOf(LF, i);
        if (nl === -1 || nl >= e) nl = e;
        if (line === VALUE) this.json(buf, i, nl);
        if (nl < e) {
          this.line = FIELD;
          this.fieldLen = 0;
        }
        i = nl + 1;
        continue;
      }
      const b = buf[i]!;
      if (line === SPACE_AFTER) {
        this.line = VALUE;
        if (b === SPACE) i++;
        continue;
      }
      // FIELD: `data` then `:`; an LF ends the line (a `data` line with no colon has an empty value).
      i++;
      if (b === LF) this.fieldLen = 0;
      else if (this.fieldLen < 4 && b === DATA[this.fieldLen]) this.fieldLen++;
      else if (this.fieldLen === 4 && b === COLON) this.line = SPACE_AFTER;
      else this.line = SKIP;
    }
  }

  /** Reads data bytes `buf[s, e)` as JSON (several data lines join with LF: JSON whitespace). */
  private json(buf: Buffer, s: number, e: number): void {
    let quote = -1; // next quote / backslash at or after i, searched once per occurrence (e: none before e)
    let slash = -1;
    let captureFrom = this.usageDepth >= 0 ? s : -1;
    for (let i = s; i < e; i++) {
      if (this.inString) {
        if (this.escaped) {
          this.escaped = false;
          if (this.textString) this.text.append(buf, i, i + 1);
          continue;
        }
        if (quote < i) quote = find(buf, QUOTE, i, e);
        if (slash < i) slash = find(buf, BACKSLASH, i, e);
        const stop = quote < slash ? quote : slash;
        if (this.keepStr) {
          for (let j = i; j < stop && this.str.length < KEY_BYTES; j++) this.str += String.fromCharCode(buf[j]!);
          this.strLen += stop - i;
        }
        if (this.textString) this.text.append(buf, i, stop);
        if (stop === e) break;
        if (stop === slash) {
          if (this.textString) this.text.append(buf, stop, stop + 1);
          this.escaped = true;
          if (this.keepStr) this.strLen += 2; // an escaped key is no key we look for
          i = stop; // the loop's i++ reads the escaped byte
          continue;
        }
        i = stop; // the closing quote
        this.inString = false;
        this.textString = false;
        continue;
      }
      const c = buf[i]!;
      if (c <= SPACE) continue;
      const expect = this.expect;
      if (expect !== NONE) {
        this.expect = NONE;
        if (expect === DELTA && c === QUOTE) {
          this.inString = true;
          this.textString = true;
          this.keepStr = false;
          continue;
        }
        if (expect === FIRST_ITEM) {
          if (c !== CLOSE_ARR) this.choices = true;
        } else if (expect === CHOICES && c === OPEN_ARR) this.expect = FIRST_ITEM;
        else if (expect === RESPONSE && c === OPEN_OBJ) this.responseDepth = this.depth + 1;
        else if (expect === USAGE && c === OPEN_OBJ) {
          this.usageDepth = this.depth;
          captureFrom = i;
        }
      }
      if (c === QUOTE) {
        this.inString = true;
        // Keys that matter are at depth 1 (`response`, `delta`; a chunk's `usage`, `choices`) and in the
        // response object (`usage`).
        this.keepStr = this.usageDepth < 0 && (this.depth === 1 || this.depth === this.responseDepth);
        if (this.keepStr) {
          this.str = '';
          this.strLen = 0;
        }
      } else if (c === OPEN_OBJ || c === OPEN_ARR) {
        this.depth++;
        this.opened = true;
      } else if (c === CLOSE_OBJ || c === CLOSE_ARR) {
        this.depth--;
        if (this.depth < this.responseDepth) this.responseDepth = -1;
        if (this.usageDepth >= 0 && this.depth === this.usageDepth) {
          this.keep(buf.subarray(captureFrom, i + 1));
          if (this.usageText === null && this.usageBytes <= MAX_USAGE_BYTES)
            this.usageText = Buffer.concat(this.usageParts).toString('utf8');
          this.usageDepth = -1;
          this.usageParts = [];
          this.usageBytes = 0;
          captureFrom = -1;
        }
      } else if (c === COLON && this.usageDepth < 0) {
        const key = this.strLen === this.str.length ? this.str : '';
        if (this.depth === 1 && this.chunk) this.expect = key === 'usage' ? USAGE : key === 'choices' ? CHOICES : NONE;
        else if (this.depth === 1) this.expect = key === 'response' ? RESPONSE : key === 'delta' ? DELTA : NONE;
        else if (this.depth === this.responseDepth && key === 'usage') this.expect = USAGE;
        this.str = '';
      } else if (c === COMMA) {
        this.str = '';
      }
    }
    if (captureFrom >= 0 && this.usageDepth >= 0) this.keep(buf.subarray(captureFrom, e));
  }

  private keep(part: Buffer): void {
    this.usageBytes += part.length;
    // Past the bound the value is still read (to find where it ends) but no longer kept.
    if (this.usageBytes <= MAX_USAGE_BYTES) this.usageParts.push(Buffer.from(part));
  }
}

/** Index of the first `byte` in `buf[from, e)`, or `e`. */
function find(buf: Buffer, byte: number, from: number, e: number): number {
  const i = buf.indexOf(byte, from);
  return i === -1 || i > e ? e : i;
}
