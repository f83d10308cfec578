/**
 * What the console costs. On the API's hot path: the one prefix test every public request now passes
 * (gateway.ts sends /console paths to the console's edge). Off it: rendering the heaviest pages, 50
 * keys, a 50-entry ledger page and a usage page of 30 days × 5 keys × 3 models, with escaping. Run: `node bench/micro/console.bench.ts`.
 */
import { isConsolePath } from '../../src/console/setup.ts';
import { loadAssets } from '../../src/console/assets.ts';
import { page } from '../../src/console/layout.ts';
import { keysBody } from '../../src/console/pages/keys.ts';
import { creditBody } from '../../src/console/pages/credit.ts';
import { lastDays, usageBody } from '../../src/console/pages/usage.ts';
import type { KeyRecord, LedgerEntry } from '../../src/store/types.ts';
import { createReport, nsPerOp } from './timing.ts';

const paths = ['/v1/chat/completions', '/v1/models', '/v1/shares/A1b2C3d4E5f6G7h8J9k1m2', '/console/accounts/acme/keys'];
const assets = loadAssets();
const viewer = { account: 'acme', created_at: '', expires_at: '', hash: '' };
const keys: KeyRecord[] = Array.from({ length: 50 }, (_, i) => ({
  id: `key_${String(i).padStart(16, '0')}`,
  account: 'acme',
  env: i % 2 ? 'live' : 'test',
  name: `backend <${i}> & "friends"`,
  active: i % 5 !== 0,
  scopes: ['chat', 'models', 'shares'],
  models: [],
  rate_limits: null,
  created_at: '2026-11-25T08:00:00.000Z',
  last4: 'abcd',
  version: 1,
}));
const entries: LedgerEntry[] = Array.from({ length: 50 }, (_, i) => ({
  id: `1795594073077-${i}`,
  ts: '2026-11-25T08:00:00.000Z',
  kind: 'debit',
  amount_micros: -1234 - i,
  request_id: `req_${'x'.repeat(22)}`,
  key_id: keys[0]!.id,
  model: 'llama-3.1-8b',
  prompt_tokens: 120,
  completion_tokens: 340,
  usage_source: 'upstream',
  hold_micros: 5000,
}));
const state = { id: 'acme', balance_micros: 34_999_411, held_micros: 0 };

const report = createReport();
report.add(
  'isConsolePath (API and console paths)',
  nsPerOp((i) => isConsolePath(paths[i & 3]!), 2_000_000),
  'ns/op',
);
report.add(
  'keys page, 50 keys',
  nsPerOp(
    () =>
      page(assets, {
        title: 'API keys',
        viewer,
        account: 'acme',
        section: 'keys',
        body: keysBody({
          account: 'acme',
          views: keys.map((record, i) => ({
            record,
            lastUsed: '2026-11-25T08:04:00Z',
            budget: i % 2 ? { limit_micros: 50_000_000, period: 'month' as const, spent_micros: 1_234_567 } : null,
          })),
          total: keys.length,
          listing: { q: '', sort: 'created', dir: 'asc' },
          nowMs: Date.parse('2026-11-25T12:00:00Z'),
          operator: false,
        }),
      }).value.length,
    2_000,
  ) / 1000,
  'µs/op',
);
report.add(
  'credit page, 50 ledger entries',
  nsPerOp(
    () =>
      page(assets, {
        title: 'Credit',
        viewer,
        account: 'acme',
        section: 'credit',
        body: creditBody({ account: 'acme', state, entries, older: entries.at(-1)!.id, paged: false, operator: true }),
      }).value.length,
    2_000,
  ) / 1000,
  'µs/op',
);
const days = lastDays('2026-11-25', 30);
const usageRows = days.flatMap((day, d) =>
  keys.slice(0, 5).flatMap((k, i) =>
    ['llama', 'qwen', 'mistral'].map((model, m) => ({
      day,
      key_id: k.id,
      model,
      requests: 1 + ((d + i + m) % 40),
      prompt_tokens: 1000 * (d + 1),
      completion_tokens: 300 * (i + m + 1),
      cost_micros: 1234 * (d + i + m + 1),
      cached_tokens: 0,
    })),
  ),
);
report.add(
  'usage page, 450 rows (30 days × 5 keys × 3 models)',
  nsPerOp(
    () =>
      page(assets, {
        title: 'Usage',
        viewer,
        account: 'acme',
        section: 'usage',
        body: usageBody({
          account: 'acme',
          period: days,
          days,
          omittedDays: 0,
          maxFields: 50_000,
          rows: usageRows,
          keys,
          models: ['llama', 'mistral', 'qwen'],
          key: undefined,
          model: undefined,
        }),
      }).value.length,
    500,
  ) / 1000,
  'µs/op',
);
report.print();
