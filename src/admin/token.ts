/**
 * The admin bearer token check (SPEC §2, §12): constant time, `/admin/` is 404 when no token is
 * configured, and failed attempts are limited per client address (auth.admin_failed_per_minute):
 * past the limit every request from that address is refused with 429 before the token is compared,
 * so a brute force gets `admin_failed_per_minute` guesses a minute per address, even with the right
 * token among them. The token itself is at least 32 characters (config compile refuses less).
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import { GatewayError } from '../http/errors.ts';
import type { ClientAddress } from '../http/client-address.ts';
import type { FailureWindow } from '../auth/failure-window.ts';

const digest = (s: string) => createHash('sha256').update(s).digest();

/** Returns a checker that throws 404 (no token configured), 429 (too many failures) or 401 `invalid_admin_token`. */
export function createAdminGuard(
  token: string | undefined,
  limit?: { failures: FailureWindow; clientAddress: ClientAddress },
): (req: IncomingMessage) => void {
  // Comparing fixed-length digests keeps timingSafeEqual's equal-length rule from leaking the length.
  const expected = token ? digest(token) : undefined;
  return (req) => {
    if (!expected) throw new GatewayError('not_found', 'The admin API is disabled: set TOLLGATE_ADMIN_TOKEN to enable it.');
    const address = limit?.clientAddress(req);
    const wait = address === undefined ? 0 : limit!.failures.blockedFor(address);
    if (wait > 0) throw throttled(wait);
    const m = /^Bearer[ \t]+(\S+)\s*$/i.exec(req.headers.authorization ?? '');
    if (!m || !timingSafeEqual(digest(m[1]!), expected)) {
      const now = address === undefined ? 0 : limit!.failures.fail(address);
      if (now > 0) throw throttled(now);
      throw new GatewayError('invalid_admin_token', 'Missing or invalid admin token.');
    }
  };
}

function throttled(ms: number): GatewayError {
  const s = Math.max(1, Math.ceil(ms / 1000));
  return new GatewayError('rate_limit_exceeded', `Too many failed admin authentications from this address; retry in ${s}s.`, {
    headers: { 'retry-after': String(s), 'retry-after-ms': String(Math.ceil(ms)) },
  });
}

/** The least estimated strength of an admin token (bits), and its least length (SPEC §12). */
export const MIN_ADMIN_TOKEN_BITS = 128;
export const MIN_ADMIN_TOKEN_LENGTH = 32;

/** Fragments of a placeholder someone forgot to replace (the shipped Kubernetes Secret once held one). */
const PLACEHOLDER = /replace|change-?me|placeholder|example|openssl|<|>|\$\{/i;

/**
 * Why an admin token is too weak to boot with, or undefined when it is strong enough (issue 27: the
 * shipped placeholder and 36 × `a` were accepted). Never echoes the token. The rule, a character-class
 * estimate: the alphabet is the sum of the classes the token uses (lower 26, upper 26, digits 10, other
 * 33; a token of hex digits only is 16); a character adds log2(alphabet) bits unless it repeats the one
 * before, is one step from it (`aaaa`, `abcd`, `1234`) or repeats the one two back (`abab`); the total
 * must reach 128 bits. `openssl rand -base64 32` scores ~270, `openssl rand -hex 32` ~210;
 * `openssl rand -hex 16` (exactly 128 random bits) scores ~105 and is refused: the estimate cannot tell
 * it from a typed string, so it asks for the recommended command instead.
 */
export function adminTokenWeakness(token: string): string | undefined {
  const fix = 'generate one with: openssl rand -base64 32';
  if (token.length < MIN_ADMIN_TOKEN_LENGTH) return `must be at least ${MIN_ADMIN_TOKEN_LENGTH} characters (got ${token.length}); ${fix}`;
  if (PLACEHOLDER.test(token)) return `looks like a placeholder, not a secret; ${fix}`;
  const bits = adminTokenBits(token);
  if (bits < MIN_ADMIN_TOKEN_BITS)
    return `is too predictable: about ${Math.floor(bits)} bits by Tollgate's estimate, at least ${MIN_ADMIN_TOKEN_BITS} needed (repeats, runs like abcd or 1234 and few character classes count little); ${fix}`;
  return undefined;
}

/** The character-class estimate adminTokenWeakness describes, in bits. */
export function adminTokenBits(token: string): number {
  const hex = /^[0-9a-f]+$/.test(token) || /^[0-9A-F]+$/.test(token);
  const alphabet = hex
    ? 16
    : (/[a-z]/.test(token) ? 26 : 0) +
      (/[A-Z]/.test(token) ? 26 : 0) +
      (/[0-9]/.test(token) ? 10 : 0) +
      (/[^a-zA-Z0-9]/.test(token) ? 33 : 0);
  let counted = 0;
  for (let i = 0; i < token.length; i++) {
    const c = token.charCodeAt(i);
    const prev = i > 0 ? token.charCodeAt(i - 1) : undefined;
    const prev2 = i > 1 ? token.charCodeAt(i - 2) : undefined;
    if (prev !== undefined && Math.abs(c - prev) <= 1) continue;
    if (prev2 === c) continue;
    counted++;
  }
  return counted * Math.log2(Math.max(alphabet, 1));
}
