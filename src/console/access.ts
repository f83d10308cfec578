/**
 * Who may see a console page (SPEC §9): every page needs a session; a member's session reaches only
 * its own account, and any other account, or an operator page, answers 404 like an id that does not
 * exist. Also the small response helpers every console route shares.
 */
import type { RequestContext } from '../http/context.ts';
import { GatewayError } from '../http/errors.ts';
import { accountParam } from '../admin/accounts.ts';
import { messagePage, sendHtml } from './layout.ts';
import type { Assets } from './assets.ts';
import type { ConsoleSessions, Viewer } from './sessions.ts';
import type { AccountGate } from '../limits/account-gate.ts';
import type { ProcessBodyBudget } from '../limits/body-budget.ts';
import { readForm } from './forms.ts';

/**
 * A handler for a signed-in viewer; `account` is the checked `{account}` parameter ('' when the route has
 * none); `form` is the posted form when the route was wrapped with `{ form: true }`.
 */
export type ViewerHandler = (ctx: RequestContext, viewer: Viewer, account: string, form: URLSearchParams) => Promise<void>;

export const isHtmx = (ctx: RequestContext) => ctx.req.headers['hx-request'] === 'true';

/** 303 See Other: after a form post, and for the sign-in link (which drops the token from the address). */
export function redirect(ctx: RequestContext, location: string, cookie?: string): void {
  ctx.res.statusCode = 303;
  ctx.res.setHeader('location', location);
  if (cookie) ctx.res.setHeader('set-cookie', cookie);
  ctx.res.end();
}

export function notFound(what: string): GatewayError {
  return new GatewayError('not_found', `No such ${what}.`);
}

/** The 401 page for a request without a live session. */
export function signedOut(ctx: RequestContext, assets: Assets): void {
  sendHtml(
    ctx.res,
    401,
    messagePage(
      assets,
      'You are signed out',
      'Your console session has ended or was never started. Open the console again from your platform (or ask an operator for a sign-in link).',
    ),
  );
}

/**
 * Wraps a handler: the signed-out page without a session; 404 for a member on an operator page or on
 * another account's `{account}`; otherwise the handler, with the viewer and the account. A member's
 * handler runs through the account's gate (setup.ts: one at a time, sixteen waiting, then 429), so one
 * tenant's requests take turns with each other instead of with every other tenant's; operators are the
 * platform's own staff and pass. `form`: the form is read first, under the body budget of the viewer's
 * account (an operator's under one of its own), and only then does the request wait for its turn, so a
 * form still arriving holds none. `ungated`: the handler gates its own work (the ledger download, a
 * page of entries at a time, so a slow reader holds no turn while its socket drains).
 */
export function createAccess(d: { sessions: ConsoleSessions; assets: Assets; gate: AccountGate; forms: ProcessBodyBudget }) {
  return function signedIn(fn: ViewerHandler, opts: { operator?: boolean; ungated?: boolean; form?: boolean } = {}) {
    return async (ctx: RequestContext) => {
      const viewer = await d.sessions.viewer(ctx.req);
      if (!viewer) return signedOut(ctx, d.assets);
      ctx.log.console_account = viewer.account ?? 'operator';
      if (opts.operator && viewer.account !== null) throw notFound('page');
      let account = '';
      if (ctx.params.account !== undefined) {
        try {
          account = accountParam(ctx, 'account');
        } catch {
          throw notFound('account');
        }
        if (viewer.account !== null && viewer.account !== account) throw notFound('account');
      }
      // An operator session has no account: its forms count under a name no account can have ('' is refused).
      const form = opts.form ? await readForm(ctx.req, d.forms.forKey(viewer.account ?? '')) : new URLSearchParams();
      if (viewer.account === null || opts.ungated) await fn(ctx, viewer, account, form);
      // A request whose client left while it waited its turn is not worked on (a reload pressed again and again).
      else await d.gate.run(viewer.account, async () => (ctx.res.destroyed ? undefined : fn(ctx, viewer, account, form)));
    };
  };
}

export type SignedIn = ReturnType<typeof createAccess>;
