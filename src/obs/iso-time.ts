/**
 * `new Date(ms).toISOString()` for the hot path: the text up to the second is kept and reused, so a call
 * is a division and a concatenation instead of a Date and its formatting (~380 ns: bench/micro/log-line.bench.ts).
 * Every request line carries one (pino's `time`) and every live settle another (the ledger entry's `ts`).
 * Same output as toISOString for every time value, RangeError for an invalid one.
 */
/** ECMAScript's time range: ±10^8 days around the epoch. */
const MAX_TIME = 8.64e15;
let second = NaN;
let head = '';

export function isoTime(ms: number): string {
  // Date truncates a fractional time value toward zero; so does this.
  const t = Math.trunc(ms);
  // A time just past the range would otherwise reuse the last valid second's head.
  if (!(Math.abs(t) <= MAX_TIME)) throw new RangeError('Invalid time value');
  const s = Math.floor(t / 1000);
  if (s !== second) {
    const full = new Date(s * 1000).toISOString();
    // Everything before the milliseconds ('…T12:34:56.'); years past 9999 make the head longer, not the tail.
    head = full.slice(0, -4);
    second = s;
  }
  const r = t - s * 1000;
  return `${head}${r < 10 ? '00' : r < 100 ? '0' : ''}${r}Z`;
}
