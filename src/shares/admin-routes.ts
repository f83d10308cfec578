/**
 * Admin share routes (SPEC §2): `POST /admin/shares` (the public body plus `account`) and
 * `DELETE /admin/shares/{slug}` (any account's share; 404 when unknown, 204 again when already revoked).
 */
import type { RequestContext } from '../http/context.ts';
import { sendEmpty, sendJson } from '../http/respond.ts';
import type { Route } from '../http/router.ts';
import { SHARE_BODY_SCHEMA } from './routes.ts';
import { ADMIN_ERRORS } from '../admin/keys.ts';
import { readShareBody, type ShareBodyLimits } from './share-body.ts';
import type { ShareService } from './service.ts';
import type { BodyBudget } from '../limits/body-budget.ts';
import { validateSlug } from './validate.ts';

export interface ShareAdminRouteDeps {
  service: ShareService;
  limits: ShareBodyLimits;
  /** The admin listener's body budget (gateway.ts): bytes reserved as they arrive, server.body_timeout_ms. */
  bodyBudget: BodyBudget;
}

/** The admin share routes. */
export function shareAdminRoutes(d: ShareAdminRouteDeps): Route[] {
  async function create(ctx: RequestContext) {
    const body = await readShareBody(ctx.req, d.limits, true, d.bodyBudget);
    const account = body.account!;
    const created = await d.service.create(account, body);
    ctx.log.account = account;
    sendJson(ctx.res, 201, { ...created, account });
  }

  async function revoke(ctx: RequestContext) {
    await d.service.revoke(validateSlug(ctx.params.slug!), undefined);
    sendEmpty(ctx.res, 204);
  }

  return [
    {
      method: 'POST',
      pattern: '/admin/shares',
      handler: create,
      admin: true,
      doc: {
        auth: 'admin',
        summary: "Publish a share for an account (counts against the account's quota)",
        body: {
          ...SHARE_BODY_SCHEMA,
          required: ['account', 'snapshot'],
          properties: { account: { type: 'string' }, ...(SHARE_BODY_SCHEMA.properties as object) },
        },
        responses: { 201: { description: 'Created', schema: { type: 'object' } }, ...ADMIN_ERRORS, 503: 'File storage unavailable' },
      },
    },
    {
      method: 'DELETE',
      pattern: '/admin/shares/{slug}',
      handler: revoke,
      admin: true,
      doc: { auth: 'admin', summary: 'Revoke any share', responses: { 204: 'Revoked', ...ADMIN_ERRORS } },
    },
  ];
}
