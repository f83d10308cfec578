/**
 * An upstream answer's content coding (RFC 9110 §8.4). Tollgate asks for none (`accept-encoding:
 * identity`, headers.ts), but an upstream or a proxy in front of it may compress anyway: such an answer
 * is decoded here, with node:zlib's streaming decoders, so the client gets the upstream's content (no
 * `content-encoding`) and the meter reads and bills the same bytes as for an uncompressed answer.
 * Only an encoded answer pays for this (call.ts creates a Decoder when the header names a coding).
 *
 * Bounded: the decoder's output waits for its reader (a paused reader stops inflation once 64 KiB are
 * buffered; zlib checks that between 16 KiB output chunks), and its input for the decoder (the upstream
 * read is paused while 64 KiB wait), so a decompression bomb holds no more than a plain answer of the
 * same decoded size: the meter's limits (the SSE event bound, the JSON keep limit) apply to decoded bytes.
 * Window memory: gzip/deflate 32 KiB; brotli grows its ring buffer with the output, at most the 16 MiB
 * window of RFC 7932; zstd is refused past an 8 MiB window (RFC 9659 §3, as undici's decompress does).
 */
import { constants, createBrotliDecompress, createGunzip, createInflate, createInflateRaw, createZstdDecompress } from 'node:zlib';
import type { Transform } from 'node:stream';

/** A content coding Tollgate decodes (`x-gzip` is `gzip`, RFC 9110 §8.4.1.3). */
export type Coding = 'gzip' | 'deflate' | 'br' | 'zstd';

const CODINGS: ReadonlyMap<string, Coding> = new Map<string, Coding>([
  ['gzip', 'gzip'],
  ['x-gzip', 'gzip'],
  ['deflate', 'deflate'],
  ['br', 'br'],
  ['zstd', 'zstd'],
]);

/**
 * An answer in a coding Tollgate cannot decode (`compress`, an unknown name, or codings stacked on each
 * other): nothing of it is readable, by the client or the meter, so the upstream failed (SPEC §2a).
 */
export class UnsupportedCodingError extends Error {
  readonly code = 'UPSTREAM_CONTENT_CODING';
  constructor(value: string) {
    super(`upstream answered with content-encoding ${JSON.stringify(value)}, which the gateway cannot decode`);
    this.name = 'UnsupportedCodingError';
  }
}

/** The encoded body broke mid-way (bad data, or it ended before its coding did): the upstream broke the body. */
export class DecodingError extends Error {
  readonly code = 'UPSTREAM_DECODING';
  constructor(coding: Coding, cause: Error) {
    super(`upstream ${coding} body could not be decoded: ${cause.message}`, { cause });
    this.name = 'DecodingError';
  }
}

/**
 * The coding of a `content-encoding` value: undefined for none (absent, empty, `identity`). Throws
 * UnsupportedCodingError for a coding not in CODINGS and for two or more stacked codings (no model server
 * stacks them; one decoder keeps the bound above simple).
 */
export function contentCoding(value: string | string[] | undefined): Coding | undefined {
  if (value === undefined) return undefined;
  const raw = Array.isArray(value) ? value.join(',') : value;
  let found: Coding | undefined;
  for (const part of raw.split(',')) {
    const name = part.trim().toLowerCase();
    if (name === '' || name === 'identity') continue;
    const coding = CODINGS.get(name);
    if (coding === undefined || found !== undefined) throw new UnsupportedCodingError(raw);
    found = coding;
  }
  return found;
}

/** What a Decoder reports to its owner (call.ts). */
export interface DecoderEvents {
  /** Decoded bytes, in order. */
  data(chunk: Buffer): void;
  /** Every decoded byte was delivered. */
  end(): void;
  /** A DecodingError; nothing more is reported afterwards. */
  error(err: DecodingError): void;
  /** The decoder takes input again after write() returned false. */
  drain(): void;
}

function decoderStream(coding: Coding, head: Buffer): Transform {
  if (coding === 'gzip') return createGunzip();
  if (coding === 'br') return createBrotliDecompress();
  if (coding === 'zstd') return createZstdDecompress({ params: { [constants.ZSTD_d_windowLogMax]: 23 } });
  // `deflate` is the zlib format (RFC 9110 §8.4.1.2), but some servers send raw deflate, as browsers and
  // curl accept: a zlib header is CM 8 with a window ≤ 32 KiB and a 16-bit value divisible by 31 (RFC 1950).
  const zlibHeader = head.length >= 2 && (head[0]! & 0x0f) === 8 && head[0]! >> 4 <= 7 && (head[0]! * 256 + head[1]!) % 31 === 0;
  return zlibHeader || head.length < 2 ? createInflate() : createInflateRaw();
}

/**
 * One answer's streaming decoder. Paused until resume() (the call's sink is attached then); write()
 * returns false when the upstream read should pause until `drain`.
 */
export class Decoder {
  private readonly coding: Coding;
  private readonly on: DecoderEvents;
  private stream: Transform | undefined;
  /** Input before the stream exists: the first bytes of a `deflate` body, until two tell its format. */
  private head: Buffer | undefined;
  private inBytes = 0;
  private paused = true;
  private finished = false;

  constructor(coding: Coding, on: DecoderEvents) {
    this.coding = coding;
    this.on = on;
    if (coding !== 'deflate') this.open(EMPTY);
  }

  /** Feeds encoded bytes; false: stop feeding until `drain`. */
  write(chunk: Buffer): boolean {
    if (this.finished || chunk.length === 0) return true;
    this.inBytes += chunk.length;
    if (this.stream === undefined) {
      const head = this.head === undefined ? chunk : Buffer.concat([this.head, chunk]);
      if (head.length < 2) {
        this.head = head;
        return true;
      }
      this.head = undefined;
      return this.open(head).write(head);
    }
    return this.stream.write(chunk);
  }

  /** The encoded body ended; `end` (or `error`) follows once the rest is decoded. */
  end(): void {
    if (this.finished) return;
    // An empty body under a content-encoding header (nothing was encoded) is empty, not broken.
    if (this.inBytes === 0) {
      this.stream?.destroy();
      return this.done();
    }
    // A deflate body of one byte: too short for any format, left to the decoder to refuse.
    if (this.stream === undefined) this.open(this.head!).write(this.head!);
    this.stream!.end();
  }

  /** Stops delivering decoded bytes (the reader is full); the stream stops inflating soon after. */
  pause(): void {
    this.paused = true;
    this.stream?.pause();
  }

  /** Delivers decoded bytes again. */
  resume(): void {
    this.paused = false;
    if (!this.finished) this.stream?.resume();
  }

  /** Frees the decoder at once; nothing is reported afterwards. */
  destroy(): void {
    this.finished = true;
    this.stream?.destroy();
  }

  private open(head: Buffer): Transform {
    const s = decoderStream(this.coding, head);
    this.stream = s;
    s.pause(); // flows only while its reader takes bytes (resume)
    s.on('data', (chunk: Buffer) => {
      if (!this.finished) this.on.data(chunk);
    });
    s.on('drain', () => {
      if (!this.finished) this.on.drain();
    });
    s.once('end', () => this.done());
    s.once('error', (err: Error) => {
      if (this.finished) return;
      this.finished = true;
      s.destroy();
      this.on.error(new DecodingError(this.coding, err));
    });
    if (!this.paused) s.resume();
    return s;
  }

  private done(): void {
    if (this.finished) return;
    this.finished = true;
    this.on.end();
  }
}

const EMPTY = Buffer.alloc(0);

/** A whole encoded body, decoded off the event loop; undefined when it decodes to more than `maxBytes`. Rejects with a DecodingError. */
export function decodeWhole(coding: Coding, body: Buffer, maxBytes: number): Promise<Buffer | undefined> {
  return new Promise((resolve, reject) => {
    const parts: Buffer[] = [];
    let size = 0;
    const d: Decoder = new Decoder(coding, {
      data(chunk) {
        size += chunk.length;
        if (size <= maxBytes) return void parts.push(chunk);
        d.destroy();
        resolve(undefined);
      },
      end: () => resolve(Buffer.concat(parts, size)),
      error: reject,
      drain() {},
    });
    d.resume();
    d.write(body);
    d.end();
  });
}
