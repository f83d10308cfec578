/**
 * The console's route table (SPEC §9), served on the public listener under /console/ by its own edge
 * (setup.ts: CSRF check before routing, security headers, HTML errors): sign-in, home, sign-out and
 * assets here; the account pages in account-routes.ts.
 */
import type { RequestContext } from '../http/context.ts';
import { GatewayError } from '../http/errors.ts';
import type { Route } from '../http/router.ts';
import { query } from '../http/validate.ts';
import type { FailureWindow } from '../auth/failure-window.ts';
import type { ClientAddress } from '../http/client-address.ts';
import { accountPath, messagePage, sendHtml } from './layout.ts';
import { createAccess, redirect, signedOut } from './access.ts';
import { accountRoutes, type AccountRouteDeps } from './account-routes.ts';

export interface ConsoleRouteDeps extends Omit<AccountRouteDeps, 'signedIn'> {
  /** Failed sign-ins per client address (auth.failed_per_minute): a flood of made-up tokens is refused before the store. */
  failedLogins: FailureWindow;
  clientAddress: ClientAddress;
}

export function consoleRoutes(d: ConsoleRouteDeps): Route[] {
  const { assets } = d;
  async function login(ctx: RequestContext) {
    const address = d.clientAddress(ctx.req);
    const wait = d.failedLogins.blockedFor(address);
    if (wait > 0) {
      const s = Math.max(1, Math.ceil(wait / 1000));
      throw new GatewayError('rate_limit_exceeded', `Too many failed sign-ins from this address; retry in ${s}s.`, {
        headers: { 'retry-after': String(s) },
      });
    }
    const token = query(ctx.req.url!).token;
    const r = await d.sessions.signIn(typeof token === 'string' ? token : undefined);
    if (!r) {
      d.failedLogins.fail(address);
      return sendHtml(
        ctx.res,
        401,
        messagePage(
          assets,
          'This sign-in link does not work',
          'It was already used, has expired, or was never valid. Sign-in links work once and expire (after five minutes unless whoever made it chose longer): open the console again from your platform, or ask an operator, to get a new one.',
        ),
      );
    }
    ctx.log.console_account = r.session.account ?? 'operator';
    // The redirect takes the token out of the address bar and history; no-referrer keeps it out of Referer.
    redirect(ctx, '/console/', d.sessions.cookie(r.sid));
  }

  async function home(ctx: RequestContext) {
    const viewer = await d.sessions.viewer(ctx.req);
    if (!viewer) return signedOut(ctx, assets);
    redirect(ctx, viewer.account === null ? '/console/accounts' : accountPath(viewer.account, '/keys'));
  }

  async function logout(ctx: RequestContext) {
    ctx.req.resume();
    const viewer = await d.sessions.viewer(ctx.req);
    if (viewer) await d.sessions.signOut(viewer);
    ctx.res.setHeader('set-cookie', d.sessions.clearCookie());
    sendHtml(ctx.res, 200, messagePage(assets, 'Signed out', 'You have signed out of the console. You can close this tab.'));
  }

  return [
    { method: 'GET', pattern: '/console', handler: async (ctx) => redirect(ctx, '/console/') },
    { method: 'GET', pattern: '/console/', handler: home },
    { method: 'GET', pattern: '/console/login', handler: login },
    { method: 'POST', pattern: '/console/logout', handler: logout },
    { method: 'GET', pattern: '/console/assets/{file}', handler: (ctx) => assets.serve(ctx) },
    { method: 'GET', pattern: '/favicon.ico', handler: (ctx) => assets.favicon(ctx) },
    ...accountRoutes({ ...d, signedIn: createAccess({ sessions: d.sessions, assets, gate: d.gate, forms: d.forms }) }),
  ];
}
