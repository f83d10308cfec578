// A gzip decompression bomb built without compressing its decoded size: full-flushed deflate blocks of
// 1 MiB of `a` each (~1 KiB on the wire), repeated — a full flush makes each block independent of the
// one before, so one block can be sent any number of times.
import { constants, crc32, deflateRawSync } from 'node:zlib';

const MIB_OF_A = Buffer.alloc(1024 * 1024, 'a');

/**
 * A gzip body that decodes to `prefix`, `mib` MiB of `a`, then `suffix` and the stream's end (a valid
 * gzip member: RFC 1952 trailer included); without a suffix it never ends.
 */
export function gzipBomb(prefix: string, mib: number, suffix?: string): Buffer {
  const flush = { finishFlush: constants.Z_FULL_FLUSH };
  const block = deflateRawSync(MIB_OF_A, flush);
  const parts = [Buffer.from([0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff]), deflateRawSync(prefix, flush), ...Array<Buffer>(mib).fill(block)];
  if (suffix === undefined) return Buffer.concat(parts);
  // The last block, then the trailer: CRC-32 and length (mod 2^32) of everything decoded.
  let crc = crc32(prefix);
  for (let i = 0; i < mib; i++) crc = crc32(MIB_OF_A, crc);
  crc = crc32(suffix, crc);
  const trailer = Buffer.alloc(8);
  trailer.writeUInt32LE(crc >>> 0, 0);
  trailer.writeUInt32LE((Buffer.byteLength(prefix) + mib * MIB_OF_A.length + Buffer.byteLength(suffix)) % 2 ** 32, 4);
  return Buffer.concat([...parts, deflateRawSync(suffix), trailer]);
}
