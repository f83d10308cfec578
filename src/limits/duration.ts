/** The decimals of each whole number of milliseconds, trailing zeros trimmed: 5 → "005", 50 → "05", 500 → "5". */
const FRACTIONS = Array.from({ length: 1000 }, (_, i) => String(i).padStart(3, '0').replace(/0+$/, ''));

/** OpenAI's duration format for `x-ratelimit-reset-*` (SPEC §2a): `250ms`, `1s`, `1.5s`, `6m0s`, `1h0m0s`. */
export function formatDuration(ms: number): string {
  const t = Math.max(0, Math.ceil(ms));
  if (t < 1000) return `${t}ms`;
  const hours = Math.floor(t / 3_600_000);
  const minutes = Math.floor((t % 3_600_000) / 60_000);
  // Seconds keep up to 3 decimals, trailing zeros trimmed (1.500 → 1.5): from the whole milliseconds, in
  // integers (the toFixed / Number / String round trip it replaces went through V8's runtime per header).
  const inMinute = t % 60_000;
  const frac = inMinute % 1000;
  const whole = (inMinute - frac) / 1000;
  const seconds = frac === 0 ? String(whole) : `${whole}.${FRACTIONS[frac]}`;
  if (hours > 0) return `${hours}h${minutes}m${seconds}s`;
  return minutes > 0 ? `${minutes}m${seconds}s` : `${seconds}s`;
}
