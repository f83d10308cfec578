/** The admin bearer token check: constant time, and `/admin/` is 404 when no token is configured (SPEC §2). */
import { createHash, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import { GatewayError } from '../http/errors.ts';

const digest = (s: string) => createHash('sha256').update(s).digest();

/** Returns a checker that throws 404 (no token configured) or 401 `invalid_admin_token`. */
export function createAdminGuard(token: string | undefined): (req: IncomingMessage) => void {
  // Comparing fixed-length digests keeps timingSafeEqual's equal-length rule from leaking the length.
  const expected = token ? digest(token) : undefined;
  return (req) => {
    if (!expected) throw new GatewayError('not_found', 'The admin API is disabled: set TOLLGATE_ADMIN_TOKEN to enable it.');
    const m = /^Bearer[ \t]+(\S+)\s*$/i.exec(req.headers.authorization ?? '');
    if (!m || !timingSafeEqual(digest(m[1]!), expected)) throw new GatewayError('invalid_admin_token', 'Missing or invalid admin token.');
  };
}
