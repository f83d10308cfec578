/** Admin routes for keys: POST/GET /admin/keys, GET/PATCH /admin/keys/{id} (SPEC §2, §2a). */
import { GatewayError } from '../http/errors.ts';
import { readJson } from '../http/body.ts';
import { sendJson } from '../http/respond.ts';
import { Issues, bool, forbidExtra, int, isObj, list, literal, query, rootObject, str, type Obj } from '../http/validate.ts';
import type { Route } from '../http/router.ts';
import type { RequestContext } from '../http/context.ts';
import { publicKey, type KeyTable } from '../auth/key-table.ts';
import { ACCOUNT_ID, ACCOUNT_ID_PATTERN, SCOPES, type RateLimitOverride, type Scope } from '../store/types.ts';

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
  l.forEach((item, i) => {
    if (typeof item !== 'string') issues.add(['body', key, String(i)], 'string_type', 'Input should be a valid string', item);
    else if (allowed) literal({ [String(i)]: item }, String(i), allowed, ['body', key], issues);
  });
  return [...new Set(l as string[])];
}

/** `models` is the configured model names: a key naming any other model could never use it, so it is refused. */
export function keyRoutes(d: { keys: KeyTable; guard: (ctx: RequestContext) => void; models: readonly string[] }): Route[] {
  async function create(ctx: RequestContext) {
    d.guard(ctx);
    const { value } = await readJson(ctx.req, MAX_ADMIN_BODY);
    const issues = new Issues();
    if (!rootObject(value, issues)) return issues.done();
    forbidExtra(value, ['account', 'env', 'name', 'scopes', 'models', 'rate_limits'], ['body'], issues);
    const account = accountField(value, 'account', ['body'], issues);
    const env = literal(value, 'env', ['live', 'test'] as const, ['body'], issues, true);
    const name = str(value, 'name', ['body'], issues, { required: true, minLength: 1, maxLength: 200 });
    const scopes = stringList(value, 'scopes', issues, SCOPES) as Scope[] | undefined;
    const models = stringList(value, 'models', issues, d.models);
    const rate_limits = rateLimitsField(value, issues);
    issues.done();
    const { key, record } = await d.keys.create({ account: account!, env: env!, name: name!, scopes, models, rate_limits });
    sendJson(ctx.res, 201, { key, ...publicKey(record) });
  }

  async function listKeys(ctx: RequestContext) {
    d.guard(ctx);
    const q = query(ctx.req.url!);
    const issues = new Issues();
    const account = str(q, 'account', ['query'], issues, { required: true, minLength: 1, maxLength: 128 });
    issues.done();
    const records = await d.keys.list(account!);
    sendJson(ctx.res, 200, { data: records.map(publicKey) });
  }

  async function getKey(ctx: RequestContext) {
    d.guard(ctx);
    const r = await d.keys.get(ctx.params.id!);
    if (!r) throw new GatewayError('not_found', `No key with id ${JSON.stringify(ctx.params.id!.slice(0, 64))}.`);
    sendJson(ctx.res, 200, publicKey(r));
  }

  async function patchKey(ctx: RequestContext) {
    d.guard(ctx);
    const { value } = await readJson(ctx.req, MAX_ADMIN_BODY);
    const issues = new Issues();
    if (!rootObject(value, issues)) return issues.done();
    forbidExtra(value, ['name', 'active', 'rate_limits'], ['body'], issues);
    const name = str(value, 'name', ['body'], issues, { minLength: 1, maxLength: 200 });
    const active = bool(value, 'active', ['body'], issues);
    const rate_limits = rateLimitsField(value, issues);
    issues.done();
    const patch = { ...(name !== undefined && { name }), ...(active !== undefined && { active }), ...(rate_limits !== undefined && { rate_limits }) };
    const r = await d.keys.update(ctx.params.id!, patch);
    if (!r) throw new GatewayError('not_found', `No key with id ${JSON.stringify(ctx.params.id!.slice(0, 64))}.`);
    sendJson(ctx.res, 200, publicKey(r));
  }

  return [
    { method: 'POST', pattern: '/admin/keys', handler: create },
    { method: 'GET', pattern: '/admin/keys', handler: listKeys },
    { method: 'GET', pattern: '/admin/keys/{id}', handler: getKey },
    { method: 'PATCH', pattern: '/admin/keys/{id}', handler: patchKey },
  ];
}
