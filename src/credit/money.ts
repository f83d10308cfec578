/**
 * Credits ↔ micro-credits for people (the CLI and the console), by string and BigInt math: SPEC §4 says no floating point
 * touches a balance, and `0.1 * 1e6` is 100000.00000000001 in binary floating point.
 */

/** One credit is 10^6 micro-credits. */
const MICROS_PER_CREDIT = 1_000_000n;
const DECIMAL = /^(-)?(\d*)(?:\.(\d*))?$/;

/** Exact decimal credits ("1.5", "-0.000001", ".25") → integer micro-credits; throws RangeError if not exact. */
export function creditsToMicros(text: string): number {
  const m = DECIMAL.exec(text.trim());
  const whole = m?.[2] ?? '';
  const frac = (m?.[3] ?? '').replace(/0+$/, '');
  if (!m || (whole === '' && (m[3] ?? '') === '')) throw new RangeError(`not a decimal number of credits: ${JSON.stringify(text)}`);
  // Six decimals is one micro-credit; a seventh significant digit cannot be represented exactly.
  if (frac.length > 6) throw new RangeError(`${text} credits is not a whole number of micro-credits (at most 6 decimals)`);
  const micros = BigInt(whole || '0') * MICROS_PER_CREDIT + BigInt(frac.padEnd(6, '0'));
  const signed = m[1] ? -micros : micros;
  if (signed > BigInt(Number.MAX_SAFE_INTEGER) || signed < BigInt(Number.MIN_SAFE_INTEGER))
    throw new RangeError(`${text} credits is too large`);
  return signed === 0n ? 0 : Number(signed);
}

/** An integer micro-credit amount ("1500000", "-5_000") → number; throws RangeError unless an exact safe integer. */
export function parseMicros(text: string): number {
  if (!/^-?\d+(_\d+)*$/.test(text))
    throw new RangeError(`amount_micros must be an integer number of micro-credits, got ${JSON.stringify(text)}`);
  const n = BigInt(text.replaceAll('_', ''));
  if (n > BigInt(Number.MAX_SAFE_INTEGER) || n < BigInt(Number.MIN_SAFE_INTEGER))
    throw new RangeError(`amount_micros ${text} is too large`);
  return n === 0n ? 0 : Number(n);
}

/** Integer micro-credits → exact decimal credits, trailing zeros trimmed (1500000 → "1.5", -1 → "-0.000001"). */
export function formatCredits(micros: number): string {
  const n = BigInt(micros);
  const abs = n < 0n ? -n : n;
  const frac = (abs % MICROS_PER_CREDIT).toString().padStart(6, '0').replace(/0+$/, '');
  return `${n < 0n ? '-' : ''}${abs / MICROS_PER_CREDIT}${frac ? `.${frac}` : ''}`;
}
