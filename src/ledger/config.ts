/** The `ledger` section (SPEC §10): what stays in Redis, and the export of the ledger to S3 (docs/ledger-export.md). */
import { bool, noUnknown, num, object, str } from '../config/fields.ts';
import { s3Configured, s3Section, type S3Config } from '../config/s3.ts';

export interface LedgerConfig {
  /** Exported entries older than this are trimmed from Redis; 0 = as soon as exported. */
  readonly retentionDays: number;
  readonly export: {
    readonly enabled: boolean;
    readonly intervalSeconds: number;
    /** Entries per object at most (one account's run, one day). */
    readonly batchSize: number;
    /** Where objects go: `ledger.export.s3`, else `shares.s3`. */
    readonly s3: S3Config;
    /** Object key prefix inside the bucket. */
    readonly prefix: string;
  };
}

export const LEDGER_FIELDS = ['retention_days', 'export'] as const;
/** The largest `ledger.export.batch_size` (see its use below). */
export const MAX_EXPORT_BATCH = 20_000;

export const LEDGER_EXPORT_FIELDS = ['enabled', 'interval_seconds', 'batch_size', 'prefix', 's3'] as const;

/** Compiles `ledger`; `sharesS3` is the raw `shares.s3`, the export's bucket when it names none. */
export function ledgerSection(v: unknown, sharesS3: unknown, env: NodeJS.ProcessEnv): LedgerConfig {
  const ledger = object(v, 'ledger', true);
  noUnknown(ledger, 'ledger', LEDGER_FIELDS);
  const exp = object(ledger.export, 'ledger.export', true);
  noUnknown(exp, 'ledger.export', LEDGER_EXPORT_FIELDS);
  // The export's bucket: its own section, else the shares' (parsed the same way, same field paths).
  const exportS3 = exp.s3 === undefined ? s3Section(sharesS3, 'shares.s3', env, 'shares') : s3Section(exp.s3, 'ledger.export.s3', env);
  return {
    retentionDays: num(ledger.retention_days, 'ledger.retention_days', { fallback: 7, min: 0, max: 36_500 }),
    export: {
      // SPEC §10: on by default wherever there is a bucket to export to.
      enabled: bool(exp.enabled, 'ledger.export.enabled', s3Configured(exportS3)),
      intervalSeconds: num(exp.interval_seconds, 'ledger.export.interval_seconds', { fallback: 60, min: 1, max: 86_400 }),
      // At most 20,000: a batch is ~1.9 KB of heap per entry while it is encoded and written, and four
      // accounts export at once (exporter.ts), so 4 × 20,000 entries stay well inside the 256 MB heap
      // (docs/ledger-export.md); 1,000,000 allowed ~7.6 GB.
      batchSize: num(exp.batch_size, 'ledger.export.batch_size', { fallback: 10_000, min: 1, max: MAX_EXPORT_BATCH, integer: true }),
      prefix: str(exp.prefix, 'ledger.export.prefix', 'ledger/').replace(/\/*$/, '/'),
      s3: exportS3,
    },
  };
}
