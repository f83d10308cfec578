/** Admin routes for keys: POST/GET /admin/keys, GET/PATCH /admin/keys/{id} (SPEC §2, §2a). */
import { GatewayError } from '../http/errors.ts';
import { readJsonValue } from '../http/body.ts';
import type { BodyBudget } from '../limits/body-budget.ts';
import { sendJson, SHOWS_KEY } from '../http/respond.ts';
import { Issues, bool, forbidExtra, int, isObj, list, literal, query, rootObject, str, type Obj } from '../http/validate.ts';
import type { Route } from '../http/router.ts';
import type { RequestContext } from '../http/context.ts';
import { publicKey, type KeyTable } from '../auth/key-table.ts';
import { ACCOUNT_ID, ACCOUNT_ID_PATTERN, SCOPES, type KeyRecord, type RateLimitOverride, type Scope } from '../store/types.ts';
import { BUDGET_SCHEMA, EXPIRES_AT_SCHEMA, budgetField, expiresAtField, keyControlRoutes, noSuchKey } from './key-controls.ts';
import type { BudgetView } from '../credit/budget.ts';

const MAX_ADMIN_BODY = 64 * 1024;

/** Validates an account id (it becomes part of Redis keys). */
export function accountField(o: Obj, key: string, loc: string[], issues: Issues, required = true): string | undefined {
  return str(o, key, loc, issues, { required, minLength: 1, maxLength: 128, pattern: ACCOUNT_ID, patternText: ACCOUNT_ID_PATTERN });
}

/** `rate_limits` override: null or {requests_per_minute?, tokens_per_minute?} positive integers. */
export function rateLimitsField(o: Obj, issues: Issues): RateLimitOverride | null | undefined {
  const v = o.rate_limits;
  if (v === undefined || v === null) return v;
  if (!isObj(v)) return void issues.add(['body', 'rate_limits'], 'dict_type', 'Input should be a valid dictionary', v);
  const loc = ['body', 'rate_limits'];
  forbidExtra(v, ['requests_per_minute', 'tokens_per_minute'], loc, issues);
  const rpm = int(v, 'requests_per_minute', loc, issues, { gt: 0 });
  const tpm = int(v, 'tokens_per_minute', loc, issues, { gt: 0 });
  const out: RateLimitOverride = {};
  if (rpm !== undefined) out.requests_per_minute = rpm;
  if (tpm !== undefined) out.tokens_per_minute = tpm;
  return out;
}

function stringList(o: Obj, key: string, issues: Issues, allowed?: readonly string[]): string[] | undefined {
  const l = list(o, key, ['body'], issues);
  if (!l) return undefined;
  for (let i = 0; i < l.length && !issues.full; i++) {
    const item = l[i];
    if (typeof item !== 'string') issues.add(['body', key, String(i)], 'string_type', 'Input should be a valid string', item);
    else if (allowed) literal({ [String(i)]: item }, String(i), allowed, ['body', key], issues);
  }
  return [...new Set(l as string[])];
}

/** Responses every admin route may give. */
export const ADMIN_ERRORS = {
  401: 'Missing or invalid admin token',
  404: 'Admin API disabled, or unknown resource',
  413: 'Body too large',
  415: 'Not application/json',
  422: 'Invalid body or query',
  429: 'Too many failed admin authentications',
} as const;

const RATE_LIMITS_SCHEMA = {
  type: ['object', 'null'],
  additionalProperties: false,
  properties: {
    requests_per_minute: { type: 'integer', exclusiveMinimum: 0 },
    tokens_per_minute: { type: 'integer', exclusiveMinimum: 0 },
  },
};

/** A key record as every read returns it. */
export const KEY_SCHEMA: Record<string, unknown> = {
  type: 'object',
  required: ['id', 'account', 'env', 'name', 'active', 'scopes', 'models', 'rate_limits', 'created_at', 'last4'],
  properties: {
    id: { type: 'string' },
    account: { type: 'string' },
    env: { enum: ['live', 'test'] },
    name: { type: 'string' },
    active: { type: 'boolean' },
    scopes: { type: 'array', items: { enum: [...SCOPES] } },
    models: { type: 'array', items: { type: 'string' } },
    rate_limits: RATE_LIMITS_SCHEMA,
    created_at: { type: 'string', format: 'date-time' },
    last4: { type: 'string' },
    last_used_at: {
      type: ['string', 'null'],
      description: 'ISO minute of the last request (SPEC §10; lags by ≤ 2 s); null before the first',
    },
    expires_at: EXPIRES_AT_SCHEMA,
    budget: {
      ...BUDGET_SCHEMA,
      required: ['limit_micros', 'period', 'spent_micros'],
      properties: {
        ...BUDGET_SCHEMA.properties,
        spent_micros: { type: 'integer', description: "What the key's settled requests debited in the current UTC period" },
      },
    },
  },
};

function createKeySchema(models: readonly string[]): Record<string, unknown> {
  return {
    type: 'object',
    required: ['account', 'env', 'name'],
    additionalProperties: false,
    properties: {
      account: { type: 'string', pattern: ACCOUNT_ID_PATTERN },
      env: { enum: ['live', 'test'] },
      name: { type: 'string', minLength: 1, maxLength: 200 },
      scopes: { type: 'array', items: { enum: [...SCOPES] } },
      models: { type: 'array', items: { enum: [...models] } },
      rate_limits: RATE_LIMITS_SCHEMA,
      expires_at: {
        ...EXPIRES_AT_SCHEMA,
        description: `${EXPIRES_AT_SCHEMA.description}; on create it must be in the future (else 422 datetime_future)`,
      },
      budget: BUDGET_SCHEMA,
    },
  };
}

const PATCH_KEY_SCHEMA = {
  type: 'object',
  additionalProperties: false,
  properties: {
    name: { type: 'string', minLength: 1, maxLength: 200 },
    active: { type: 'boolean' },
    rate_limits: RATE_LIMITS_SCHEMA,
    scopes: { type: 'array', items: { enum: [...SCOPES] } },
    expires_at: EXPIRES_AT_SCHEMA,
    budget: BUDGET_SCHEMA,
  },
};

/** `models` is the configured model names: a key naming any other model could never use it, so it is refused. */
export function keyRoutes(d: {
  keys: KeyTable;
  models: readonly string[];
  /** key id → ISO minute of its last request, per account (SPEC §10, src/usage/). */
  lastUsed: (account: string) => Promise<Record<string, string>>;
  /** A key's budget with its spend in the current period (credit/budget.ts budgetView); null without one. */
  budget?: (r: KeyRecord) => Promise<BudgetView | null>;
  /** What admin bodies are read under (gateway.ts: the admin listener's own body budget). */
  bodyBudget: BodyBudget;
  /** The gateway's clock: a create's `expires_at` must be after it. */
  now: () => number;
}): Route[] {
  const budgetOf = (r: KeyRecord) => (d.budget && r.budget ? d.budget(r) : Promise.resolve(r.budget ?? null));
  /** A key's public view with its last use (null until its first request was flushed) and its budget's spend. */
  const withUse = async (r: KeyRecord) => {
    const [used, budget] = await Promise.all([d.lastUsed(r.account), budgetOf(r)]);
    return { ...publicKey(r), budget, last_used_at: used[r.id] ?? null };
  };

  async function create(ctx: RequestContext) {
    const value = await readJsonValue(ctx.req, MAX_ADMIN_BODY, d.bodyBudget);
    const issues = new Issues();
    if (!rootObject(value, issues)) return issues.done();
    forbidExtra(value, ['account', 'env', 'name', 'scopes', 'models', 'rate_limits', 'expires_at', 'budget'], ['body'], issues);
    const account = accountField(value, 'account', ['body'], issues);
    const env = literal(value, 'env', ['live', 'test'] as const, ['body'], issues, true);
    const name = str(value, 'name', ['body'], issues, { required: true, minLength: 1, maxLength: 200 });
    const scopes = stringList(value, 'scopes', issues, SCOPES) as Scope[] | undefined;
    const models = stringList(value, 'models', issues, d.models);
    const rate_limits = rateLimitsField(value, issues);
    const expires_at = expiresAtField(value, issues, d.now());
    const budget = budgetField(value, issues);
    issues.done();
    const { key, record } = await d.keys.create({
      account: account!,
      env: env!,
      name: name!,
      scopes,
      models,
      rate_limits,
      expires_at,
      budget,
    });
    sendJson(ctx.res, 201, { key, ...publicKey(record), budget: await budgetOf(record), last_used_at: null }, SHOWS_KEY);
  }

  async function listKeys(ctx: RequestContext) {
    const q = query(ctx.req.url!);
    const issues = new Issues();
    // The id pattern every other account route checks: `acme ` or `a}b` named no account and listed [] (a
    // typo looked like an account without keys), and a `}` would have left the account's {acct:<id>} hash tag.
    const account = accountField(q, 'account', ['query'], issues);
    issues.done();
    const [records, used] = await Promise.all([d.keys.list(account!), d.lastUsed(account!)]);
    const budgets = await Promise.all(records.map(budgetOf));
    sendJson(ctx.res, 200, { data: records.map((r, i) => ({ ...publicKey(r), budget: budgets[i], last_used_at: used[r.id] ?? null })) });
  }

  async function getKey(ctx: RequestContext) {
    const r = await d.keys.get(ctx.params.id!);
    if (!r) throw noSuchKey(ctx.params.id!);
    sendJson(ctx.res, 200, await withUse(r));
  }

  async function patchKey(ctx: RequestContext) {
    const value = await readJsonValue(ctx.req, MAX_ADMIN_BODY, d.bodyBudget);
    const issues = new Issues();
    if (!rootObject(value, issues)) return issues.done();
    forbidExtra(value, ['name', 'active', 'rate_limits', 'scopes', 'expires_at', 'budget'], ['body'], issues);
    const name = str(value, 'name', ['body'], issues, { minLength: 1, maxLength: 200 });
    const active = bool(value, 'active', ['body'], issues);
    const rate_limits = rateLimitsField(value, issues);
    const scopes = stringList(value, 'scopes', issues, SCOPES) as Scope[] | undefined;
    const expires_at = expiresAtField(value, issues);
    const budget = budgetField(value, issues);
    issues.done();
    const patch = {
      ...(expires_at !== undefined && { expires_at }),
      ...(budget !== undefined && { budget }),
      ...(scopes !== undefined && { scopes }),
      ...(name !== undefined && { name }),
      ...(active !== undefined && { active }),
      ...(rate_limits !== undefined && { rate_limits }),
    };
    const r = await d.keys.update(ctx.params.id!, patch);
    if (!r) throw noSuchKey(ctx.params.id!);
    sendJson(ctx.res, 200, await withUse(r));
  }

  const admin = { auth: 'admin' as const };
  return [
    {
      method: 'POST',
      pattern: '/admin/keys',
      handler: create,
      admin: true,
      doc: {
        ...admin,
        summary: 'Create a key; the only response that carries the full key',
        body: createKeySchema(d.models),
        responses: {
          201: {
            description: 'The key and its record',
            schema: {
              ...KEY_SCHEMA,
              required: ['key', ...(KEY_SCHEMA.required as string[])],
              properties: { key: { type: 'string' }, ...(KEY_SCHEMA.properties as object) },
            },
          },
          ...ADMIN_ERRORS,
          429: 'Too many failed admin authentications, or the account already holds limits.max_keys_per_account keys or made limits.max_keys_made_per_day keys today, UTC (key_limit_exceeded; the daily one with retry-after)',
        },
      },
    },
    {
      method: 'GET',
      pattern: '/admin/keys',
      handler: listKeys,
      admin: true,
      doc: {
        ...admin,
        summary: "An account's keys (never the full key)",
        query: { account: { type: 'string', pattern: ACCOUNT_ID_PATTERN } },
        responses: {
          200: { description: 'Keys', schema: { type: 'object', properties: { data: { type: 'array', items: KEY_SCHEMA } } } },
          ...ADMIN_ERRORS,
        },
      },
    },
    {
      method: 'GET',
      pattern: '/admin/keys/{id}',
      handler: getKey,
      admin: true,
      doc: { ...admin, summary: 'One key', responses: { 200: { description: 'The key', schema: KEY_SCHEMA }, ...ADMIN_ERRORS } },
    },
    {
      method: 'PATCH',
      pattern: '/admin/keys/{id}',
      handler: patchKey,
      admin: true,
      doc: {
        ...admin,
        summary: 'Rename, disable or enable a key, set its rate limits, expiry or budget, or replace its scopes',
        body: PATCH_KEY_SCHEMA,
        responses: { 200: { description: 'The key', schema: KEY_SCHEMA }, ...ADMIN_ERRORS },
      },
    },
    ...keyControlRoutes({ keys: d.keys, withUse, budgetOf, bodyBudget: d.bodyBudget }),
  ];
}
