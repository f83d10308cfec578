/** `POST /admin/ledger/export`: one export pass now (`tollgate ledger export --once`). */
import { GatewayError } from '../http/errors.ts';
import { sendJson } from '../http/respond.ts';
import type { Route } from '../http/router.ts';
import type { RequestContext } from '../http/context.ts';
import { ADMIN_ERRORS } from '../admin/keys.ts';
import type { LedgerExporter } from './exporter.ts';

export function ledgerRoutes(d: { exporter: LedgerExporter | undefined }): Route[] {
  async function exportNow(ctx: RequestContext) {
    if (!d.exporter)
      throw new GatewayError('not_found', 'Ledger export is disabled: set ledger.export.enabled and an S3 bucket (docs/ledger-export.md).');
    sendJson(ctx.res, 200, await d.exporter.runOnce());
  }
  return [
    {
      method: 'POST',
      pattern: '/admin/ledger/export',
      handler: exportNow,
      admin: true,
      doc: {
        auth: 'admin',
        summary: 'Run one ledger export pass now (SPEC §10); shares a pass already running',
        responses: {
          200: {
            description: 'What the pass did',
            schema: {
              type: 'object',
              properties: {
                accounts: { type: 'integer' },
                busy: { type: 'integer' },
                entries: { type: 'integer' },
                objects: { type: 'integer' },
                trimmed: { type: 'integer' },
                failed: { type: 'integer' },
                conflicts: {
                  type: 'integer',
                  description: 'Objects written beside one holding entries Redis no longer has (Redis lost writes)',
                },
              },
            },
          },
          ...ADMIN_ERRORS,
          404: 'Admin API disabled, or ledger export disabled',
        },
      },
    },
  ];
}
