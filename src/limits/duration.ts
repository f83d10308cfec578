/** OpenAI's duration format for `x-ratelimit-reset-*` (SPEC §2a): `250ms`, `1s`, `1.5s`, `6m0s`, `1h0m0s`. */
export function formatDuration(ms: number): string {
  const t = Math.max(0, Math.ceil(ms));
  if (t < 1000) return `${t}ms`;
  const hours = Math.floor(t / 3_600_000);
  const minutes = Math.floor((t % 3_600_000) / 60_000);
  // Seconds keep up to 3 decimals, trailing zeros trimmed (1.500 → 1.5).
  const seconds = String(Number(((t % 60_000) / 1000).toFixed(3)));
  if (hours > 0) return `${hours}h${minutes}m${seconds}s`;
  return minutes > 0 ? `${minutes}m${seconds}s` : `${seconds}s`;
}
