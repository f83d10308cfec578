// The depth pre-scan (src/http/json-depth.ts): brackets inside strings do not count, escaped quotes do
// not end a string, the first bracket past the limit is reported, and the scan is linear.
import t from 'tap';
import { findTooDeep } from '../../src/http/json-depth.ts';

t.test('counts nesting of arrays and objects, and reports the first bracket past the limit', async (t) => {
  t.equal(findTooDeep('{}', 1), -1);
  t.equal(findTooDeep('{"a":[]}', 1), 5);
  t.equal(findTooDeep('{"a":[]}', 2), -1);
  t.equal(findTooDeep('[[],[],[[]]]', 2), 8);
  t.equal(findTooDeep('[1,2,{"x":{"y":3}}]', 3), -1);
  t.equal(findTooDeep('[1,2,{"x":{"y":3}}]', 2), 10);
  t.equal(findTooDeep('', 1), -1);
  t.equal(findTooDeep('123', 0), -1);
});

t.test('brackets inside strings are skipped, escaped quotes included', async (t) => {
  t.equal(findTooDeep('{"a":"[[[[[[{{{{"}', 1), -1);
  t.equal(findTooDeep('{"a":"\\"[[[[\\""}', 1), -1, 'an escaped quote does not end the string');
  t.equal(findTooDeep('{"a\\\\":[[1]]}', 2), 8, 'an escaped backslash before the quote does end it');
  t.equal(findTooDeep('["\\\\\\"[[[", [[]]]', 2), 13, 'odd runs of backslashes escape, even ones do not');
  t.equal(findTooDeep('["unterminated [[[[', 1), -1, 'an unterminated string: left to JSON.parse');
});

t.test('linear: a million-deep text stops at the limit; a wide 4 MB text is one pass', async (t) => {
  const deep = '['.repeat(1_000_000) + ']'.repeat(1_000_000);
  t.equal(findTooDeep(deep, 64), 64);
  // Linear, not worse: 8× the text costs about 8× the time (64× would be quadratic; caches and a loaded
  // machine were seen to push linear to ~20×). Best of 5 runs each, as a ratio, so neither the machine nor
  // coverage instrumentation decides the outcome.
  const wide = (n: number) => '[' + '[1,"x"],'.repeat(n) + '1]';
  const best = (text: string) => {
    let min = Infinity;
    for (let i = 0; i < 5; i++) {
      const t0 = performance.now();
      t.equal(findTooDeep(text, 64), -1);
      min = Math.min(min, performance.now() - t0);
    }
    return min;
  };
  const small = best(wide(50_000));
  const large = best(wide(400_000));
  t.ok(large / small < 40, `400 KB in ${small.toFixed(1)} ms, 3.2 MB in ${large.toFixed(1)} ms`);
  // Agrees with JSON.parse's own depth on random shapes.
  for (let i = 0; i < 200; i++) {
    const v = randomValue(0);
    const text = JSON.stringify(v);
    const depth = depthOf(v);
    t.equal(findTooDeep(text, depth), -1);
    if (depth > 0) t.not(findTooDeep(text, depth - 1), -1);
  }
});

let seed = 7;
const rand = () => (seed = (seed * 1103515245 + 12345) & 0x7fffffff) / 0x7fffffff;

function randomValue(d: number): unknown {
  const r = rand();
  if (d > 6 || r < 0.3) return ['s"[{\\', 'plain', 1, null, true, '\\\\', '"}]'][Math.floor(rand() * 7)];
  if (r < 0.65) return Array.from({ length: Math.floor(rand() * 4) }, () => randomValue(d + 1));
  const o: Record<string, unknown> = {};
  for (let i = 0; i < Math.floor(rand() * 4); i++) o[`k${i}[`] = randomValue(d + 1);
  return o;
}

function depthOf(v: unknown): number {
  if (Array.isArray(v)) return 1 + Math.max(0, ...v.map(depthOf));
  if (v && typeof v === 'object') return 1 + Math.max(0, ...Object.values(v).map(depthOf));
  return 0;
}
