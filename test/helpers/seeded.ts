/**
 * mulberry32: a deterministic "random" integer source for tests that try many inputs. A fixed seed
 * keeps a failure reproducible: the same seed replays the same cases.
 */
export function seededInts(seed: number): (n: number) => number {
  let s = seed | 0;
  return (n) => {
    s = (s + 0x6d2b79f5) | 0;
    let x = Math.imul(s ^ (s >>> 15), 1 | s);
    x = (x + Math.imul(x ^ (x >>> 7), 61 | x)) ^ x;
    return ((x ^ (x >>> 14)) >>> 0) % n;
  };
}
