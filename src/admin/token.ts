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
