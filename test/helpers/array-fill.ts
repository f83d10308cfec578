// Counts Array.prototype.fill calls on arrays of at least `min` elements while `fn` runs: how a test sees
// lru-cache reset its max-sized arrays (it does when its last entry is deleted), a cost no result shows.
export async function largeFills(min: number, fn: () => Promise<void>): Promise<number> {
  const fill = Array.prototype.fill;
  let n = 0;
  Array.prototype.fill = function (this: unknown[], ...a: Parameters<typeof fill>) {
    if (this.length >= min) n++;
    return fill.apply(this, a);
  } as typeof fill;
  try {
    await fn();
  } finally {
    Array.prototype.fill = fill;
  }
  return n;
}
