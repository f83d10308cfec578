/** OpenAI's duration format for `x-ratelimit-reset-*` (SPEC §2a): `250ms`, `1s`, `1.5s`, `6m0s`. */
export function formatDuration(ms: number): string {
  const t = Math.max(0, Math.ceil(ms));
  if (t < 1000) return `${t}ms`;
  const minutes = Math.floor(t / 60_000);
  // Seconds keep up to 3 decimals, trailing zeros trimmed (1.500 → 1.5).
  const seconds = String(Number(((t % 60_000) / 1000).toFixed(3)));
  return minutes > 0 ? `${minutes}m${seconds}s` : `${seconds}s`;
}
