/**
 * `tollgate keys …`: create, list, show, disable, enable, rename, per-key limits (SPEC §2, §2a), and the
 * controls of SPEC §15: expiry, budget, roll and delete (docs/keys.md).
 */
import { expectPositionals, needString, optList, optPositiveInt, optString, UsageError, type Values } from './args.ts';
import type { CliContext, CommandGroup } from './context.ts';
import { cell, fields, json, table } from './output.ts';

const G = 'keys';
/** What a full API key starts with (SPEC §1.1); a key id starts with `key_`. */
const FULL_KEY = /^svc-(live|test)-/;

/** A key as the admin API returns it (the full `key` only from create). */
interface KeyBody {
  key?: string;
  id: string;
  account: string;
  env: string;
  name: string;
  active: boolean;
  scopes: string[];
  models: string[];
  rate_limits: { requests_per_minute?: number; tokens_per_minute?: number } | null;
  created_at: string;
  last4: string;
  expires_at?: string | null;
  budget?: { limit_micros: number; period: string; spent_micros?: number } | null;
}

/** Only the last four characters are ever shown after creation: enough to tell keys apart in logs. */
function masked(k: KeyBody): string {
  return `svc-${k.env}-...${k.last4}`;
}

function limits(k: KeyBody): string {
  const r = k.rate_limits;
  if (!r || (r.requests_per_minute === undefined && r.tokens_per_minute === undefined)) return 'config defaults';
  return [
    r.requests_per_minute !== undefined && `${r.requests_per_minute} rpm`,
    r.tokens_per_minute !== undefined && `${r.tokens_per_minute} tpm`,
  ]
    .filter(Boolean)
    .join(', ');
}

/** A key's fields; `key` is the full key on create, and only its last four characters afterwards. */
function keyFields(k: KeyBody): Array<[string, string]> {
  return [
    ['key', k.key ?? masked(k)],
    ['id', k.id],
    ['account', k.account],
    ['env', k.env],
    ['name', k.name],
    ['active', k.active ? 'yes' : 'no (disabled)'],
    ['scopes', k.scopes.join(',')],
    ['models', k.models.length ? k.models.join(',') : 'all'],
    ['rate_limits', limits(k)],
    ['created_at', k.created_at],
    ['expires_at', k.expires_at ?? 'never'],
    ['budget', budgetText(k)],
  ];
}

/** `spent / limit micro-credits per period`, or `none`. */
function budgetText(k: KeyBody): string {
  const b = k.budget;
  if (!b) return 'none';
  const per = b.period === 'total' ? 'in total' : `per ${b.period} (UTC)`;
  return `${b.spent_micros ?? 0} of ${b.limit_micros} micro-credits ${per}`;
}

const PERIODS = ['day', 'month', 'total'];

/** `--budget-micros N --budget-period P` (or `--limit-micros/--period` for `keys budget`) as a budget, or undefined. */
function budgetOption(values: Values, limitName: string, periodName: string): { limit_micros: number; period: string } | undefined {
  const limit = optString(values, limitName);
  const period = optString(values, periodName);
  if (limit === undefined && period === undefined) return undefined;
  if (limit === undefined || !/^\d+$/.test(limit) || !Number.isSafeInteger(Number(limit)))
    throw new UsageError(`--${limitName} must be an integer ≥ 0, got ${JSON.stringify(limit ?? '')}`, G);
  if (period === undefined || !PERIODS.includes(period))
    throw new UsageError(`--${periodName} must be one of ${PERIODS.join(', ')}, got ${JSON.stringify(period ?? '')}`, G);
  return { limit_micros: Number(limit), period };
}

/** An ISO 8601 time for `--expires-at`, sent as given (the API checks and normalises it); `never` = null. */
function expiresAt(v: string): string | null {
  return v === 'never' ? null : v;
}

function printKey(ctx: CliContext, k: KeyBody): void {
  ctx.io.out(ctx.json ? json(k) : fields(keyFields(k)));
}

/** `--rpm/--tpm` as a rate_limits override, or undefined when neither is given. */
function rateLimits(values: Values): { requests_per_minute?: number; tokens_per_minute?: number } | undefined {
  const rpm = optPositiveInt(values, 'rpm', G);
  const tpm = optPositiveInt(values, 'tpm', G);
  if (rpm === undefined && tpm === undefined) return undefined;
  return { ...(rpm !== undefined && { requests_per_minute: rpm }), ...(tpm !== undefined && { tokens_per_minute: tpm }) };
}

async function patch(ctx: CliContext, id: string, body: Record<string, unknown>): Promise<void> {
  const { body: k } = await ctx.admin().call('PATCH', `/admin/keys/${encodeURIComponent(id)}`, body);
  printKey(ctx, k as KeyBody);
}

const LIMIT_OPTIONS = { rpm: { type: 'string' }, tpm: { type: 'string' } } as const;

/**
 * The positionals of a command on one key, the first its id. A full key given instead (an operator
 * disabling a leaked key whose id they do not know) is refused here, before it is sent: it would have
 * travelled in the URL path (proxy logs) and come back in the 404's message.
 */
function keyIdPositionals(pos: string[], names: string[]): string[] {
  const out = expectPositionals(pos, names, G);
  if (FULL_KEY.test(out[0]!)) {
    throw new UsageError(
      `svc-…${out[0]!.slice(-4)} is an API key, not its id: give the id (key_…, in \`tollgate keys list\`). ` +
        'The gateway tells a key holder its own id: curl -H "authorization: Bearer $KEY" <base_url>/v1/key',
      G,
    );
  }
  return out;
}

/** The `keys` command group. */
export const keysGroup: CommandGroup = {
  name: G,
  summary: 'API keys: create, list, disable, enable, rename, limits, scopes',
  notes: [
    'The full key is printed once, by `keys create`, and can never be read again (only its SHA-256 is stored).',
    '--scopes: any of chat,models,shares,embeddings (default all). --models: allow-list of model names (default all).',
    "`keys scopes` replaces the key's scopes: how a key made before a scope existed (embeddings) is granted it.",
    "`keys limits` replaces the key's override: limits left out fall back to the config defaults.",
    '--expires-at: ISO 8601 with a zone (2026-12-31T23:59:59Z); past it the key answers 401 everywhere within 1 s.',
    '--budget-micros N --budget-period day|month|total: what the key may debit per UTC period (402 key_budget_exceeded past it).',
    '`keys roll` prints the new key once; the old one keeps working for --grace seconds (default 0). `keys delete` needs --yes.',
  ],
  commands: {
    create: {
      args: '--account A --env live|test --name N [--scopes chat,models] [--models m1,m2] [--rpm N] [--tpm N] [--expires-at ISO] [--budget-micros N --budget-period day|month|total]',
      summary: 'create a key and print it (the only time the full key is shown)',
      options: {
        account: { type: 'string' },
        env: { type: 'string' },
        name: { type: 'string' },
        scopes: { type: 'string' },
        models: { type: 'string' },
        ...LIMIT_OPTIONS,
        'expires-at': { type: 'string' },
        'budget-micros': { type: 'string' },
        'budget-period': { type: 'string' },
      },
      async run(ctx, pos) {
        expectPositionals(pos, [], G);
        const v = ctx.values;
        const account = needString(v, 'account', G);
        const env = needString(v, 'env', G);
        if (env !== 'live' && env !== 'test') throw new UsageError(`--env must be live or test, got ${JSON.stringify(env)}`, G);
        const name = needString(v, 'name', G);
        const scopes = optList(v, 'scopes');
        const models = optList(v, 'models');
        const rate_limits = rateLimits(v);
        const exp = optString(v, 'expires-at');
        const budget = budgetOption(v, 'budget-micros', 'budget-period');
        const body = {
          account,
          env,
          name,
          ...(scopes && { scopes }),
          ...(models && { models }),
          ...(rate_limits && { rate_limits }),
          ...(exp !== undefined && { expires_at: expiresAt(exp) }),
          ...(budget && { budget }),
        };
        const { body: k } = await ctx.admin().call('POST', '/admin/keys', body);
        const key = k as KeyBody;
        ctx.io.out(ctx.json ? json(key) : fields(keyFields(key)));
        ctx.io.err('warning: this is the only time the full key is shown; store it now, it cannot be shown again.');
      },
    },
    list: {
      args: '--account A',
      summary: "list an account's keys (never the full keys)",
      options: { account: { type: 'string' } },
      async run(ctx, pos) {
        expectPositionals(pos, [], G);
        const account = needString(ctx.values, 'account', G);
        const { body } = await ctx.admin().call('GET', `/admin/keys?account=${encodeURIComponent(account)}`);
        if (ctx.json) return ctx.io.out(json(body));
        const keys = (body as { data: KeyBody[] }).data;
        ctx.io.out(
          table(
            ['id', 'env', 'active', 'key', 'scopes', 'models', 'rate_limits', 'created_at', 'expires_at', 'budget', 'name'],
            keys.map((k) => [
              k.id,
              k.env,
              k.active ? 'yes' : 'no',
              masked(k),
              k.scopes.join(','),
              k.models.length ? k.models.join(',') : 'all',
              limits(k),
              k.created_at,
              k.expires_at ?? 'never',
              k.budget ? `${k.budget.spent_micros ?? 0}/${k.budget.limit_micros} per ${k.budget.period}` : 'none',
              cell(k.name),
            ]),
          ),
        );
      },
    },
    show: {
      args: '<id>',
      summary: 'show one key',
      async run(ctx, pos) {
        const [id] = keyIdPositionals(pos, ['id']);
        const { body } = await ctx.admin().call('GET', `/admin/keys/${encodeURIComponent(id!)}`);
        printKey(ctx, body as KeyBody);
      },
    },
    disable: {
      args: '<id>',
      summary: 'disable a key (401 invalid_api_key on every instance within 1 s)',
      async run(ctx, pos) {
        const [id] = keyIdPositionals(pos, ['id']);
        await patch(ctx, id!, { active: false });
      },
    },
    enable: {
      args: '<id>',
      summary: 'enable a disabled key again',
      async run(ctx, pos) {
        const [id] = keyIdPositionals(pos, ['id']);
        await patch(ctx, id!, { active: true });
      },
    },
    rename: {
      args: '<id> <name>',
      summary: 'rename a key',
      async run(ctx, pos) {
        const [id, name] = keyIdPositionals(pos, ['id', 'name']);
        await patch(ctx, id!, { name });
      },
    },
    limits: {
      args: '<id> [--rpm N] [--tpm N] [--clear]',
      summary: "set the key's rate-limit override, or --clear it",
      options: { ...LIMIT_OPTIONS, clear: { type: 'boolean' } },
      async run(ctx, pos) {
        const [id] = keyIdPositionals(pos, ['id']);
        const rate_limits = rateLimits(ctx.values);
        const clear = ctx.values.clear === true;
        if (clear && rate_limits) throw new UsageError('--clear cannot be combined with --rpm/--tpm', G);
        if (!clear && !rate_limits) throw new UsageError('give --rpm and/or --tpm, or --clear', G);
        await patch(ctx, id!, { rate_limits: clear ? null : rate_limits });
      },
    },
    expire: {
      args: '<id> <ISO time|never>',
      summary: 'set when the key expires (401 invalid_api_key from then on), or never',
      async run(ctx, pos) {
        const [id, at] = keyIdPositionals(pos, ['id', 'time']);
        await patch(ctx, id!, { expires_at: expiresAt(at!) });
      },
    },
    budget: {
      args: '<id> --limit-micros N --period day|month|total | --clear',
      summary: "set the key's budget (what it may debit per UTC period), or --clear it",
      options: { 'limit-micros': { type: 'string' }, period: { type: 'string' }, clear: { type: 'boolean' } },
      async run(ctx, pos) {
        const [id] = keyIdPositionals(pos, ['id']);
        const budget = budgetOption(ctx.values, 'limit-micros', 'period');
        const clear = ctx.values.clear === true;
        if (clear && budget) throw new UsageError('--clear cannot be combined with --limit-micros/--period', G);
        if (!clear && !budget) throw new UsageError('give --limit-micros and --period, or --clear', G);
        await patch(ctx, id!, { budget: clear ? null : budget });
      },
    },
    roll: {
      args: '<id> [--grace SECONDS]',
      summary: 'a new key with the same settings (printed once); the old one expires after the grace period',
      options: { grace: { type: 'string' } },
      async run(ctx, pos) {
        const [id] = keyIdPositionals(pos, ['id']);
        const g = optString(ctx.values, 'grace');
        if (g !== undefined && !/^\d+$/.test(g))
          throw new UsageError(`--grace must be a number of seconds ≥ 0, got ${JSON.stringify(g)}`, G);
        const { body } = await ctx.admin().call('POST', `/admin/keys/${encodeURIComponent(id!)}/roll`, {
          ...(g !== undefined && { expires_in_seconds: Number(g) }),
        });
        const k = body as KeyBody & { previous: { id: string; expires_at: string | null } };
        ctx.io.out(
          ctx.json ? json(k) : fields([...keyFields(k), ['previous', `${k.previous.id} expires ${k.previous.expires_at ?? 'never'}`]]),
        );
        ctx.io.err('warning: this is the only time the new key is shown; store it now, it cannot be shown again.');
      },
    },
    delete: {
      args: '<id> --yes',
      summary: 'delete a key for good (refused on every instance within 1 s; cannot be undone)',
      options: { yes: { type: 'boolean' } },
      async run(ctx, pos) {
        const [id] = keyIdPositionals(pos, ['id']);
        if (ctx.values.yes !== true) throw new UsageError('deleting a key cannot be undone: add --yes', G);
        await ctx.admin().call('DELETE', `/admin/keys/${encodeURIComponent(id!)}`);
        ctx.io.out(ctx.json ? json({ id, deleted: true }) : `deleted ${id}`);
      },
    },
    scopes: {
      args: '<id> <scope,scope…>',
      summary: "replace the key's scopes, e.g. chat,models,shares,embeddings",
      async run(ctx, pos) {
        const [id, list] = keyIdPositionals(pos, ['id', 'scopes']);
        const scopes = list!
          .split(',')
          .map((s) => s.trim())
          .filter(Boolean);
        await patch(ctx, id!, { scopes });
      },
    },
  },
};
