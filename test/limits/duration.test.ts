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
