import t from 'tap';
import { costMicros, holdMicros, parsePrice } from '../../src/credit/pricing.ts';
import { ConfigError } from '../../src/config/errors.ts';

const price = (input: unknown, output: unknown) => parsePrice(input, output, 'models[0].price');

t.test('cost is ceil(prompt × input + completion × output) in micro-credits, exactly', async (t) => {
  t.equal(costMicros(price(0.1, 0), 3, 0), 1, '0.1 × 3 = 0.3 → 1');
  t.equal(costMicros(price(0.1, 0), 10, 0), 1, '0.1 × 10 = 1 exactly, not 1.0000000000000002 → 2');
  t.equal(costMicros(price(0.7, 0), 10, 0), 7, '0.7 × 10 is 7.000000000000001 in floats; exact arithmetic gives 7');
  t.equal(costMicros(price(0.1, 0.2), 1, 1), 1, '0.1 + 0.2 = 0.3 → 1 (and not 0.30000000000000004 trouble)');
  t.equal(costMicros(price(1.5, 2.25), 1, 1), 4, '3.75 → 4');
  t.equal(costMicros(price(1.5, 2.25), 2, 4), 12, '3 + 9 = 12 exactly → 12');
  t.equal(costMicros(price(0.000001, 0), 1, 0), 1, 'the smallest price still costs a micro-credit');
  t.equal(costMicros(price(0.000001, 0), 1_000_000, 0), 1);
  t.equal(costMicros(price(0.000001, 0), 1_000_001, 0), 2);
  t.equal(costMicros(price(0, 0), 1_000_000, 1_000_000), 0, 'free model');
  t.equal(costMicros(price(5, 15), 0, 0), 0, 'no tokens');
  t.equal(costMicros(price(0.1, 0.4), 1234, 567), 351, '123.4 + 226.8 = 350.2 → 351');
});

t.test('large token counts stay exact', async (t) => {
  // 10^9 tokens at 999999.999999 credits/1M: 999999999999000 micro-credits, beyond float-exact decimals.
  t.equal(costMicros(price('999999.999999', 0), 1_000_000_000, 0), 999_999_999_999_000);
  t.equal(costMicros(price('0.333333', '0'), 3, 0), 1, '0.999999 → 1');
  t.equal(costMicros(price('0.333333', '0'), 6, 0), 2, '1.999998 → 2');
});

t.test('prices parse from numbers and numeric strings with up to 6 decimals', async (t) => {
  t.same(price(0.1, '2.5'), { inputScaled: 100_000n, outputScaled: 2_500_000n, cachedInputScaled: 100_000n });
  t.same(price(3, '0.000001'), { inputScaled: 3_000_000n, outputScaled: 1n, cachedInputScaled: 3_000_000n });
  t.same(price(' 1.25 ', 0), { inputScaled: 1_250_000n, outputScaled: 0n, cachedInputScaled: 1_250_000n });
});

t.test('bad prices are ConfigErrors naming the field', async (t) => {
  const cases: [unknown, unknown, string][] = [
    [-1, 0, 'models[0].price.input'],
    [0, '-0.5', 'models[0].price.output'],
    [0.0000001, 0, 'models[0].price.input'],
    ['0.1234567', 0, 'models[0].price.input'],
    ['cheap', 0, 'models[0].price.input'],
    [0, 'NaN', 'models[0].price.output'],
    [0, '1e3', 'models[0].price.output'],
    [null, 0, 'models[0].price.input'],
    [undefined, 0, 'models[0].price.input'],
    [true, 0, 'models[0].price.input'],
    [0, Number.POSITIVE_INFINITY, 'models[0].price.output'],
  ];
  for (const [i, o, path] of cases) {
    let err: unknown;
    try {
      price(i, o);
    } catch (e) {
      err = e;
    }
    t.type(err, ConfigError, `${String(i)} / ${String(o)}`);
    t.equal((err as ConfigError).path, path);
    t.match((err as ConfigError).message, path);
  }
});

t.test('cached prompt tokens are priced at price.cached_input, exactly (SPEC §4 "Cached input")', async (t) => {
  const p = parsePrice('0.3', '1.2', 'models[0].price', '0.075');
  t.equal(p.cachedInputScaled, 75_000n);
  // (1000 − 600) × 0.3 + 600 × 0.075 + 50 × 1.2 = 120 + 45 + 60 = 225
  t.equal(costMicros(p, 1000, 50, 600), 225);
  // (7 − 3) × 0.3 + 3 × 0.075 + 1 × 1.2 = 1.2 + 0.225 + 1.2 = 2.625 → 3
  t.equal(costMicros(p, 7, 1, 3), 3);
  // one cached token at 0.075: 0.075 → 1 (ceil of the whole sum, not of each part)
  t.equal(costMicros(p, 1, 0, 1), 1);
  t.equal(costMicros(p, 40, 0, 40), 3, '40 × 0.075 = 3 exactly');
  t.equal(costMicros(p, 1000, 50, 0), 360, 'no cached tokens: the input price');
  t.equal(costMicros(p, 1000, 50), 360, 'cached omitted = 0');
  t.equal(costMicros(p, 10, 0, 25), costMicros(p, 10, 0, 10), 'cached clamped to the prompt');
  t.equal(costMicros(p, 10, 0, -5), costMicros(p, 10, 0, 0), 'negative cached clamped to 0');
  t.equal(costMicros(parsePrice(1, 1, 'm', 0), 100, 0, 100), 0, 'a free cached input');
});

t.test('a model without cached_input prices cached tokens at the input price: the same cost as before', async (t) => {
  const p = price('0.1', '0.4');
  for (const [prompt, completion, cached] of [
    [1234, 567, 1000],
    [3, 0, 3],
    [1_000_001, 7, 999_999],
  ] as const) {
    t.equal(costMicros(p, prompt, completion, cached), costMicros(p, prompt, completion), `${prompt}/${completion}/${cached}`);
  }
});

t.test('price.cached_input is validated like input and output', async (t) => {
  for (const bad of [-1, '0.1234567', 'cheap', null, true, '1e3']) {
    let err: unknown;
    try {
      parsePrice(1, 1, 'models[0].price', bad);
    } catch (e) {
      err = e;
    }
    t.type(err, ConfigError, String(bad));
    t.equal((err as ConfigError).path, 'models[0].price.cached_input');
  }
});

t.test('the hold prices the prompt at the higher of input and cached_input: never below any debit', async (t) => {
  const cheap = parsePrice('0.3', '1.2', 'm', '0.075');
  t.equal(holdMicros(cheap, 1000, 50), costMicros(cheap, 1000, 50), 'cached cheaper: the input price, as before');
  const odd = parsePrice('0.3', '1.2', 'm', '0.9');
  t.equal(holdMicros(odd, 1000, 50), costMicros(odd, 1000, 50, 1000), 'cached dearer: held at cached_input');
  for (const cached of [0, 1, 500, 1000]) t.ok(costMicros(odd, 1000, 50, cached) <= holdMicros(odd, 1000, 50), `cached ${cached}`);
  t.equal(holdMicros(parsePrice('0.1', '0.4', 'm'), 1234, 567), 351, 'no cached_input: the old hold');
});
