/**
 * Key controls (SPEC §15, docs/keys.md): the `expires_at` and `budget` fields of create and PATCH, and
 * the roll and delete routes, beside admin/keys.ts.
 */
import { GatewayError } from '../http/errors.ts';
import { readJsonValue } from '../http/body.ts';
import type { BodyBudget } from '../limits/body-budget.ts';
import { sendJson, sendEmpty, SHOWS_KEY } from '../http/respond.ts';
import { Issues, forbidExtra, int, isObj, literal, rootObject, type Obj } from '../http/validate.ts';
import type { Route } from '../http/router.ts';
import type { RequestContext } from '../http/context.ts';
import { publicKey, type KeyTable } from '../auth/key-table.ts';
import { BUDGET_PERIODS, type KeyBudget, type KeyRecord } from '../store/types.ts';
import type { BudgetView } from '../credit/budget.ts';

const MAX_BODY = 64 * 1024;
/** A roll's grace period is at most a year (Stripe allows 7 days; a longer migration is the operator's call). */
export const MAX_GRACE_SECONDS = 31_536_000;
/** ISO 8601 with a time and a zone (`Z` or `±hh:mm`): a time without a zone would depend on the server. */
const ISO_DATETIME = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}:\d{2})$/;

/**
 * The 404 of a key route. An id that is a full API key (an operator pasting the leaked key instead of its
 * id) is not echoed: the message names it by its last four characters, as every key read does.
 */
export function noSuchKey(id: string): GatewayError {
  if (/^svc-(live|test)-/.test(id)) {
    return new GatewayError(
      'not_found',
      `No key with id svc-${id.split('-')[1]}-…${id.slice(-4)}: that is an API key, not its id (key_…). GET /v1/key with the key itself answers its id.`,
    );
  }
  return new GatewayError('not_found', `No key with id ${JSON.stringify(id.slice(0, 64))}.`);
}

export const EXPIRES_AT_SCHEMA = {
  type: ['string', 'null'],
  format: 'date-time',
  description: 'From this time (ISO 8601 with a zone) the key answers 401 invalid_api_key; null = never',
};

export const BUDGET_SCHEMA = {
  type: ['object', 'null'],
  additionalProperties: false,
  required: ['limit_micros', 'period'],
  properties: {
    limit_micros: { type: 'integer', minimum: 0, description: 'What the key may debit per period (micro-credits)' },
    period: { enum: [...BUDGET_PERIODS], description: 'UTC day, UTC calendar month, or the key’s whole life' },
  },
};

/**
 * `expires_at`: null (never) or an ISO 8601 time with a zone, returned normalised to UTC; undefined when
 * absent. With `futureAfterMs` (a create, the console's expiry form) a time not after it is refused as
 * Pydantic's `datetime_future`: a key born expired, or an expiry typed in the past, is a mistake, not a
 * request (a PATCH may still set a past time: the key expires at once, docs/keys.md).
 */
export function expiresAtField(o: Obj, issues: Issues, futureAfterMs?: number): string | null | undefined {
  const v = o.expires_at;
  if (v === undefined || v === null) return v;
  const at = ['body', 'expires_at'];
  if (typeof v !== 'string') return void issues.add(at, 'string_type', 'Input should be a valid string', v);
  const ms = ISO_DATETIME.test(v) ? Date.parse(v) : NaN;
  if (!Number.isFinite(ms)) {
    return void issues.add(at, 'datetime_from_date_parsing', 'Input should be a valid datetime (ISO 8601 with a time zone)', v);
  }
  if (futureAfterMs !== undefined && ms <= futureAfterMs) return void issues.add(at, 'datetime_future', 'Input should be in the future', v);
  return new Date(ms).toISOString();
}

/** `budget`: null (none) or {limit_micros ≥ 0, period}; undefined when absent. */
export function budgetField(o: Obj, issues: Issues): KeyBudget | null | undefined {
  const v = o.budget;
  if (v === undefined || v === null) return v;
  const loc = ['body', 'budget'];
  if (!isObj(v)) return void issues.add(loc, 'dict_type', 'Input should be a valid dictionary', v);
  forbidExtra(v, ['limit_micros', 'period'], loc, issues);
  const limit = int(v, 'limit_micros', loc, issues, { required: true, ge: 0, le: Number.MAX_SAFE_INTEGER });
  const period = literal(v, 'period', BUDGET_PERIODS, loc, issues, true);
  if (limit === undefined || period === undefined) return undefined;
  return { limit_micros: limit, period };
}

const ROLL_SCHEMA = {
  type: 'object',
  additionalProperties: false,
  properties: {
    expires_in_seconds: {
      type: 'integer',
      minimum: 0,
      maximum: MAX_GRACE_SECONDS,
      description: 'Grace period of the old key (default 0: it expires now)',
    },
  },
};

export function keyControlRoutes(d: {
  keys: KeyTable;
  /** admin/keys.ts: a record as every read shows it. */
  withUse: (r: KeyRecord) => Promise<Record<string, unknown>>;
  budgetOf: (r: KeyRecord) => Promise<BudgetView | KeyBudget | null>;
  bodyBudget: BodyBudget;
}): Route[] {
  const unknown = noSuchKey;

  async function roll(ctx: RequestContext) {
    // No body at all (`curl -X POST`) is `{}`: the old key expires now.
    const h = ctx.req.headers;
    const bodiless = !h['content-type'] && !h['transfer-encoding'] && (h['content-length'] ?? '0') === '0';
    const body = bodiless ? {} : await readJsonValue(ctx.req, MAX_BODY, d.bodyBudget);
    const issues = new Issues();
    if (!rootObject(body, issues)) return issues.done();
    forbidExtra(body, ['expires_in_seconds'], ['body'], issues);
    const grace = int(body, 'expires_in_seconds', ['body'], issues, { ge: 0, le: MAX_GRACE_SECONDS }) ?? 0;
    issues.done();
    const r = await d.keys.roll(ctx.params.id!, grace);
    if (!r) throw unknown(ctx.params.id!);
    sendJson(
      ctx.res,
      201,
      {
        key: r.key,
        ...publicKey(r.record),
        budget: await d.budgetOf(r.record),
        last_used_at: null,
        previous: { id: r.previous.id, expires_at: r.previous.expires_at ?? null },
      },
      SHOWS_KEY,
    );
  }

  async function remove(ctx: RequestContext) {
    if (!(await d.keys.delete(ctx.params.id!))) throw unknown(ctx.params.id!);
    sendEmpty(ctx.res, 204);
  }

  return [
    {
      method: 'POST',
      pattern: '/admin/keys/{id}/roll',
      handler: roll,
      admin: true,
      doc: {
        auth: 'admin',
        summary:
          'Roll a key, once: a new key with the same account, env, name, scopes, models, rate limits, budget, state (active or disabled) and expiry (shown once); the old one expires after the grace period',
        body: ROLL_SCHEMA,
        responses: {
          201: { description: 'The new key and its record, and the old key’s id and new expiry (`previous`)' },
          401: 'Missing or invalid admin token',
          404: 'Admin API disabled, or unknown key',
          409: 'The key was already rolled (the message names its successor; roll that one), also by a concurrent roll, or it has expired (key_not_rollable); no key is made',
          422: 'Invalid body',
          429: 'The account already made limits.max_keys_made_per_day keys today, UTC, rolls included (key_limit_exceeded, with retry-after)',
        },
      },
    },
    {
      method: 'DELETE',
      pattern: '/admin/keys/{id}',
      handler: remove,
      admin: true,
      doc: {
        auth: 'admin',
        summary: 'Delete a key for good: gone from every list, refused on every instance within a second',
        responses: {
          204: 'Deleted (also when this finished a delete left half-done: its record gone, its id index not)',
          401: 'Missing or invalid admin token',
          404: 'Admin API disabled, or unknown key',
        },
      },
    },
  ];
}
