/**
 * Base58 secrets (share slugs, API keys, key ids): every character drawn uniformly from a CSPRNG.
 * The alphabet is Bitcoin's: no 0, O, I or l, so a secret read aloud or copied by hand stays unambiguous.
 */
import { randomFillSync } from 'node:crypto';

/** Bitcoin's base58 alphabet, in code order (index = digit value). */
export const BASE58_ALPHABET = '123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz';

/** Fills a buffer with random bytes; a seam so tests can feed known bytes. */
export type RandomFill = (buf: Uint8Array) => void;

// 232 = 58 × 4: each of the 58 digits has exactly 4 byte values mapping to it among 0..231, so
// `byte % 58` of an accepted byte is uniform. Plain `byte % 58` over 0..255 would give digits 0..23
// five chances in 256 and the rest four: a 25 % excess that leaks ~0.1 bit per character.
// Rejecting 232..255 throws away 24/256 ≈ 9.4 % of the bytes.
const ACCEPT_BELOW = 232;
// One 64-byte draw yields 58 ± 2.3 accepted bytes, so a 22-char slug or a 32-char key needs a second
// draw practically never (fewer than 32 of 64 accepted is > 11 standard deviations below the mean);
// one randomFillSync call per secret instead of one per character.
const BATCH = 64;

const B58_RE = /^[1-9A-HJ-NP-Za-km-z]+$/;

// Random bytes are drawn 4 KiB at a time and handed out in slices: one CSPRNG call per ~60 secrets
// instead of one per secret (randomFillSync was ~2 % of the gateway's CPU with one call per request id).
const POOL = new Uint8Array(4096);
let poolOffset = POOL.length;

const defaultFill: RandomFill = (buf) => {
  if (poolOffset + buf.length > POOL.length) {
    randomFillSync(POOL);
    poolOffset = 0;
  }
  buf.set(POOL.subarray(poolOffset, poolOffset + buf.length));
  // Wipe what was handed out, so no secret's bytes stay readable in the pool.
  POOL.fill(0, poolOffset, poolOffset + buf.length);
  poolOffset += buf.length;
};

/** n base58 characters, each uniform over the alphabet (rejection sampling, no modulo bias). */
export function randomBase58(n: number, fill: RandomFill = defaultFill): string {
  if (!Number.isSafeInteger(n) || n < 0) throw new RangeError(`randomBase58: length must be a non-negative integer, got ${n}`);
  const buf = new Uint8Array(BATCH);
  let out = '';
  while (out.length < n) {
    fill(buf);
    for (let i = 0; i < BATCH && out.length < n; i++) {
      const b = buf[i]!;
      if (b < ACCEPT_BELOW) out += BASE58_ALPHABET[b % 58]!;
    }
  }
  return out;
}

/** True when s is non-empty and every character is in the base58 alphabet. */
export function isBase58(s: string): boolean {
  return B58_RE.test(s);
}
