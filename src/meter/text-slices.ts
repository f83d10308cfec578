/**
 * Completion text for the tokenizer fallback, kept as raw JSON string bodies (still escaped) in one
 * growable buffer. Raw bodies of JSON strings concatenate into a valid JSON string body (an escape never
 * spans a closing quote), so decoding is a single JSON.parse, done only if someone asks for the text
 * (usage absent). Copies are taken so the upstream's chunks can be freed.
 */

export interface TextCollectorOptions {
  /** Cap on retained raw bytes; 8 MiB of JSON text is ~2 M tokens, beyond any model's output. */
  maxBytes?: number;
}

/** Retains the raw string bodies of generated text and decodes them on demand. */
export class TextCollector {
  private buf: Buffer | null = null;
  private len = 0;
  private decoded: string | null = '';
  private readonly maxBytes: number;
  /** Raw bytes not retained because `maxBytes` was reached (meter/bill.ts bills them as an upper bound). */
  overflowBytes = 0;

  constructor(opts: TextCollectorOptions = {}) {
    this.maxBytes = opts.maxBytes ?? 8 * 1024 * 1024;
  }

  /** Raw (escaped) bytes retained so far. */
  get byteLength(): number {
    return this.len;
  }

  /** Drops everything retained (called when an authoritative usage object arrives). */
  reset(): void {
    this.buf = null;
    this.len = 0;
    this.overflowBytes = 0;
    this.decoded = '';
  }

  /**
   * Takes back what was appended since `byteLength` was `len` and `overflowBytes` was `overflow` (the
   * caller's marks, nothing appended between them and now but what it drops: data-scan.ts ReasoningPair).
   */
  rollback(len: number, overflow: number): void {
    if (len < this.len) {
      this.len = len;
      this.decoded = null;
    }
    this.overflowBytes = overflow;
  }

  /** The decoded text retained so far; decoding happens here, at most once per change. */
  text(): string {
    if (this.decoded !== null) return this.decoded;
    const raw = this.buf === null ? '' : this.buf.toString('utf8', 0, this.len);
    try {
      this.decoded = JSON.parse(`"${raw}"`) as string;
    } catch {
      // Upstreams that put raw control characters in strings: the raw text is still a fair count.
      this.decoded = raw;
    }
    return this.decoded;
  }

  /** Retains a copy of `src[start, end)`, the raw body of one JSON string. */
  append(src: Buffer, start: number, end: number): void {
    const n = end - start;
    if (n === 0) return;
    const room = this.maxBytes - this.len;
    if (n > room) {
      this.overflowBytes += n;
      return;
    }
    if (this.buf === null || this.buf.length - this.len < n) {
      // Doubling keeps appends amortised O(1). The first 256 bytes come from Node's shared Buffer pool (an
      // allocation of its own per stream was external memory that counted towards major GCs).
      const size = Math.min(this.maxBytes, Math.max(256, (this.len + n) * 2));
      const next = Buffer.allocUnsafe(size);
      if (this.buf !== null) this.buf.copy(next, 0, 0, this.len);
      this.buf = next;
    }
    const buf = this.buf;
    // Pieces are a few bytes each (one token); a JS loop beats the ~50 ns native call of copy() for those.
    if (n < 64) for (let i = 0, o = this.len; i < n; i++) buf[o + i] = src[start + i]!;
    else src.copy(buf, this.len, start, end);
    this.len += n;
    this.decoded = null;
  }
}
