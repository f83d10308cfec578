/** Admin routes for usage aggregates (SPEC §10): the read, and the rebuild from the ledger. */
import { readJsonValue } from '../http/body.ts';
import type { BodyBudget } from '../limits/body-budget.ts';
import { sendJson } from '../http/respond.ts';
import { Issues, forbidExtra, query, rootObject, str, type Obj } from '../http/validate.ts';
import type { Route } from '../http/router.ts';
import type { RequestContext } from '../http/context.ts';
import { accountParam } from '../admin/accounts.ts';
import { ADMIN_ERRORS } from '../admin/keys.ts';
import { USAGE_DIMENSIONS, type Usage, type UsageDimension } from './usage.ts';
import type { RebuildReport } from './rebuild.ts';

const DAY = /^\d{4}-\d{2}-\d{2}$/;
const DAY_MS = 86_400_000;

/** A YYYY-MM-DD that is a real calendar day, or undefined (issue added). */
function dayField(o: Obj, key: string, loc: string[], issues: Issues, fallback: string): string | undefined {
  const v = o[key] === undefined ? fallback : str(o, key, loc, issues, { pattern: DAY, patternText: DAY.source });
  if (v === undefined) return undefined;
  const t = Date.parse(`${v}T00:00:00Z`);
  if (Number.isNaN(t) || new Date(t).toISOString().slice(0, 10) !== v) {
    issues.add([...loc, key], 'date_from_datetime_parsing', 'Input should be a valid date', v);
    return undefined;
  }
  return v;
}

/** `from`/`to` (inclusive UTC days), from ≤ to, at most `maxDays` apart. */
function range(o: Obj, loc: string[], issues: Issues, today: string, maxDays: number): { from: string; to: string } | undefined {
  const to = dayField(o, 'to', loc, issues, today);
  const from = dayField(o, 'from', loc, issues, to ?? today);
  if (!from || !to) return undefined;
  const span = (Date.parse(to) - Date.parse(from)) / DAY_MS + 1;
  if (span < 1) {
    issues.add([...loc, 'from'], 'value_error', 'Value error, from must not be after to', from);
    return undefined;
  }
  if (span > maxDays) {
    issues.add([...loc, 'to'], 'value_error', `Value error, at most ${maxDays} days from from`, to, { max_days: maxDays });
    return undefined;
  }
  return { from, to };
}

function groupBy(q: Obj, issues: Issues): UsageDimension[] {
  const raw = q.group_by;
  if (raw === undefined) return [...USAGE_DIMENSIONS];
  const parts = typeof raw === 'string' ? raw.split(',').map((p) => p.trim()) : [];
  if (parts.length === 0 || parts.some((p) => !(USAGE_DIMENSIONS as readonly string[]).includes(p))) {
    issues.add(['query', 'group_by'], 'value_error', "Value error, a comma-separated non-empty subset of 'day', 'key', 'model'", raw);
    return [];
  }
  return [...new Set(parts as UsageDimension[])];
}

const ROW_SCHEMA = {
  type: 'object',
  required: ['requests', 'prompt_tokens', 'completion_tokens', 'cost_micros', 'cached_tokens'],
  properties: {
    day: { type: 'string', format: 'date' },
    key_id: { type: 'string' },
    model: { type: 'string' },
    requests: { type: 'integer' },
    prompt_tokens: { type: 'integer' },
    completion_tokens: { type: 'integer' },
    cost_micros: { type: 'integer' },
    cached_tokens: { type: 'integer', description: 'The cached part of prompt_tokens (priced at price.cached_input).' },
  },
};

export function usageRoutes(d: {
  usage: Usage;
  rebuild: (account: string, from: string, to: string) => Promise<RebuildReport>;
  now: () => number;
  retentionDays: number;
  bodyBudget: BodyBudget;
}): Route[] {
  const today = () => new Date(d.now()).toISOString().slice(0, 10);

  async function show(ctx: RequestContext) {
    const account = accountParam(ctx);
    const q = query(ctx.req.url!);
    const issues = new Issues();
    const r = range(q, ['query'], issues, today(), d.retentionDays);
    const dims = groupBy(q, issues);
    issues.done();
    sendJson(ctx.res, 200, { rows: await d.usage.query(account, r!.from, r!.to, dims) });
  }

  async function rebuild(ctx: RequestContext) {
    const account = accountParam(ctx);
    const value = await readJsonValue(ctx.req, 4096, d.bodyBudget);
    const issues = new Issues();
    if (!rootObject(value, issues)) return issues.done();
    forbidExtra(value, ['from', 'to'], ['body'], issues);
    const r = range(value, ['body'], issues, today(), d.retentionDays);
    issues.done();
    // What was aggregated in this process goes first, so the rebuild does not race our own next flush.
    await d.usage.flush();
    sendJson(ctx.res, 200, await d.rebuild(account, r!.from, r!.to));
  }

  return [
    {
      method: 'GET',
      pattern: '/admin/accounts/{id}/usage',
      handler: show,
      admin: true,
      doc: {
        auth: 'admin',
        summary: 'Usage aggregates per UTC day × key × model, grouped by any non-empty subset (SPEC §10); lag the ledger by ≤ 2 s',
        query: {
          from: { type: 'string', format: 'date', description: 'first UTC day (default: to)' },
          to: { type: 'string', format: 'date', description: 'last UTC day, inclusive (default: today)' },
          group_by: { type: 'string', description: 'comma-separated subset of day,key,model (default: all three)' },
        },
        responses: {
          200: { description: 'Rows', schema: { type: 'object', properties: { rows: { type: 'array', items: ROW_SCHEMA } } } },
          ...ADMIN_ERRORS,
        },
      },
    },
    {
      method: 'POST',
      pattern: '/admin/accounts/{id}/usage/rebuild',
      handler: rebuild,
      admin: true,
      doc: {
        auth: 'admin',
        summary: "Recompute an account's aggregates of live keys for a range of days from the ledger (Redis and exported objects)",
        body: {
          type: 'object',
          additionalProperties: false,
          properties: { from: { type: 'string', format: 'date' }, to: { type: 'string', format: 'date' } },
        },
        responses: { 200: { description: 'What was recomputed', schema: { type: 'object' } }, ...ADMIN_ERRORS },
      },
    },
  ];
}
