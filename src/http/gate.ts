/**
 * What the edge checks before a route's handler runs, declared on the route (router.ts) instead of
 * pasted into each handler (SPEC §2a order: route → credentials → scope → limits):
 *
 * - `auth: scope`: authenticate the bearer key, check the scope, take a concurrency slot of the key and
 *   of its account (SPEC §12, §13) and admit the request against the key's and the account's rate
 *   limits, once — all before any byte of the body is read (SPEC §13 "admission before work"): a key
 *   over its limits never gets its body parsed, only drained.
 * - `auth` + `meteredAdmit`: the same, and the handler admits its tokens itself through `ctx.admit`
 *   once it has read the body and knows its estimate. Every authenticated request counts against the
 *   request limit, refused ones too, and past the limit the 429 wins (SPEC §2a).
 * - `admin: true`: the admin token (admin/token.ts).
 */
import type { Authenticator } from '../auth/authenticate.ts';
import { requireScope } from '../auth/authenticate.ts';
import type { Concurrency } from '../limits/concurrency.ts';
import type { Limits } from '../limits/limits.ts';
import type { RequestContext } from './context.ts';
import { GatewayError } from './errors.ts';
import { refuseAfterDrain } from './body.ts';
import type { Route } from './router.ts';

/** Runs a matched route's handler behind the checks it declares. */
export type Gate = (route: Route, ctx: RequestContext) => Promise<void>;

export interface GateDeps {
  auth?: Authenticator;
  limits?: Limits;
  concurrency?: Concurrency;
  /** Throws unless the request carries the admin token. */
  adminGuard?: (ctx: RequestContext) => void;
  /** How long the body of a request refused before it was read is drained (server.body_timeout_ms). */
  drainMs?: number;
}

/**
 * `ctx.admit` of a metered route: one function for every request, called as `ctx.admit(n)` (so `this` is
 * the context), where a closure per request (`ctx.admit = (n) => limits.admitTokens(ctx, n)`) kept each
 * request's gate frame reachable and made V8's young-generation collector copy ~8× the bytes per
 * request (bench/results/gateway-instructions-24-28.md, `node bench/instructions.ts --gc`).
 */
function admitTokensOf(limits: Limits): NonNullable<RequestContext['admit']> {
  return function admit(this: RequestContext, estimatedTokens = 0) {
    return limits.admitTokens(this, estimatedTokens);
  };
}

export function createGate(d: GateDeps): Gate {
  const admitTokens = d.limits && admitTokensOf(d.limits);
  async function keyed(route: Route, scope: NonNullable<Route['auth']>, ctx: RequestContext): Promise<void> {
    if (!d.auth || !d.limits || !d.concurrency) throw new Error(`route ${route.pattern} needs key auth but the gate has none`);
    const limits = d.limits;
    const key = (ctx.key = await d.auth.authenticate(ctx.req));
    let admitted = false;
    try {
      if (scope !== 'any') requireScope(key, scope);
      d.concurrency.enter(key.id, key.account, ctx.res);
      admitted = true;
      if (!route.meteredAdmit) await limits.admit(ctx);
      else {
        await limits.admitRequest(ctx);
        ctx.admit = admitTokens;
      }
    } catch (err) {
      try {
        if (!admitted) await limits.admit(ctx);
      } catch (rateErr) {
        err = rateErr;
      }
      // Refused before its body was read: the body is drained (never buffered, never parsed) and then refused.
      return refuseAfterDrain(ctx.req, err, d.drainMs);
    }
    await route.handler(ctx);
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
