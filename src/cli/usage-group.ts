/** `tollgate usage show|rebuild`: usage aggregates per day × key × model (SPEC §10). */
import type { UsageRow } from '../usage/usage.ts';
import { expectPositionals, needString, optString } from './args.ts';
import type { CommandGroup } from './context.ts';
import { fields, json, table } from './output.ts';
import { LONG_CALL_MS } from './client.ts';

const G = 'usage';

const range = (from: string | undefined, to: string | undefined) => ({
  ...(from !== undefined && { from }),
  ...(to !== undefined && { to }),
});

export const usageGroup: CommandGroup = {
  name: G,
  summary: 'usage aggregates per UTC day, key and model',
  notes: [
    'Days are UTC, YYYY-MM-DD, both ends inclusive; --to defaults to today and --from to --to.',
    '--group-by takes any non-empty subset of day,key,model (default all three); rows are summed over the rest.',
    'Aggregates lag the ledger by up to 2 s; the ledger is the truth, and `rebuild` recomputes live keys from it.',
  ],
  commands: {
    show: {
      args: '--account A [--from DAY] [--to DAY] [--group-by day,key,model]',
      summary: "show an account's usage",
      options: { account: { type: 'string' }, from: { type: 'string' }, to: { type: 'string' }, 'group-by': { type: 'string' } },
      async run(ctx, pos) {
        expectPositionals(pos, [], G);
        const account = needString(ctx.values, 'account', G);
        const q = new URLSearchParams(range(optString(ctx.values, 'from'), optString(ctx.values, 'to')));
        const groupBy = optString(ctx.values, 'group-by');
        if (groupBy !== undefined) q.set('group_by', groupBy);
        const qs = q.toString();
        const { body } = await ctx.admin().call('GET', `/admin/accounts/${encodeURIComponent(account)}/usage${qs ? `?${qs}` : ''}`);
        const rows = (body as { rows: UsageRow[] }).rows;
        if (ctx.json) return ctx.io.out(json(body));
        const dims = (['day', 'key_id', 'model'] as const).filter((d) => rows.some((r) => r[d] !== undefined));
        ctx.io.out(
          table(
            [...dims, 'requests', 'prompt_tokens', 'completion_tokens', 'cost_micros', 'cached_tokens'],
            rows.map((r) => [
              ...dims.map((d) => r[d] ?? ''),
              String(r.requests),
              String(r.prompt_tokens),
              String(r.completion_tokens),
              String(r.cost_micros),
              String(r.cached_tokens ?? 0),
            ]),
          ),
        );
      },
    },
    rebuild: {
      args: '--account A [--from DAY] [--to DAY]',
      summary: "recompute an account's live-key aggregates from the ledger (Redis and exported objects)",
      options: { account: { type: 'string' }, from: { type: 'string' }, to: { type: 'string' } },
      async run(ctx, pos) {
        expectPositionals(pos, [], G);
        const account = needString(ctx.values, 'account', G);
        const body = range(optString(ctx.values, 'from'), optString(ctx.values, 'to'));
        const res = await ctx.admin().call('POST', `/admin/accounts/${encodeURIComponent(account)}/usage/rebuild`, body, {
          timeoutMs: LONG_CALL_MS,
        });
        const r = res.body as Record<string, unknown>;
        ctx.io.out(ctx.json ? json(r) : fields(Object.entries(r).map(([k, v]) => [k, String(v)])));
      },
    },
  },
};
