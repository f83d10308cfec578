/**
 * What the edge checks before a route's handler runs, declared on the route (router.ts) instead of
 * pasted into each handler (SPEC §2a order: route → credentials → scope → limits):
 *
 * - `auth: scope`: authenticate the bearer key, check the scope, take a per-key concurrency slot
 *   (SPEC §12) and admit the request against the key's rate limits, once.
 * - `auth` + `meteredAdmit`: the same, except that the handler admits itself through `ctx.admit` with
 *   its token estimate once it has read the body (one limiter round trip for both dimensions). When it
 *   fails before that (bad body, unknown model), the gate admits the request without tokens: every
 *   authenticated request counts against the request limit, refused ones too, and past the limit the
 *   429 wins (SPEC §2a).
 * - `admin: true`: the admin token (admin/token.ts).
 */
import type { Authenticator } from '../auth/authenticate.ts';
import { requireScope } from '../auth/authenticate.ts';
import type { Concurrency } from '../limits/concurrency.ts';
import type { Limits } from '../limits/limits.ts';
import type { RequestContext } from './context.ts';
import { GatewayError } from './errors.ts';
import type { Route } from './router.ts';

/** Runs a matched route's handler behind the checks it declares. */
export type Gate = (route: Route, ctx: RequestContext) => Promise<void>;

export interface GateDeps {
  auth?: Authenticator;
  limits?: Limits;
  concurrency?: Concurrency;
  /** Throws unless the request carries the admin token. */
  adminGuard?: (ctx: RequestContext) => void;
}

export function createGate(d: GateDeps): Gate {
  async function keyed(route: Route, scope: NonNullable<Route['auth']>, ctx: RequestContext): Promise<void> {
    if (!d.auth || !d.limits || !d.concurrency) throw new Error(`route ${route.pattern} needs key auth but the gate has none`);
    const limits = d.limits;
    const key = (ctx.key = await d.auth.authenticate(ctx.req));
    let admitted = false;
    const admit = (estimatedTokens?: number) => {
      admitted = true;
      return limits.admit(ctx, estimatedTokens);
    };
    try {
      if (scope !== 'any') requireScope(key, scope);
      d.concurrency.enter(key.id, ctx.res);
      if (!route.meteredAdmit) await admit();
      else ctx.admit = admit;
      await route.handler(ctx);
    } catch (err) {
      if (!admitted) await admit();
      throw err;
    }
  }

  return (route, ctx) => {
    if (route.auth !== undefined) return keyed(route, route.auth, ctx);
    if (route.admin) {
      if (!d.adminGuard) return Promise.reject(new Error(`route ${route.pattern} needs the admin token but the gate has no guard`));
      try {
        d.adminGuard(ctx);
      } catch (err) {
        return Promise.reject(err);
      }
    }
    return route.handler(ctx);
  };
}

/** The gate of a listener with no authenticated routes (the metrics listener, tests of the edge alone). */
export const openGate: Gate = (route, ctx) => {
  if (route.auth !== undefined || route.admin) {
    return Promise.reject(new GatewayError('internal_error', `Route ${route.pattern} needs credentials this listener cannot check.`));
  }
  return route.handler(ctx);
};
