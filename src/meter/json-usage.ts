/**
 * Finds the top-level `usage` object of a JSON body read chunk by chunk, whatever the body's size and
 * wherever `usage` stands in it (SPEC §12: "usage is always read"). Used for non-streaming bodies too
 * large to keep whole: only the usage object's own bytes are kept (at most MAX_USAGE_BYTES).
 *
 * One pass over the bytes, tracking nesting depth and whether the scanner is inside a string (escapes
 * included), so a `"usage"` inside a message's content or a logprob token never matches: only a key
 * at depth 1 does. Cost: a byte loop (~1–2 ns a byte), only for bodies past the whole-body limit.
 */

/** A usage object larger than this is not a usage object (vLLM's with every detail is ~300 bytes). */
const MAX_USAGE_BYTES = 8 * 1024;
const QUOTE = 0x22,
  BACKSLASH = 0x5c,
  COLON = 0x3a,
  COMMA = 0x2c;
const OPEN_OBJ = 0x7b,
  CLOSE_OBJ = 0x7d,
  OPEN_ARR = 0x5b,
  CLOSE_ARR = 0x5d;
const USAGE = Buffer.from('usage');

export class JsonUsageScanner {
  private depth = 0;
  private inString = false;
  private escaped = false;
  /** Bytes of the current depth-1 string (a candidate key), up to 5 + 1. */
  private key: number[] = [];
  private keyIsUsage = false;
  /** Waiting for the value after `"usage":`. */
  private expectValue = false;
  /** Depth at which the captured usage object started, or -1. */
  private captureDepth = -1;
  private captured: Buffer[] = [];
  private capturedBytes = 0;
  private done = false;
  /** The usage value's JSON text once found (`null` if the value was not an object). */
  result: string | null = null;

  push(chunk: Buffer): void {
    if (this.done) return;
    let captureFrom = this.captureDepth >= 0 ? 0 : -1;
    for (let i = 0; i < chunk.length; i++) {
      const c = chunk[i]!;
      if (this.inString) {
        if (this.escaped) this.escaped = false;
        else if (c === BACKSLASH) this.escaped = true;
        else if (c === QUOTE) this.inString = false;
        else if (this.depth === 1 && this.captureDepth < 0 && this.key.length <= USAGE.length) this.key.push(c);
        continue;
      }
      if (this.expectValue && c > 0x20) {
        this.expectValue = false;
        if (c !== OPEN_OBJ) {
          // `"usage": null` (or anything else): no usage. A later top-level usage key may still come.
          this.keyIsUsage = false;
        } else {
          this.captureDepth = this.depth;
          captureFrom = i;
        }
      }
      if (c === QUOTE) {
        this.inString = true;
        if (this.depth === 1 && this.captureDepth < 0) this.key = [];
      } else if (c === OPEN_OBJ || c === OPEN_ARR) {
        this.depth++;
      } else if (c === CLOSE_OBJ || c === CLOSE_ARR) {
        this.depth--;
        if (this.captureDepth >= 0 && this.depth === this.captureDepth) {
          this.keep(chunk.subarray(captureFrom, i + 1));
          this.result = this.capturedBytes <= MAX_USAGE_BYTES ? Buffer.concat(this.captured).toString('utf8') : null;
          this.done = this.result !== null;
          this.captureDepth = -1;
          this.captured = [];
          this.capturedBytes = 0;
          captureFrom = -1;
          if (this.done) return;
        }
      } else if (c === COLON && this.depth === 1 && this.captureDepth < 0) {
        this.keyIsUsage = this.key.length === USAGE.length && USAGE.equals(Buffer.from(this.key));
        this.expectValue = this.keyIsUsage;
      } else if (c === COMMA && this.depth === 1) {
        this.key = [];
      }
    }
    if (captureFrom >= 0 && this.captureDepth >= 0) this.keep(chunk.subarray(captureFrom));
  }

  private keep(part: Buffer): void {
    this.capturedBytes += part.length;
    // Past the bound the value is still scanned (to find where it ends) but no longer kept.
    if (this.capturedBytes <= MAX_USAGE_BYTES) this.captured.push(Buffer.from(part));
  }
}
