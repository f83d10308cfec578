/**
 * An incremental RESP2 reply reader for the script pipe: feed it socket chunks, it calls back once per
 * complete top-level reply, in order. Replies may be split anywhere across chunks; a partial reply is
 * kept (and re-read from its start when the next chunk arrives; the credit scripts' replies are well
 * under 200 bytes, so re-reading costs less than tracking partial state).
 */

/** A decoded reply: integers become numbers, bulk strings strings, nil null, errors Error values. */
export type Reply = number | string | null | Error | Reply[];

const INCOMPLETE = Symbol('incomplete');
type Step = Reply | typeof INCOMPLETE;

const CR = 13;

export class RespReader {
  #tail: Buffer | undefined;
  #pos = 0;
  /** Bumped by reset(): a feed() in progress stops handing out replies of the old connection. */
  #epoch = 0;
  readonly #onReply: (r: Reply) => void;

  constructor(onReply: (r: Reply) => void) {
    this.#onReply = onReply;
  }

  /** Bytes held back because their reply is not complete yet. */
  get pending(): number {
    return this.#tail?.length ?? 0;
  }

  /** Drops a partial reply (the connection it came from is gone). */
  reset(): void {
    this.#tail = undefined;
    this.#epoch++;
  }

  feed(chunk: Buffer): void {
    const b = this.#tail ? Buffer.concat([this.#tail, chunk]) : chunk;
    this.#tail = undefined;
    this.#pos = 0;
    const epoch = this.#epoch;
    while (this.#pos < b.length && epoch === this.#epoch) {
      const start = this.#pos;
      const r = this.#value(b);
      if (r === INCOMPLETE) {
        this.#tail = b.subarray(start);
        return;
      }
      this.#onReply(r);
    }
  }

  /** The text of the line starting after the type byte at #pos; moves past its CRLF. */
  #line(b: Buffer): string | typeof INCOMPLETE {
    const cr = b.indexOf(CR, this.#pos);
    if (cr < 0 || cr + 1 >= b.length) return INCOMPLETE;
    const s = b.toString('latin1', this.#pos + 1, cr);
    this.#pos = cr + 2;
    return s;
  }

  /**
   * The integer of the line starting after the type byte at #pos (an integer reply, a length), read from
   * its bytes: no string and no string-to-number conversion for the few digits these have (past 15 digits,
   * where summing digits in a double could round differently, the text goes through Number()).
   */
  #int(b: Buffer): number | typeof INCOMPLETE {
    const cr = b.indexOf(CR, this.#pos);
    if (cr < 0 || cr + 1 >= b.length) return INCOMPLETE;
    const start = this.#pos + 1;
    this.#pos = cr + 2;
    const negative = b[start] === 0x2d;
    let i = negative ? start + 1 : start;
    if (cr === i || cr - i > 15) return Number(b.toString('latin1', start, cr));
    let n = 0;
    for (; i < cr; i++) {
      const digit = b[i]! - 0x30;
      // Anything but digits (never sent by Redis): whatever Number() makes of the text.
      if (digit < 0 || digit > 9) return Number(b.toString('latin1', start, cr));
      n = n * 10 + digit;
    }
    return negative ? -n : n;
  }

  #value(b: Buffer): Step {
    if (this.#pos >= b.length) return INCOMPLETE;
    const type = b[this.#pos];
    if (type === 0x3a || type === 0x24 || type === 0x2a) return this.#counted(b, type);
    const line = this.#line(b);
    if (line === INCOMPLETE) return INCOMPLETE;
    switch (type) {
      case 0x2b: // '+' simple string
        return line;
      case 0x2d: // '-' error
        return new Error(line);
      default:
        throw new Error(`unexpected RESP type byte 0x${(type ?? 0).toString(16)}`);
    }
  }

  /** An integer, a bulk string or an array: a reply whose line is a number. */
  #counted(b: Buffer, type: number): Step {
    const n = this.#int(b);
    if (n === INCOMPLETE) return INCOMPLETE;
    switch (type) {
      case 0x3a: // ':' integer
        return n;
      case 0x24: {
        // '$' bulk string
        if (n < 0) return null;
        if (this.#pos + n + 2 > b.length) return INCOMPLETE;
        const s = b.toString('utf8', this.#pos, this.#pos + n);
        this.#pos += n + 2;
        return s;
      }
      default: {
        // '*' array
        if (n < 0) return null;
        const out: Reply[] = new Array(n);
        for (let i = 0; i < n; i++) {
          const v = this.#value(b);
          if (v === INCOMPLETE) return INCOMPLETE;
          out[i] = v;
        }
        return out;
      }
    }
  }
}

/** Encodes one command as a RESP array of bulk strings. Numbers must be integers. */
export function encodeCommand(args: readonly (string | number)[]): string {
  let s = `*${args.length}\r\n`;
  for (const a of args) {
    const v = typeof a === 'string' ? a : String(a);
    s += `$${Buffer.byteLength(v)}\r\n${v}\r\n`;
  }
  return s;
}
