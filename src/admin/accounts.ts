/** Admin routes for credit: grants, balances and the ledger (SPEC §2, §2a, §4). */
import { readJsonValue } from '../http/body.ts';
import type { BodyBudget } from '../limits/body-budget.ts';
import { invalid } from '../http/errors.ts';
import { sendJson } from '../http/respond.ts';
import { Issues, forbidExtra, int, query, queryInt, rootObject, str } from '../http/validate.ts';
import type { Route } from '../http/router.ts';
import type { RequestContext } from '../http/context.ts';
import { ACCOUNT_ID, ACCOUNT_ID_PATTERN } from '../store/types.ts';
import type { AccountService } from './account-service.ts';
import { ADMIN_ERRORS } from './keys.ts';

/** A ledger entry id: a stream id, or a packed pass's debit `<stream id>.<k>` (docs/ledger.md "Packed passes"). */
export const ENTRY_ID = /^\d{1,16}-\d{1,16}(?:\.\d{1,4})?$/;
/** Grants are bounded so a typo cannot overflow Redis' int64 or JavaScript's safe integers: 10^15 micros = 10^9 credits. */
export const MAX_GRANT = 1e15;

/** The `{id}` path segment, percent-decoded and checked against the account id pattern (422). */
export function accountParam(ctx: RequestContext, param = 'id'): string {
  const raw = ctx.params[param]!;
  let id = raw;
  try {
    id = decodeURIComponent(raw);
  } catch {
    // A malformed escape is the client's fault: it fails the pattern below with the raw segment as input.
  }
  if (!ACCOUNT_ID.test(id)) {
    throw invalid(['path', 'id'], 'string_pattern_mismatch', `String should match pattern '${ACCOUNT_ID_PATTERN}'`, id, {
      pattern: ACCOUNT_ID_PATTERN,
    });
  }
  return id;
}

const GRANT_SCHEMA = {
  type: 'object',
  properties: {
    account: { type: 'string' },
    balance_micros: { type: 'integer' },
    held_micros: { type: 'integer' },
    entry_id: { type: 'string' },
  },
};

export function accountRoutes(d: { accounts: AccountService; bodyBudget: BodyBudget }): Route[] {
  async function grant(ctx: RequestContext) {
    const account = accountParam(ctx);
    const value = await readJsonValue(ctx.req, 64 * 1024, d.bodyBudget);
    const issues = new Issues();
    if (!rootObject(value, issues)) return issues.done();
    forbidExtra(value, ['amount_micros', 'idempotency_key', 'note'], ['body'], issues);
    const amount = int(value, 'amount_micros', ['body'], issues, { required: true, ge: -MAX_GRANT, le: MAX_GRANT });
    const idem = str(value, 'idempotency_key', ['body'], issues, { minLength: 1, maxLength: 200 });
    const note = str(value, 'note', ['body'], issues, { maxLength: 1000 });
    issues.done();
    const r = await d.accounts.grant(account, amount!, idem, note);
    sendJson(ctx.res, r.replayed ? 200 : 201, {
      account: r.account,
      balance_micros: r.balance_micros,
      held_micros: r.held_micros,
      entry_id: r.entry_id,
    });
  }

  async function show(ctx: RequestContext) {
    sendJson(ctx.res, 200, await d.accounts.show(accountParam(ctx)));
  }

  async function ledger(ctx: RequestContext) {
    const account = accountParam(ctx);
    const q = query(ctx.req.url!);
    const issues = new Issues();
    const after = str(q, 'after', ['query'], issues, { pattern: ENTRY_ID, patternText: ENTRY_ID.source });
    const limit = queryInt(q, 'limit', issues, { ge: 1, le: 1000, fallback: 100 });
    issues.done();
    const [entries, exported] = await Promise.all([d.accounts.ledger(account, after, limit), d.accounts.exportState(account)]);
    sendJson(ctx.res, 200, {
      entries,
      next_after: entries.length === limit ? entries.at(-1)!.id : null,
      archived_before: exported.archived_before,
    });
  }

  return [
    {
      method: 'POST',
      pattern: '/admin/accounts/{id}/credits',
      handler: grant,
      admin: true,
      doc: {
        auth: 'admin',
        summary:
          'Grant credit (negative: a correction); idempotent per idempotency_key; 422 when the balance would pass ±9e15 micro-credits',
        body: {
          type: 'object',
          required: ['amount_micros'],
          additionalProperties: false,
          properties: {
            amount_micros: { type: 'integer', minimum: -MAX_GRANT, maximum: MAX_GRANT },
            idempotency_key: { type: 'string', minLength: 1, maxLength: 200 },
            note: { type: 'string', maxLength: 1000 },
          },
        },
        responses: {
          201: { description: 'Granted', schema: GRANT_SCHEMA },
          200: { description: 'A replay of the same idempotency_key: nothing credited again', schema: GRANT_SCHEMA },
          ...ADMIN_ERRORS,
        },
      },
    },
    {
      method: 'GET',
      pattern: '/admin/accounts/{id}',
      handler: show,
      admin: true,
      doc: {
        auth: 'admin',
        summary: 'Balance and held credit (zeros for an account never granted)',
        responses: {
          200: {
            description: 'The account',
            schema: {
              type: 'object',
              properties: { id: { type: 'string' }, balance_micros: { type: 'integer' }, held_micros: { type: 'integer' } },
            },
          },
          ...ADMIN_ERRORS,
        },
      },
    },
    {
      method: 'GET',
      pattern: '/admin/accounts/{id}/ledger',
      handler: ledger,
      admin: true,
      doc: {
        auth: 'admin',
        summary: 'Ledger entries, oldest first',
        query: { after: { type: 'string' }, limit: { type: 'integer', minimum: 1, maximum: 1000 } },
        responses: {
          200: {
            description: 'A page of entries',
            schema: {
              type: 'object',
              properties: {
                entries: { type: 'array', items: { type: 'object' } },
                next_after: { type: ['string', 'null'] },
                archived_before: {
                  type: ['string', 'null'],
                  description: 'Entries before this id were trimmed from Redis and are only in the exported objects (SPEC §10)',
                },
              },
            },
          },
          ...ADMIN_ERRORS,
        },
      },
    },
  ];
}
