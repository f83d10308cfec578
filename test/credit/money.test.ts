import t from 'tap';
import { creditsToMicros, formatCredits, parseMicros } from '../../src/credit/money.ts';

t.test('creditsToMicros converts exact decimals without floating point', async (t) => {
  t.equal(creditsToMicros('1.5'), 1_500_000);
  t.equal(creditsToMicros('0.1'), 100_000, '0.1 * 1e6 would be 100000.00000000001 in floating point');
  t.equal(creditsToMicros('0.000001'), 1);
  t.equal(creditsToMicros('2'), 2_000_000);
  t.equal(creditsToMicros('.25'), 250_000);
  t.equal(creditsToMicros('3.'), 3_000_000);
  t.equal(creditsToMicros('-0.005'), -5_000);
  t.equal(creditsToMicros('1.5000000000'), 1_500_000, 'trailing zeros past six decimals are exact');
  t.equal(creditsToMicros('9007199254.740991'), Number.MAX_SAFE_INTEGER);
  t.equal(Object.is(creditsToMicros('-0'), 0), true, 'no negative zero');
});

t.test('creditsToMicros refuses what is not a whole number of micro-credits', async (t) => {
  t.throws(() => creditsToMicros('0.0000001'), /at most 6 decimals/);
  t.throws(() => creditsToMicros('1e3'), /not a decimal number/);
  t.throws(() => creditsToMicros('abc'), /not a decimal number/);
  t.throws(() => creditsToMicros('.'), /not a decimal number/);
  t.throws(() => creditsToMicros(''), /not a decimal number/);
  t.throws(() => creditsToMicros('9007199254.740992'), /too large/);
});

t.test('parseMicros takes integers only, with optional _ separators', async (t) => {
  t.equal(parseMicros('1500000'), 1_500_000);
  t.equal(parseMicros('1_500_000'), 1_500_000);
  t.equal(parseMicros('-5000'), -5_000);
  t.throws(() => parseMicros('1.5'), /integer number of micro-credits/);
  t.throws(() => parseMicros('1__0'), /integer/);
  t.throws(() => parseMicros('9007199254740992'), /too large/);
});

t.test('formatCredits prints exact decimals, trailing zeros trimmed', async (t) => {
  t.equal(formatCredits(1_500_000), '1.5');
  t.equal(formatCredits(0), '0');
  t.equal(formatCredits(1), '0.000001');
  t.equal(formatCredits(-1), '-0.000001');
  t.equal(formatCredits(-2_250_000), '-2.25');
  t.equal(formatCredits(Number.MAX_SAFE_INTEGER), '9007199254.740991');
  for (const s of ['0.1', '123.456789', '-7.000001']) t.equal(formatCredits(creditsToMicros(s)), s, `round trip ${s}`);
});
