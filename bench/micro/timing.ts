/**
 * Tiny synchronous timing helper for micro-benchmarks. No await inside the timed loop: at tens of ns
 * per op a microtask per call would be the measurement. The best of `rounds` is kept because the
 * machines here are shared (NOTES: timings under load are upper bounds).
 */

/** Best mean ns per call of fn over `rounds` rounds of n calls, after `warm` untimed calls. */
export function nsPerOp(fn: (i: number) => unknown, n: number, warm = Math.min(n, 10_000), rounds = 7): number {
  let sink: unknown;
  for (let i = 0; i < warm; i++) sink = fn(i);
  let best = Infinity;
  for (let r = 0; r < rounds; r++) {
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < n; i++) sink = fn(i);
    best = Math.min(best, Number(process.hrtime.bigint() - t0) / n);
  }
  if (sink === Symbol.for('never')) console.log(sink); // keeps the result observable so it is not optimised away
  return best;
}

/** Collects results and prints one aligned line per case, then a JSON object for a results collector. */
export function createReport(): { add(name: string, value: number, unit: 'ns/op' | 'µs/op', note?: string): void; print(): void } {
  const results: Record<string, number> = {};
  return {
    add(name, value, unit, note = '') {
      results[`${name} (${unit})`] = Number(value.toFixed(unit === 'ns/op' ? 0 : 2));
      console.log(`${name.padEnd(48)} ${value.toFixed(unit === 'ns/op' ? 0 : 2).padStart(10)} ${unit}  ${note}`);
    },
    print() {
      console.log(JSON.stringify(results));
    },
  };
}
