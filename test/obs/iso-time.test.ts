// The cached ISO clock (src/obs/iso-time.ts) against Date's own formatting, cache reuse included.
import t from 'tap';
import fc from 'fast-check';
import { isoTime } from '../../src/obs/iso-time.ts';

const MAX_TIME = 8.64e15;

t.test('equals new Date(ms).toISOString() for any time value, in any order', async (t) => {
  const time = fc.oneof(
    fc.integer({ min: -MAX_TIME, max: MAX_TIME }),
    fc.double({ min: -MAX_TIME, max: MAX_TIME, noNaN: true }),
    fc.integer({ min: 1_700_000_000_000, max: 1_800_000_000_000 }),
  );
  fc.assert(
    fc.property(fc.array(time, { minLength: 1, maxLength: 20 }), (times) => {
      for (const ms of times) t.equal(isoTime(ms), new Date(ms).toISOString(), String(ms));
    }),
    { numRuns: 300 },
  );
});

t.test('within one second only the milliseconds change; the next second starts a new head', async (t) => {
  const base = Date.UTC(2026, 10, 25, 9, 59, 59);
  for (const ms of [0, 1, 9, 10, 99, 100, 999]) t.equal(isoTime(base + ms), new Date(base + ms).toISOString());
  t.equal(isoTime(base + 1000), '2026-11-25T10:00:00.000Z');
  t.equal(isoTime(base - 1), '2026-11-25T09:59:58.999Z');
  t.equal(isoTime(-1), '1969-12-31T23:59:59.999Z');
  t.equal(isoTime(Date.UTC(12000, 0, 1, 0, 0, 1, 7)), '+012000-01-01T00:00:01.007Z');
});

t.test('an invalid time throws like Date does', async (t) => {
  t.throws(() => isoTime(NaN), RangeError);
  t.throws(() => isoTime(MAX_TIME + 1), RangeError);
});
