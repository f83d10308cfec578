/** `tollgate console link`: mint a single-use console sign-in link for an account's member or an operator (SPEC §9). */
import { expectPositionals, optPositiveInt, optString, UsageError } from './args.ts';
import type { CommandGroup } from './context.ts';
import { fields, json } from './output.ts';

const G = 'console';

/** The `console` command group. */
export const consoleGroup: CommandGroup = {
  name: G,
  summary: 'web console: mint sign-in links',
  notes: [
    'A link signs one browser in, once, within its lifetime (--ttl seconds, default 300: 60..86400 for a member link, 60..3600 for an operator link).',
    'Treat it like a password until it is used: whoever opens it first gets the session.',
    'End every session of an account, and revoke its links not yet opened: DELETE /admin/console/sessions?account=<id> on the admin API.',
  ],
  commands: {
    link: {
      args: '(--account <id> | --operator) [--ttl SECONDS]',
      summary: 'print a sign-in link to the console for a member of an account, or for an operator',
      options: { account: { type: 'string' }, operator: { type: 'boolean' }, ttl: { type: 'string' } },
      async run(ctx, pos) {
        expectPositionals(pos, [], G);
        const account = optString(ctx.values, 'account');
        const operator = ctx.values.operator === true;
        if ((account === undefined) === !operator) throw new UsageError('give exactly one of --account <id> and --operator', G);
        const ttl = optPositiveInt(ctx.values, 'ttl', G);
        const body = { ...(account !== undefined ? { account } : { operator: true }), ...(ttl !== undefined && { ttl_seconds: ttl }) };
        const res = await ctx.admin().call('POST', '/admin/console/sessions', body);
        const link = res.body as { url: string; expires_at: string };
        ctx.io.out(
          ctx.json
            ? json(link)
            : fields([
                ['url', link.url],
                ['for', account !== undefined ? `a member of ${account}` : 'an operator'],
                ['expires_at', link.expires_at],
              ]),
        );
      },
    },
  },
};
