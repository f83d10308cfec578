/**
 * Steered content codings (`encoding`): the simulator compresses its answer although the gateway asked
 * for `identity`, as an upstream behind a compressing proxy does. A JSON body is encoded whole; a stream
 * goes through a streaming encoder flushed after every event, so tokens still arrive one by one. A
 * coding the simulator cannot produce (`compress`, any other name) is only named in `content-encoding`:
 * the bytes stay plain, which no client can tell apart from real ones it cannot decode.
 */
import type { Transform } from 'node:stream';
import type { Zlib } from 'node:zlib';
import {
  brotliCompressSync,
  createBrotliCompress,
  createDeflate,
  createGzip,
  createZstdCompress,
  deflateSync,
  gzipSync,
  zstdCompressSync,
} from 'node:zlib';

/** The codings the simulator really applies (`x-gzip` is gzip's other name). */
export const SIM_CODINGS: readonly string[] = ['gzip', 'x-gzip', 'deflate', 'br', 'zstd'];

/** Bytes that no decoder of SIM_CODINGS accepts after a flushed block (a steered `corrupt_after`). */
export const GARBAGE = Buffer.alloc(16, 0xff);

/** The whole body in `coding`; plain bytes for a coding the simulator only names. */
export function encodeWhole(coding: string, payload: string): Buffer {
  if (coding === 'gzip' || coding === 'x-gzip') return gzipSync(payload);
  if (coding === 'deflate') return deflateSync(payload);
  if (coding === 'br') return brotliCompressSync(payload);
  if (coding === 'zstd') return zstdCompressSync(payload);
  return Buffer.from(payload);
}

/** A streaming encoder: a zlib stream, whose flush() hands over what was written so far. */
export type SimEncoder = Transform & Pick<Zlib, 'flush'>;

/** A streaming encoder for `coding`; undefined for a coding the simulator only names. */
export function createEncoder(coding: string): SimEncoder | undefined {
  if (coding === 'gzip' || coding === 'x-gzip') return createGzip();
  if (coding === 'deflate') return createDeflate();
  if (coding === 'br') return createBrotliCompress();
  if (coding === 'zstd') return createZstdCompress();
  return undefined;
}
