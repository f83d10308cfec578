/**
 * GET /v1/key (SPEC §15): the calling key's own quota, with any valid key and no scope, so a client can
 * check its headroom without the console (OpenRouter's `GET /api/v1/key`). Reads the key's budget
 * counter and, for a live key, its account's balance: two store reads, off the metered path.
 */
import { sendJson } from '../http/respond.ts';
import type { Route } from '../http/router.ts';
import type { RequestContext } from '../http/context.ts';
import type { LimitSpec } from '../config/schema.ts';
import type { Store } from '../store/types.ts';
import { budgetView } from '../credit/budget.ts';

export function keyInfoRoutes(d: {
  store: Pick<Store, 'keySpend' | 'getAccount'>;
  now: () => number;
  /** config.rateLimits: the per-env defaults a key's override falls back to. */
  rateLimits: { readonly test: LimitSpec; readonly live: LimitSpec };
}): Route[] {
  async function show(ctx: RequestContext) {
    const key = ctx.key!;
    const defaults = d.rateLimits[key.env];
    const [budget, account] = await Promise.all([
      budgetView(d.store, key, d.now()),
      key.env === 'live' ? d.store.getAccount(key.account) : undefined,
    ]);
    sendJson(
      ctx.res,
      200,
      {
        id: key.id,
        name: key.name,
        env: key.env,
        expires_at: key.expires_at ?? null,
        budget,
        // What applies to this key: its override, else its environment's default; null = no limit.
        rate_limits: {
          requests_per_minute: key.rate_limits?.requests_per_minute ?? defaults.requestsPerMinute ?? null,
          tokens_per_minute: key.rate_limits?.tokens_per_minute ?? defaults.tokensPerMinute ?? null,
        },
        balance_micros: account ? account.balance_micros - account.held_micros : null,
      },
      // Live figures: never cached by a proxy in between.
      { 'cache-control': 'no-store', ...ctx.extraHeaders },
    );
  }
  const nullableInt = { type: ['integer', 'null'] };
  return [
    {
      method: 'GET',
      pattern: '/v1/key',
      handler: show,
      auth: 'any',
      doc: {
        summary: "The calling key's own expiry, budget, rate limits and available credit (any valid key, no scope)",
        auth: 'key',
        responses: {
          200: {
            description: 'The key’s quota',
            schema: {
              type: 'object',
              required: ['id', 'name', 'env', 'expires_at', 'budget', 'rate_limits', 'balance_micros'],
              properties: {
                id: { type: 'string' },
                name: { type: 'string' },
                env: { enum: ['live', 'test'] },
                expires_at: { type: ['string', 'null'], format: 'date-time' },
                budget: {
                  type: ['object', 'null'],
                  properties: {
                    limit_micros: { type: 'integer' },
                    period: { enum: ['day', 'month', 'total'] },
                    spent_micros: { type: 'integer' },
                  },
                },
                rate_limits: {
                  type: 'object',
                  properties: { requests_per_minute: nullableInt, tokens_per_minute: nullableInt },
                },
                balance_micros: {
                  ...nullableInt,
                  description: "Live keys: the account's available credit (balance − held); test keys: null",
                },
              },
            },
          },
          401: 'Missing or invalid key',
          429: 'Rate or concurrency limit',
        },
      },
    },
  ];
}
