import t from 'tap';
import { randomBytes } from 'node:crypto';
import { BASE58_ALPHABET, isBase58, randomBase58 } from '../../src/http/base58.ts';
import { newSlug, SLUG_LENGTH, BASE58_ALPHABET as SLUG_ALPHABET } from '../../src/shares/slug.ts';

/** Pearson's chi-square statistic of character counts against a uniform spread over the alphabet. */
function chiSquare(text: string): number {
  const counts = new Map<string, number>();
  for (const c of text) counts.set(c, (counts.get(c) ?? 0) + 1);
  const expected = text.length / 58;
  let x2 = 0;
  for (const c of BASE58_ALPHABET) x2 += ((counts.get(c) ?? 0) - expected) ** 2 / expected;
  return x2;
}
// 57 degrees of freedom: mean 57, sd ≈ 10.7. P(X² > 150) < 1e-9, so a fair generator never trips it;
// a modulo-biased one (digits 0..23 at 5/256, the rest at 4/256) scores ≈ 2,500 on 200k characters.
const CHI2_BOUND = 150;
const SAMPLE = 200_000;

t.test('the alphabet is base58 without 0, O, I, l', async (t) => {
  t.equal(BASE58_ALPHABET.length, 58);
  t.equal(new Set(BASE58_ALPHABET).size, 58);
  t.notMatch(BASE58_ALPHABET, /[0OIl]/);
  t.equal(SLUG_ALPHABET, BASE58_ALPHABET);
});

t.test('newSlug: exactly 22 base58 characters, different every time', async (t) => {
  const slugs = Array.from({ length: 2000 }, () => newSlug());
  t.same(
    slugs.filter((s) => s.length !== SLUG_LENGTH),
    [],
    'all 22 long',
  );
  t.same(
    slugs.filter((s) => !isBase58(s)),
    [],
    'all in the alphabet',
  );
  t.equal(new Set(slugs).size, 2000, 'no repeats');
});

t.test('randomBase58 gives the requested length', async (t) => {
  t.equal(randomBase58(0), '');
  t.equal(randomBase58(1).length, 1);
  t.equal(randomBase58(32).length, 32);
  t.equal(randomBase58(1000).length, 1000, 'more than one 64-byte batch');
  t.throws(() => randomBase58(-1), RangeError);
  t.throws(() => randomBase58(1.5), RangeError);
});

t.test('bytes 232..255 are rejected and the rest map by byte % 58', async (t) => {
  // A scripted source: first batch all rejectable bytes, then 0, 57, 58, 231, 232, 255, 1.
  const batches = [new Uint8Array(64).fill(240), Uint8Array.from([0, 57, 58, 231, 232, 255, 1, ...new Array(57).fill(255)])];
  let calls = 0;
  const out = randomBase58(5, (buf) => {
    buf.set(batches[calls++] ?? new Uint8Array(64));
  });
  t.equal(out, '1z1z2');
  t.equal(calls, 2, 'a batch of only rejected bytes draws again');
  let draws = 0;
  newSlug((buf) => {
    draws++;
    buf.fill(7);
  });
  t.equal(draws, 1, 'a slug normally costs one 64-byte draw');
});

t.test('characters are uniform (chi-square), and the check catches modulo bias', async (t) => {
  const fair = randomBase58(SAMPLE);
  const x2 = chiSquare(fair);
  t.ok(x2 < CHI2_BOUND, `chi-square ${x2.toFixed(1)} < ${CHI2_BOUND}`);

  const slugs = Array.from({ length: Math.ceil(SAMPLE / SLUG_LENGTH) }, () => newSlug()).join('');
  const x2s = chiSquare(slugs);
  t.ok(x2s < CHI2_BOUND, `slugs: chi-square ${x2s.toFixed(1)} < ${CHI2_BOUND}`);

  // Each position is uniform too (a bug could favour, say, the first character): 22 × 58 cells.
  let worst = 0;
  const per = 20_000;
  const many = Array.from({ length: per }, () => newSlug());
  for (let pos = 0; pos < SLUG_LENGTH; pos++) worst = Math.max(worst, chiSquare(many.map((s) => s[pos]).join('')));
  // 20k per position, 22 tests: P(any X² > 150) < 22e-9.
  t.ok(worst < CHI2_BOUND, `worst per-position chi-square ${worst.toFixed(1)}`);

  const biased = Array.from(randomBytes(SAMPLE), (b) => BASE58_ALPHABET[b % 58]).join('');
  t.ok(chiSquare(biased) > CHI2_BOUND * 5, 'byte % 58 without rejection is detected');
});

t.test('isBase58', async (t) => {
  t.ok(isBase58('123abcXYZ'));
  t.notOk(isBase58(''), 'empty is not a base58 string');
  for (const bad of ['0', 'O', 'I', 'l', 'abc-', ' a', 'é', 'a\n']) t.notOk(isBase58(bad), JSON.stringify(bad));
});
