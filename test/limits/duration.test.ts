import t from 'tap';
import { formatDuration } from '../../src/limits/duration.ts';

t.test('formats durations the way OpenAI writes x-ratelimit-reset-* (SPEC §2a)', async (t) => {
  t.equal(formatDuration(250), '250ms');
  t.equal(formatDuration(1000), '1s');
  t.equal(formatDuration(1500), '1.5s');
  t.equal(formatDuration(59_999), '59.999s');
  t.equal(formatDuration(360_000), '6m0s');
  t.equal(formatDuration(0), '0ms');
});

t.test('sub-second values stay in ms; seconds keep at most 3 decimals without trailing zeros', async (t) => {
  t.equal(formatDuration(1), '1ms');
  t.equal(formatDuration(999), '999ms');
  t.equal(formatDuration(1001), '1.001s');
  t.equal(formatDuration(1010), '1.01s');
  t.equal(formatDuration(2000), '2s');
  t.equal(formatDuration(60_000), '1m0s');
  t.equal(formatDuration(61_500), '1m1.5s');
  t.equal(formatDuration(119_999), '1m59.999s');
});

t.test('fractions of a millisecond round up (never announce a reset earlier than it is); negatives clamp to 0', async (t) => {
  t.equal(formatDuration(0.2), '1ms');
  t.equal(formatDuration(999.5), '1s');
  t.equal(formatDuration(59_999.5), '1m0s');
  t.equal(formatDuration(-5), '0ms');
});

t.test('seconds from integers agree with the decimal definition (toFixed(3), trailing zeros trimmed) everywhere', async (t) => {
  const byDecimals = (ms: number): string => {
    const v = Math.max(0, Math.ceil(ms));
    if (v < 1000) return `${v}ms`;
    const h = Math.floor(v / 3_600_000);
    const m = Math.floor((v % 3_600_000) / 60_000);
    const s = String(Number(((v % 60_000) / 1000).toFixed(3)));
    return h > 0 ? `${h}h${m}m${s}s` : m > 0 ? `${m}m${s}s` : `${s}s`;
  };
  let mismatches = 0;
  // Every millisecond of the first 3 minutes, then values drawn up to 10 hours, fractions included.
  for (let ms = 0; ms < 180_000; ms++) if (formatDuration(ms) !== byDecimals(ms)) mismatches++;
  for (let i = 0; i < 100_000; i++) {
    const ms = Math.random() * 36_000_000;
    if (formatDuration(ms) !== byDecimals(ms)) mismatches++;
  }
  t.equal(mismatches, 0);
});
