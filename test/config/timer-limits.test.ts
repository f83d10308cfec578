// Timer fields past 2^31 − 1 ms (audit-deploy #3): Node turns such a setTimeout into 1 ms, so
// `server.drain_seconds: 2200000` cut every stream at SIGTERM at once and `store.command_timeout_ms: 3e9`
// failed Redis commands. Every config value used as a timer delay is refused above what a timer takes.
import t from 'tap';
import { compileConfig } from '../../src/config/schema.ts';
import { MAX_TIMER_MS, MAX_TIMER_SECONDS } from '../../src/config/fields.ts';

const models = [{ name: 'm', price: { input: 1, output: 1 }, upstreams: [{ url: 'http://x/v1' }] }];

/** [section, field, too large, largest accepted] */
const FIELDS: [string, string, number, number][] = [
  ['server', 'drain_seconds', 2_200_000, 2_147_478],
  ['server', 'spool_scan_seconds', MAX_TIMER_SECONDS + 1, MAX_TIMER_SECONDS],
  ['server', 'headers_timeout_ms', 3e9, MAX_TIMER_MS],
  ['server', 'request_timeout_ms', MAX_TIMER_MS + 1, MAX_TIMER_MS],
  ['server', 'body_timeout_ms', 3e9, MAX_TIMER_MS],
  ['server', 'write_timeout_ms', 3e9, MAX_TIMER_MS],
  ['store', 'command_timeout_ms', 3_000_000_000, MAX_TIMER_MS],
  ['credit', 'reaper_interval_ms', 3e9, MAX_TIMER_MS],
  ['credit', 'hold_margin_seconds', 3e6, MAX_TIMER_SECONDS],
  ['upstream', 'connect_timeout_ms', 3e9, MAX_TIMER_MS],
  ['upstream', 'headers_timeout_ms', 3e9, MAX_TIMER_MS],
  ['upstream', 'idle_timeout_ms', 3e9, MAX_TIMER_MS],
  ['upstream', 'total_timeout_ms', 3e9, MAX_TIMER_MS],
  ['upstream', 'eject_seconds', 3e6, MAX_TIMER_SECONDS],
  ['upstream', 'max_eject_seconds', 3e6, MAX_TIMER_SECONDS],
  ['rate_limits', 'window_seconds', 3e6, MAX_TIMER_SECONDS],
  ['shares', 'orphan_grace_seconds', 3e6, MAX_TIMER_SECONDS],
];

t.equal(MAX_TIMER_MS, 2 ** 31 - 1, 'the largest delay a Node timer takes');
t.equal(MAX_TIMER_SECONDS, Math.floor(MAX_TIMER_MS / 1000));

for (const [section, field, tooLarge, largest] of FIELDS) {
  t.test(`${section}.${field}`, async (t) => {
    t.throws(
      () => compileConfig({ models, [section]: { [field]: tooLarge } }, {}),
      { name: 'ConfigError', message: `config: ${section}.${field}: must be <= ${largest}` },
      `${tooLarge} is refused, naming the field`,
    );
    t.doesNotThrow(() => compileConfig({ models, [section]: { [field]: largest } }, {}), `${largest} is accepted`);
  });
}

t.test('drain + the 5 s shutdown margin fits a timer', async (t) => {
  const c = compileConfig({ models, server: { drain_seconds: 2_147_478 } }, {});
  t.ok(c.server.drainSeconds * 1000 + 5_000 <= MAX_TIMER_MS);
});
