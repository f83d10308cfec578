/**
 * Admin routes for console sign-in (SPEC §9): `POST /admin/console/sessions` mints a single-use link
 * for a member of one account or for an operator; `DELETE /admin/console/sessions?account=` ends every
 * session of an account and revokes its member links minted before. The platform's backend calls the first and redirects its signed-in user there.
 */
import { readJsonValue } from '../http/body.ts';
import type { BodyBudget } from '../limits/body-budget.ts';
import { sendJson } from '../http/respond.ts';
import { Issues, bool, forbidExtra, int, query, rootObject } from '../http/validate.ts';
import type { Route } from '../http/router.ts';
import type { RequestContext } from '../http/context.ts';
import { ACCOUNT_ID_PATTERN } from '../store/types.ts';
import { ADMIN_ERRORS, accountField } from '../admin/keys.ts';
import { LINK_TTL, type ConsoleSessions } from './sessions.ts';

export function consoleAdminRoutes(d: { sessions: ConsoleSessions; bodyBudget: BodyBudget }): Route[] {
  async function mint(ctx: RequestContext) {
    const value = await readJsonValue(ctx.req, 4096, d.bodyBudget);
    const issues = new Issues();
    if (!rootObject(value, issues)) return issues.done();
    forbidExtra(value, ['account', 'operator', 'ttl_seconds'], ['body'], issues);
    const account = accountField(value, 'account', ['body'], issues, false);
    const operator = bool(value, 'operator', ['body'], issues);
    const ttl = int(value, 'ttl_seconds', ['body'], issues, {
      ge: LINK_TTL.min,
      le: operator === true ? LINK_TTL.max : LINK_TTL.memberMax,
    });
    if ((value.account === undefined) === (operator !== true)) {
      issues.add(['body'], 'value_error', 'Value error, give exactly one of "account" and "operator": true', value);
    }
    issues.done();
    const link = await d.sessions.mintLink({ account: account ?? null }, ttl);
    ctx.log.console_link = account ?? 'operator';
    sendJson(ctx.res, 201, link);
  }

  async function end(ctx: RequestContext) {
    const issues = new Issues();
    const account = accountField(query(ctx.req.url!), 'account', ['query'], issues);
    issues.done();
    sendJson(ctx.res, 200, { account, ended: await d.sessions.endAccount(account!) });
  }

  return [
    {
      method: 'POST',
      pattern: '/admin/console/sessions',
      handler: mint,
      admin: true,
      doc: {
        auth: 'admin',
        summary: 'Mint a single-use console sign-in link for a member of an account, or for an operator',
        body: {
          type: 'object',
          additionalProperties: false,
          properties: {
            account: { type: 'string', pattern: ACCOUNT_ID_PATTERN },
            operator: { type: 'boolean', const: true },
            ttl_seconds: {
              type: 'integer',
              minimum: LINK_TTL.min,
              maximum: LINK_TTL.memberMax,
              default: LINK_TTL.fallback,
              description: `Seconds the link stays valid: up to ${LINK_TTL.memberMax} for a member link, ${LINK_TTL.max} for an operator link`,
            },
          },
        },
        responses: {
          201: {
            description: 'The link (valid once, until expires_at)',
            schema: { type: 'object', properties: { url: { type: 'string' }, expires_at: { type: 'string', format: 'date-time' } } },
          },
          ...ADMIN_ERRORS,
        },
      },
    },
    {
      method: 'DELETE',
      pattern: '/admin/console/sessions',
      handler: end,
      admin: true,
      doc: {
        auth: 'admin',
        summary: "End every console session of an account's members, and revoke their sign-in links minted before (not yet opened)",
        query: { account: { type: 'string', pattern: ACCOUNT_ID_PATTERN } },
        responses: {
          200: {
            description: 'How many sessions were ended',
            schema: { type: 'object', properties: { account: { type: 'string' }, ended: { type: 'integer' } } },
          },
          ...ADMIN_ERRORS,
        },
      },
    },
  ];
}
