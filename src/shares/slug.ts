/**
 * Share slugs (SPEC §1.4): the slug is the only capability to read a share, so it must be unguessable.
 * 22 characters × log2(58) ≈ 5.858 bits = 128.9 bits. A fixed length (not base58 of 16 random bytes,
 * which yields 21 or 22 characters) keeps the path validator simple and every slug equally strong.
 */
import { BASE58_ALPHABET, randomBase58, type RandomFill } from '../http/base58.ts';

export { BASE58_ALPHABET };

/** Length of every slug, in characters. */
export const SLUG_LENGTH = 22;

/** A fresh slug: 22 characters, each uniform over the base58 alphabet, from the CSPRNG. */
export function newSlug(fill?: RandomFill): string {
  return fill ? randomBase58(SLUG_LENGTH, fill) : randomBase58(SLUG_LENGTH);
}
