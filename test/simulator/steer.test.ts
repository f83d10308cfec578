import t from 'tap';
import { defaultSimOptions, readSimOptions, SimSteerError } from '../../src/simulator/steer.ts';

t.test('defaults when nothing steers', async (t) => {
  t.same(readSimOptions({}, { model: 'm' }), defaultSimOptions());
  t.same(defaultSimOptions(), { tokens: 16, delayMs: 0, headersDelayMs: 0, usage: 'present', refuse: false, ignoreMaxTokens: false });
});

t.test('every option from headers, in both spellings', async (t) => {
  const o = readSimOptions(
    {
      'x-sim-tokens': '7',
      'x-sim-delay-ms': '5',
      'x-sim-headers_delay_ms': '9',
      'x-sim-usage': 'zero',
      'x-sim-status': '503',
      'x-sim-refuse': 'true',
      'x-sim-cut-after': '0',
      'x-sim-ignore-max-tokens': '1',
    },
    {},
  );
  t.same(o, { tokens: 7, delayMs: 5, headersDelayMs: 9, usage: 'zero', status: 503, refuse: true, cutAfter: 0, ignoreMaxTokens: true });
});

t.test('body sim field, with headers winning over it', async (t) => {
  const body = { sim: { tokens: 3, usage: 'absent', delay_ms: 2, ignore_max_tokens: true, cut_after: 4 } };
  t.same(readSimOptions({}, body), { ...defaultSimOptions(), tokens: 3, usage: 'absent', delayMs: 2, ignoreMaxTokens: true, cutAfter: 4 });
  const o = readSimOptions({ 'x-sim-tokens': '9' }, body);
  t.equal(o.tokens, 9);
  t.equal(o.usage, 'absent');
  t.equal(readSimOptions({}, { sim: { tokens: '3' } }).tokens, 3, 'numeric strings are accepted in the body too');
});

t.test('encoding and corrupt_after, lower-cased coding names', async (t) => {
  t.same(readSimOptions({ 'x-sim-encoding': 'GZip', 'x-sim-corrupt-after': '3' }, {}), {
    ...defaultSimOptions(),
    encoding: 'gzip',
    corruptAfter: 3,
  });
  t.same(
    readSimOptions({}, { sim: { encoding: 'compress' } }).encoding,
    'compress',
    'any coding name; the simulator only names those it cannot apply',
  );
});

t.test('bad values are refused with the option named', async (t) => {
  const cases: [Record<string, string>, unknown, RegExp][] = [
    [{ 'x-sim-tokens': '-1' }, {}, /x-sim-tokens must be a non-negative integer/],
    [{ 'x-sim-tokens': '1.5' }, {}, /x-sim-tokens/],
    [{ 'x-sim-tokens': '' }, {}, /x-sim-tokens/],
    [{ 'x-sim-usage': 'some' }, {}, /present, absent or zero/],
    [{ 'x-sim-status': '200' }, {}, /400-599/],
    [{ 'x-sim-refuse': 'maybe' }, {}, /true or false/],
    [{ 'x-sim-nope': '1' }, {}, /unknown steering option x-sim-nope/],
    [{}, { sim: { tokenz: 1 } }, /unknown steering option sim.tokenz/],
    [{}, { sim: 'fast' }, /sim must be an object/],
    [{ 'x-sim-encoding': 'gz ip' }, {}, /x-sim-encoding must be a content coding name/],
    [{}, { sim: { encoding: 1 } }, /sim.encoding must be a content coding name/],
    [{ 'x-sim-corrupt-after': '2' }, {}, /corrupt_after needs an encoding/],
  ];
  for (const [headers, body, re] of cases) {
    let err: unknown;
    try {
      readSimOptions(headers, body);
    } catch (e) {
      err = e;
    }
    t.ok(err instanceof SimSteerError, `${re} is a SimSteerError`);
    t.match((err as Error).message, re);
  }
});
