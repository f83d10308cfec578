// docs/security.md names the config of every control: each key it names must be one the config accepts,
// and every SPEC §12 key must be named there (a control renamed or added without its docs fails here).
import t from 'tap';
import { readFileSync } from 'node:fs';
import { compileConfig } from '../../src/config/schema.ts';

const doc = readFileSync(new URL('../../docs/security.md', import.meta.url), 'utf8');
const SECTION_KEYS = /`((?:limits|shares|auth|server|upstream)\.[a-z_]+)`/g;

t.test('every config key docs/security.md names is accepted by the config', async (t) => {
  const named = [...new Set([...doc.matchAll(SECTION_KEYS)].map((m) => m[1]!))];
  t.ok(named.length >= 12, named.join(', '));
  const model = { name: 'm', price: { input: 1, output: 1 }, upstreams: [{ url: 'http://x/v1' }] };
  for (const k of named) {
    const [section, field] = k.split('.') as [string, string];
    const value = field.endsWith('_types') || field.endsWith('_headers') || field === 'trusted_proxies' ? [] : 64;
    let message = '';
    try {
      compileConfig({ models: [model], [section]: { [field]: value } }, {});
    } catch (e) {
      message = (e as Error).message;
    }
    t.notMatch(message, /unknown field/, `${k} is a config key`);
  }
});

t.test('every SPEC §12 config key is in docs/security.md', async (t) => {
  for (const k of [
    'limits.max_n',
    'limits.max_inflight_body_bytes',
    'limits.max_concurrent_per_key',
    'upstream.forward_headers',
    'upstream.return_headers',
    'server.trusted_proxies',
    'server.metrics_port',
    'shares.max_per_account',
    'shares.max_bytes_per_account',
    'shares.create_per_minute',
    'shares.inline_types',
    'shares.failed_reads_per_minute',
    'auth.failed_per_minute',
    'auth.admin_failed_per_minute',
  ]) {
    t.ok(doc.includes(`\`${k}\``), k);
  }
  t.match(doc, /maxmemory-policy noeviction/);
});

t.test('every SPEC §13 control is in the isolation model of docs/security.md', async (t) => {
  const model = doc.slice(doc.indexOf('## Tenant isolation'));
  t.ok(model.length > 100, 'the section exists');
  for (const k of [
    'limits.max_keys_per_account',
    'limits.max_keys_made_per_day',
    'limits.max_concurrent_per_account',
    'limits.max_inflight_body_bytes_per_key',
    'limits.max_json_depth',
    'server.body_timeout_ms',
    'rate_limits.test_account',
    'shares.failed_reads_per_minute',
  ]) {
    t.ok(model.includes(`\`${k}\``), k);
  }
  for (const unit of ['key', 'account', 'process', 'address']) t.match(model, new RegExp(`^\\| ${unit} \\|`, 'm'), `rows per ${unit}`);
  t.notMatch(doc, /Known limit of the body budget/, 'the known limit SPEC §13 closes is gone');
});
