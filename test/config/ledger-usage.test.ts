// The `ledger` and `usage` config sections (SPEC §10), and how the store writes debits to the ledger: defaults, where the export writes, when it is on,
// and field-path errors.
import t from 'tap';
import { compileConfig } from '../../src/config/schema.ts';
import { ConfigError } from '../../src/config/errors.ts';

const MODELS = [{ name: 'm', price: { input: 1, output: 1 }, upstreams: [{ url: 'http://127.0.0.1:9/v1' }] }];
const S3 = { endpoint: 'http://127.0.0.1:9000', bucket: 'files', force_path_style: true };
const compile = (doc: Record<string, unknown>, env: NodeJS.ProcessEnv = {}) => compileConfig({ models: MODELS, ...doc }, env);

function errorPath(doc: Record<string, unknown>): string | undefined {
  try {
    compile(doc);
  } catch (e) {
    if (e instanceof ConfigError) return e.path;
    throw e;
  }
  return undefined;
}

t.test('defaults: retention 7 days, every 60 s, 10000 a batch, usage kept 400 days and flushed every second', async (t) => {
  const c = compile({});
  t.equal(c.ledger.retentionDays, 7);
  t.equal(c.ledger.export.intervalSeconds, 60);
  t.equal(c.ledger.export.batchSize, 10_000);
  t.equal(c.ledger.export.prefix, 'ledger/');
  t.equal(c.usage.retentionDays, 400);
  t.equal(c.usage.flushIntervalMs, 1000);
  t.equal(c.ledger.export.enabled, false, 'no bucket configured: off');
});

t.test('on by default with a configured bucket: shares.s3, or ledger.export.s3 which wins', async (t) => {
  const shared = compile({ shares: { s3: S3 } });
  t.equal(shared.ledger.export.enabled, true);
  t.equal(shared.ledger.export.s3.bucket, 'files', "the shares' bucket");
  const own = compile({ shares: { s3: S3 }, ledger: { export: { s3: { bucket: 'ledger', region: 'eu-west-1' } } } });
  t.equal(own.ledger.export.s3.bucket, 'ledger');
  t.equal(own.ledger.export.s3.region, 'eu-west-1');
  t.equal(own.ledger.export.enabled, false, 'its own bucket without endpoint or credentials: off unless enabled');
  const keyed = compile({ ledger: { export: { s3: { bucket: 'ledger' } } } }, { AWS_ACCESS_KEY_ID: 'a', AWS_SECRET_ACCESS_KEY: 'b' });
  t.equal(keyed.ledger.export.enabled, true, 'credentials from the environment count');
  t.equal(compile({ shares: { s3: S3 }, ledger: { export: { enabled: false } } }).ledger.export.enabled, false, 'enabled: false wins');
  t.equal(
    compile({ ledger: { retention_days: 0, export: { enabled: true, prefix: 'usage/ledger' } } }).ledger.export.prefix,
    'usage/ledger/',
  );
});

t.test('bad values name their field', async (t) => {
  t.equal(errorPath({ ledger: { retention_days: -1 } }), 'ledger.retention_days');
  t.equal(errorPath({ ledger: { export: { interval_seconds: 0 } } }), 'ledger.export.interval_seconds');
  t.equal(errorPath({ ledger: { export: { batch_size: 2.5 } } }), 'ledger.export.batch_size');
  t.equal(
    errorPath({ ledger: { export: { batch_size: 20_001 } } }),
    'ledger.export.batch_size',
    'a batch bounded in memory: at most 20,000',
  );
  t.equal(errorPath({ ledger: { export: { enabled: 'yes' } } }), 'ledger.export.enabled');
  t.equal(errorPath({ ledger: { export: { bucket: 'x' } } }), 'ledger.export.bucket', 'unknown field');
  t.equal(errorPath({ ledger: { export: { s3: { region: 'x' } } } }), 'ledger.export.s3.bucket', 'its own bucket needs a name');
  t.equal(errorPath({ usage: { flush_interval_ms: 2000 } }), 'usage.flush_interval_ms', 'at most every second (SPEC §10 lag)');
  t.equal(errorPath({ usage: { retention_days: 0 } }), 'usage.retention_days');
  t.equal(errorPath({ usage: { keep: 1 } }), 'usage.keep');
});

t.test('store.debit_entries: compact by default, fields or packed on request, anything else names the field', async (t) => {
  t.equal(compile({}).store.debitEntries, 'compact');
  t.equal(compile({ store: { debit_entries: 'fields' } }).store.debitEntries, 'fields');
  t.equal(compile({ store: { debit_entries: 'packed' } }).store.debitEntries, 'packed');
  t.equal(errorPath({ store: { debit_entries: 'json' } }), 'store.debit_entries');
});
