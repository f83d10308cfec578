/** `tollgate ledger export --once`: one export pass now, through the admin API (SPEC §10). */
import type { ExportReport } from '../ledger/exporter.ts';
import { expectPositionals, UsageError } from './args.ts';
import { ApiError, LONG_CALL_MS } from './client.ts';
import type { CommandGroup } from './context.ts';
import { fields, json } from './output.ts';

const G = 'ledger';

export const ledgerGroup: CommandGroup = {
  name: G,
  summary: 'the ledger export to S3 (docs/ledger-export.md)',
  notes: [
    'Every instance exports on its own timer (ledger.export.interval_seconds); --once runs one pass now and waits for it.',
    'Accounts another instance is exporting at that moment are counted as busy and left to it.',
    'Exit code 1 when an account failed (its entries stay in Redis and are retried on the next pass).',
  ],
  commands: {
    export: {
      args: '--once',
      summary: 'export every account\u2019s new ledger entries to S3 now, then trim what retention allows',
      options: { once: { type: 'boolean' } },
      async run(ctx, pos) {
        expectPositionals(pos, [], G);
        if (ctx.values.once !== true) throw new UsageError('--once is required (the gateway runs the export on its own timer)', G);
        const { body } = await ctx.admin().call('POST', '/admin/ledger/export', undefined, { timeoutMs: LONG_CALL_MS });
        const r = body as ExportReport;
        ctx.io.out(
          ctx.json
            ? json(r)
            : fields([
                ['accounts', String(r.accounts)],
                ['busy', String(r.busy)],
                ['entries', String(r.entries)],
                ['objects', String(r.objects)],
                ['trimmed', String(r.trimmed)],
                ['failed', String(r.failed)],
                ['conflicts', String(r.conflicts)],
              ]),
        );
        if (r.failed > 0)
          throw new ApiError(
            'export_incomplete',
            `${r.failed} account(s) failed to export; see the gateway's log. Their entries stay in Redis.`,
          );
      },
    },
  },
};
