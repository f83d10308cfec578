/** `tollgate keys …`: create, list, show, disable, enable, rename and per-key limits (SPEC §2, §2a). */
import { expectPositionals, needString, optList, optPositiveInt, UsageError, type Values } from './args.ts';
import type { CliContext, CommandGroup } from './context.ts';
import { cell, fields, json, table } from './output.ts';

const G = 'keys';

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
  ];
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

/** The `keys` command group. */
export const keysGroup: CommandGroup = {
  name: G,
  summary: 'API keys: create, list, disable, enable, rename, limits, scopes',
  notes: [
    'The full key is printed once, by `keys create`, and can never be read again (only its SHA-256 is stored).',
    '--scopes: any of chat,models,shares,embeddings (default all). --models: allow-list of model names (default all).',
    "`keys scopes` replaces the key's scopes: how a key made before a scope existed (embeddings) is granted it.",
    "`keys limits` replaces the key's override: limits left out fall back to the config defaults.",
  ],
  commands: {
    create: {
      args: '--account A --env live|test --name N [--scopes chat,models] [--models m1,m2] [--rpm N] [--tpm N]',
      summary: 'create a key and print it (the only time the full key is shown)',
      options: {
        account: { type: 'string' },
        env: { type: 'string' },
        name: { type: 'string' },
        scopes: { type: 'string' },
        models: { type: 'string' },
        ...LIMIT_OPTIONS,
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
        const body = { account, env, name, ...(scopes && { scopes }), ...(models && { models }), ...(rate_limits && { rate_limits }) };
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
            ['id', 'env', 'active', 'key', 'scopes', 'models', 'rate_limits', 'created_at', 'name'],
            keys.map((k) => [
              k.id,
              k.env,
              k.active ? 'yes' : 'no',
              masked(k),
              k.scopes.join(','),
              k.models.length ? k.models.join(',') : 'all',
              limits(k),
              k.created_at,
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
        const [id] = expectPositionals(pos, ['id'], G);
        const { body } = await ctx.admin().call('GET', `/admin/keys/${encodeURIComponent(id!)}`);
        printKey(ctx, body as KeyBody);
      },
    },
    disable: {
      args: '<id>',
      summary: 'disable a key (401 invalid_api_key on every instance within 1 s)',
      async run(ctx, pos) {
        const [id] = expectPositionals(pos, ['id'], G);
        await patch(ctx, id!, { active: false });
      },
    },
    enable: {
      args: '<id>',
      summary: 'enable a disabled key again',
      async run(ctx, pos) {
        const [id] = expectPositionals(pos, ['id'], G);
        await patch(ctx, id!, { active: true });
      },
    },
    rename: {
      args: '<id> <name>',
      summary: 'rename a key',
      async run(ctx, pos) {
        const [id, name] = expectPositionals(pos, ['id', 'name'], G);
        await patch(ctx, id!, { name });
      },
    },
    limits: {
      args: '<id> [--rpm N] [--tpm N] [--clear]',
      summary: "set the key's rate-limit override, or --clear it",
      options: { ...LIMIT_OPTIONS, clear: { type: 'boolean' } },
      async run(ctx, pos) {
        const [id] = expectPositionals(pos, ['id'], G);
        const rate_limits = rateLimits(ctx.values);
        const clear = ctx.values.clear === true;
        if (clear && rate_limits) throw new UsageError('--clear cannot be combined with --rpm/--tpm', G);
        if (!clear && !rate_limits) throw new UsageError('give --rpm and/or --tpm, or --clear', G);
        await patch(ctx, id!, { rate_limits: clear ? null : rate_limits });
      },
    },
    scopes: {
      args: '<id> <scope,scope…>',
      summary: "replace the key's scopes, e.g. chat,models,shares,embeddings",
      async run(ctx, pos) {
        const [id, list] = expectPositionals(pos, ['id', 'scopes'], G);
        const scopes = list!
          .split(',')
          .map((s) => s.trim())
          .filter(Boolean);
        await patch(ctx, id!, { scopes });
      },
    },
  },
};
