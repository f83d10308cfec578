/**
 * The console's browser-facing protections (SPEC §9): the headers every console response carries, and
 * the CSRF check that runs before routing and before the session is read. Cookies are SameSite=Strict
 * as well; the Origin check is the part that does not depend on the browser honouring that.
 */
import type { IncomingMessage } from 'node:http';
import { GatewayError } from '../http/errors.ts';

/**
 * No inline script or style anywhere (everything is served from /console/assets/), no framing, no
 * referrer (a sign-in token must never leave in one), no sniffing, and nothing cached: a page can carry
 * a key that is shown once.
 */
export const CONSOLE_HEADERS: Readonly<Record<string, string>> = Object.freeze({
  'content-security-policy':
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
    "form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
  'x-frame-options': 'DENY',
  'referrer-policy': 'no-referrer',
  'x-content-type-options': 'nosniff',
  'cache-control': 'no-store',
  'cross-origin-opener-policy': 'same-origin',
  'cross-origin-resource-policy': 'same-origin',
});

const SAFE_METHODS = new Set(['GET', 'HEAD']);

/**
 * Refuses (403 permission_denied) any request other than GET/HEAD that does not come from the console's
 * own pages: its `Origin` must be the console's origin, and `Sec-Fetch-Site` must not be `cross-site`.
 *
 * One exception, forced by SPEC §9's own `Referrer-Policy: no-referrer`: under that policy browsers send
 * `Origin: null` on a plain form post (Fetch: "serializing a request origin"), even to the same origin.
 * `null` is accepted only together with `Sec-Fetch-Site: same-origin`, a header pages cannot set. A
 * missing Origin is refused: every browser sends one on a POST, so only a non-browser client omits it.
 */
export function createCsrfGuard(
  origin: () => string,
  /** Each refusal, with the origin expected and the one received (issue 27: nothing was logged). */
  onRefused?: (r: { expected: string; received: string | undefined; sec_fetch_site: string | undefined }) => void,
): (req: IncomingMessage) => void {
  return (req) => {
    if (SAFE_METHODS.has(req.method!)) return;
    const site = req.headers['sec-fetch-site'];
    const from = req.headers.origin;
    const expected = origin();
    const own = from === expected || (from === 'null' && site === 'same-origin');
    if (site === 'cross-site' || !own) {
      // Bounded: the header is the client's, and it is echoed into the page and the log.
      const received = from === undefined ? undefined : from.slice(0, 200);
      const siteText = typeof site === 'string' ? site.slice(0, 40) : undefined;
      onRefused?.({ expected, received, sec_fetch_site: siteText });
      throw new GatewayError('permission_denied', refusal(expected, received, siteText));
    }
  };
}

/**
 * The 403's message: which origin was expected and which arrived, and what to do about it. Behind a real
 * hostname the usual cause is `console.public_url` left at its loopback default (issue 27), so the
 * message names CONSOLE_PUBLIC_URL; a true cross-site post reads the same and changes nothing.
 */
function refusal(expected: string, received: string | undefined, site: string | undefined): string {
  const rule = 'the console accepts changes only from its own pages';
  if (received === undefined) return `This request has no Origin header; ${rule} (${expected}).`;
  if (received === 'null' || received === expected)
    return `This request comes from another site (Sec-Fetch-Site: ${site ?? 'missing'}); ${rule} (${expected}).`;
  return `This request comes from another site, ${received}, but the console's origin is ${expected}; ${rule}. Open the console at ${expected}/console/, or, if ${received} is where it is served, set console.public_url (CONSOLE_PUBLIC_URL) to it.`;
}
