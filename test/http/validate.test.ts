import t from 'tap';
import {
  CUT,
  MAX_ISSUES,
  MAX_LOC_CHARS,
  MAX_MSG_CHARS,
  MAX_ECHO_CHARS,
  ValidationError,
  clipString,
  clipValue,
} from '../../src/http/errors.ts';
import { Issues, bool, forbidExtra, int, isObj, list, literal, query, queryInt, rootObject, str } from '../../src/http/validate.ts';

/** Runs one helper on a fresh Issues and returns its result and what it collected. */
function run<T>(fn: (i: Issues) => T): { value: T; issues: Issues['list'] } {
  const i = new Issues();
  const value = fn(i);
  return { value, issues: i.list };
}

t.test('Issues.done throws a ValidationError with every collected issue, in order; nothing collected → no throw', async (t) => {
  const i = new Issues();
  t.doesNotThrow(() => i.done());
  i.add(['body', 'a'], 'missing', 'Field required', { b: 1 });
  i.add(['body', 'b'], 'string_type', 'Input should be a valid string', undefined);
  try {
    i.done();
    t.fail('should throw');
  } catch (e) {
    t.type(e, ValidationError);
    const v = e as ValidationError;
    t.equal(v.status, 422);
    t.same(
      v.detail,
      [
        { loc: ['body', 'a'], msg: 'Field required', type: 'missing', input: { b: 1 }, ctx: {} },
        { loc: ['body', 'b'], msg: 'Input should be a valid string', type: 'string_type', input: null, ctx: {} },
      ],
      'undefined input becomes null, ctx defaults to {}',
    );
  }
});

t.test('rootObject accepts objects only', async (t) => {
  t.equal(run((i) => rootObject({}, i)).value, true);
  for (const v of [[], null, 'x', 3, true]) {
    const r = run((i) => rootObject(v, i));
    t.equal(r.value, false, JSON.stringify(v));
    t.same(r.issues, [
      {
        loc: ['body'],
        msg: 'Input should be a valid dictionary or object to extract fields from',
        type: 'model_attributes_type',
        input: v,
        ctx: {},
      },
    ]);
  }
  t.ok(isObj({}));
  t.notOk(isObj([]));
  t.notOk(isObj(null));
});

t.test('forbidExtra reports each unknown field as extra_forbidden with its value', async (t) => {
  const r = run((i) => forbidExtra({ a: 1, typo: 'x', other: [1] }, ['a'], ['body'], i));
  t.same(r.issues, [
    { loc: ['body', 'typo'], msg: 'Extra inputs are not permitted', type: 'extra_forbidden', input: 'x', ctx: {} },
    { loc: ['body', 'other'], msg: 'Extra inputs are not permitted', type: 'extra_forbidden', input: [1], ctx: {} },
  ]);
});

t.test('str: missing (input = enclosing object), type, length and pattern', async (t) => {
  const o = { s: 'hello', n: 5, u: 'añb' };
  t.equal(run((i) => str(o, 's', ['body'], i)).value, 'hello');
  t.same(run((i) => str(o, 'absent', ['body'], i)).issues, [], 'optional absent is fine');
  t.same(run((i) => str(o, 'absent', ['body'], i, { required: true })).issues, [
    { loc: ['body', 'absent'], msg: 'Field required', type: 'missing', input: o, ctx: {} },
  ]);
  t.same(run((i) => str(o, 'n', ['body'], i)).issues, [
    { loc: ['body', 'n'], msg: 'Input should be a valid string', type: 'string_type', input: 5, ctx: {} },
  ]);
  t.same(run((i) => str(o, 's', ['body'], i, { minLength: 6 })).issues, [
    {
      loc: ['body', 's'],
      msg: 'String should have at least 6 characters',
      type: 'string_too_short',
      input: 'hello',
      ctx: { min_length: 6 },
    },
  ]);
  t.same(
    run((i) => str({ s: '' }, 's', ['body'], i, { minLength: 1 })).issues[0]!.msg,
    'String should have at least 1 character',
    'singular',
  );
  t.same(run((i) => str(o, 's', ['body'], i, { maxLength: 4 })).issues, [
    { loc: ['body', 's'], msg: 'String should have at most 4 characters', type: 'string_too_long', input: 'hello', ctx: { max_length: 4 } },
  ]);
  t.equal(run((i) => str(o, 'u', ['body'], i, { maxLength: 3 })).value, 'añb', 'lengths count characters, not bytes');
  t.same(run((i) => str(o, 's', ['query'], i, { pattern: /^\d+$/ })).issues, [
    {
      loc: ['query', 's'],
      msg: "String should match pattern '^\\d+$'",
      type: 'string_pattern_mismatch',
      input: 'hello',
      ctx: { pattern: '^\\d+$' },
    },
  ]);
  t.equal(run((i) => str(o, 's', ['query'], i, { pattern: /^x$/, patternText: 'PUBLIC' })).issues[0]!.ctx.pattern, 'PUBLIC');
});

t.test('int: types, fractions, safe range and bounds as Pydantic names them', async (t) => {
  const at = (v: unknown, opts = {}) => run((i) => int({ v }, 'v', ['body'], i, opts));
  t.equal(at(42).value, 42);
  t.equal(at(-3).value, -3);
  t.same(at(undefined).issues, []);
  t.same(run((i) => int({}, 'v', ['body'], i, { required: true })).issues, [
    { loc: ['body', 'v'], msg: 'Field required', type: 'missing', input: {}, ctx: {} },
  ]);
  for (const bad of [{}, [], null, Number.NaN, Number.POSITIVE_INFINITY]) {
    const r = at(bad);
    t.equal(r.issues[0]!.type, 'int_type', String(bad));
    t.equal(r.issues[0]!.msg, 'Input should be a valid integer');
  }
  t.same(at(1.5).issues, [
    {
      loc: ['body', 'v'],
      msg: 'Input should be a valid integer, got a number with a fractional part',
      type: 'int_from_float',
      input: 1.5,
      ctx: {},
    },
  ]);
  t.equal(at(2 ** 60).issues[0]!.type, 'int_parsing_size');
  t.same(at(0, { gt: 0 }).issues, [
    { loc: ['body', 'v'], msg: 'Input should be greater than 0', type: 'greater_than', input: 0, ctx: { gt: 0 } },
  ]);
  t.same(at(0, { ge: 1 }).issues, [
    { loc: ['body', 'v'], msg: 'Input should be greater than or equal to 1', type: 'greater_than_equal', input: 0, ctx: { ge: 1 } },
  ]);
  t.same(at(1001, { le: 1000 }).issues, [
    { loc: ['body', 'v'], msg: 'Input should be less than or equal to 1000', type: 'less_than_equal', input: 1001, ctx: { le: 1000 } },
  ]);
  t.equal(at(1000, { ge: 1, le: 1000 }).value, 1000, 'bounds are inclusive');
});

t.test('bool: JSON booleans only', async (t) => {
  t.equal(run((i) => bool({ b: false }, 'b', ['body'], i)).value, false);
  t.same(run((i) => bool({ b: [] }, 'b', ['body'], i)).issues, [
    { loc: ['body', 'b'], msg: 'Input should be a valid boolean', type: 'bool_type', input: [], ctx: {} },
  ]);
  t.same(run((i) => bool({}, 'b', ['body'], i, true)).issues, [
    { loc: ['body', 'b'], msg: 'Field required', type: 'missing', input: {}, ctx: {} },
  ]);
});

t.test("literal: Pydantic's literal_error message and ctx.expected", async (t) => {
  t.equal(run((i) => literal({ e: 'live' }, 'e', ['live', 'test'], ['body'], i)).value, 'live');
  t.same(run((i) => literal({ e: 'prod' }, 'e', ['live', 'test'], ['body'], i)).issues, [
    {
      loc: ['body', 'e'],
      msg: "Input should be 'live' or 'test'",
      type: 'literal_error',
      input: 'prod',
      ctx: { expected: "'live' or 'test'" },
    },
  ]);
  t.equal(run((i) => literal({ e: 'x' }, 'e', ['a', 'b', 'c'], ['body'], i)).issues[0]!.msg, "Input should be 'a', 'b' or 'c'");
  t.equal(run((i) => literal({ e: 'x' }, 'e', ['only'], ['body'], i)).issues[0]!.msg, "Input should be 'only'");
  t.equal(
    run((i) => literal({ e: 1 }, 'e', ['live', 'test'], ['body'], i)).issues[0]!.type,
    'literal_error',
    'non-strings are literal errors too',
  );
  t.equal(run((i) => literal({}, 'e', ['live'], ['body'], i, true)).issues[0]!.type, 'missing');
});

t.test('list: type and length bounds', async (t) => {
  t.same(run((i) => list({ l: [1] }, 'l', ['body'], i)).value, [1]);
  t.same(run((i) => list({ l: 'x' }, 'l', ['body'], i)).issues, [
    { loc: ['body', 'l'], msg: 'Input should be a valid list', type: 'list_type', input: 'x', ctx: {} },
  ]);
  t.same(run((i) => list({ l: [] }, 'l', ['body'], i, { minLength: 1 })).issues, [
    {
      loc: ['body', 'l'],
      msg: 'List should have at least 1 item after validation, not 0',
      type: 'too_short',
      input: [],
      ctx: { field_type: 'List', min_length: 1, actual_length: 0 },
    },
  ]);
  t.same(run((i) => list({ l: [1, 2, 3] }, 'l', ['body'], i, { maxLength: 2 })).issues, [
    {
      loc: ['body', 'l'],
      msg: 'List should have at most 2 items after validation, not 3',
      type: 'too_long',
      input: [1, 2, 3],
      ctx: { field_type: 'List', max_length: 2, actual_length: 3 },
    },
  ]);
});

t.test('query: first value of each parameter, decoded', async (t) => {
  t.same(query('/x'), {});
  t.same(query('/x?a=1&b=two%20words&a=2&c='), { a: '1', b: 'two words', c: '' });
});

t.test('queryInt: fallback, lax string parsing, bounds', async (t) => {
  const q = (url: string, opts = {}) => run((i) => queryInt(query(url), 'limit', i, { ge: 1, le: 1000, fallback: 100, ...opts }));
  t.equal(q('/l').value, 100, 'absent → fallback');
  t.equal(q('/l?limit=7').value, 7);
  t.equal(q('/l?limit=+7').value, 7);
  t.same(q('/l?limit=abc').issues, [
    {
      loc: ['query', 'limit'],
      msg: 'Input should be a valid integer, unable to parse string as an integer',
      type: 'int_parsing',
      input: 'abc',
      ctx: {},
    },
  ]);
  t.equal(q('/l?limit=1.5').issues[0]!.type, 'int_parsing');
  t.equal(q('/l?limit=').issues[0]!.type, 'int_parsing');
  const big = q('/l?limit=1001');
  t.equal(big.issues[0]!.type, 'less_than_equal');
  t.same(big.issues[0]!.loc, ['query', 'limit']);
  t.same(big.issues[0]!.ctx, { le: 1000 });
  t.equal(q('/l?limit=0').issues[0]!.type, 'greater_than_equal');
});

t.test('Issues stops at MAX_ISSUES: later issues are dropped and `full` tells loops to stop', async (t) => {
  const i = new Issues();
  for (let n = 0; n < 25; n++) {
    if (i.full) break;
    i.add(['body', String(n)], 'dict_type', 'Input should be a valid dictionary', n);
  }
  t.equal(i.list.length, MAX_ISSUES);
  t.ok(i.full);
  i.add(['body', 'late'], 'missing', 'Field required', null);
  t.equal(i.list.length, MAX_ISSUES, 'nothing past the cap');
  t.same(
    i.list.map((x) => x.loc[1]),
    Array.from({ length: MAX_ISSUES }, (_, n) => String(n)),
    'the first ones, in order',
  );
  // forbidExtra over an object of many unknown keys stops too.
  const many = Object.fromEntries(Array.from({ length: 1000 }, (_, n) => [`k${n}`, n]));
  const r = run((iss) => forbidExtra(many, [], ['body'], iss));
  t.equal(r.issues.length, MAX_ISSUES);
});

t.test('ValidationError bounds what it echoes: at most MAX_ISSUES, loc, msg, input and ctx cut', async (t) => {
  const big = 'x'.repeat(1_000_000);
  const detail = Array.from({ length: 50 }, (_, n) => ({
    loc: ['body', 'k'.repeat(10_000), String(n)],
    msg: 'm'.repeat(10_000),
    type: 'value_error',
    input: { pad: big, list: Array(100_000).fill(1), n },
    ctx: { error: big },
  }));
  const e = new ValidationError(detail);
  t.equal(e.detail.length, MAX_ISSUES);
  const text = JSON.stringify({ detail: e.detail });
  t.ok(text.length < 64 * 1024, `422 body ${text.length} bytes`);
  t.ok(e.message.length < 16 * 1024, `message ${e.message.length} chars`);
  const first = e.detail[0]!;
  t.equal(first.loc[1], 'k'.repeat(MAX_LOC_CHARS) + CUT, 'a long loc element is cut');
  t.equal(first.loc[2], '0');
  t.equal(first.msg, 'm'.repeat(MAX_MSG_CHARS) + CUT);
  const input = first.input as { pad: string; list?: unknown[] };
  t.ok(input.pad.startsWith('xxxx') && input.pad.endsWith(CUT) && input.pad.length <= MAX_ECHO_CHARS, 'a long string keeps its start');
  t.ok((first.ctx.error as string).endsWith(CUT));
  // Small values are echoed as they were: the same object, not a copy.
  const small = { model: 'm', messages: [] };
  t.equal(new ValidationError([{ loc: ['body'], msg: 'x', type: 't', input: small, ctx: {} }]).detail[0]!.input, small);
});

t.test('clipValue: a list keeps its first items then CUT, an object its first members then a CUT member, in O(budget)', async (t) => {
  const l = clipValue(Array(100_000).fill(7), 20) as unknown[];
  t.ok(l.length > 5 && l.length < 12, `${l.length} items kept`);
  t.same(l, [...Array(l.length - 1).fill(7), CUT]);
  const o = Object.fromEntries(Array.from({ length: 1000 }, (_, n) => [`key${n}`, n]));
  const keys = Object.keys(clipValue(o, 40) as Record<string, unknown>);
  t.ok(keys.length > 3 && keys.length < 8, `${keys.length} members kept`);
  t.same(keys, [...keys.slice(0, -1).map((_, n) => `key${n}`), CUT]);
  t.equal(clipString('a\u{1F600}', 2), 'a' + CUT, 'never half a surrogate pair');
  t.equal(clipValue('short'), 'short');
  // Deep nesting is cut too.
  let deep: unknown = 1;
  for (let n = 0; n < 100; n++) deep = [deep];
  t.ok(JSON.stringify(clipValue(deep, 1000)).length < 100);
  const huge = Array(2_000_000).fill(1);
  const t0 = performance.now();
  for (let n = 0; n < 1000; n++) clipValue(huge);
  const ms = performance.now() - t0;
  t.ok(ms < 1000, `1000 clips of a 2M-item list in ${ms.toFixed(1)} ms: the walk stops at the budget`);
});

t.test('the input of a path, query or header issue is echoed whole: the request head is bounded already', async (t) => {
  const slug = 'x'.repeat(15_000);
  const e = new ValidationError([{ loc: ['path', 'slug'], msg: 'm', type: 'string_too_long', input: slug, ctx: { max_length: 22 } }]);
  t.equal(e.detail[0]!.input, slug);
});
