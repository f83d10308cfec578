import t, { type Test } from 'tap';
import { MAX_ISSUES, ValidationError, type ValidationIssue } from '../../src/http/errors.ts';
import { MAX_FILE_SIZE, SLUG_PATTERN, validateShareBody, validateSlug, type ShareBodyOptions } from '../../src/shares/validate.ts';
import { newSlug } from '../../src/shares/slug.ts';
import { parseShareBody } from '../../src/shares/share-body.ts';

/** The detail list of the ValidationError fn throws (fails the test if it does not throw one). */
function detail(t: Test, fn: () => unknown): ValidationIssue[] {
  try {
    fn();
  } catch (e) {
    if (e instanceof ValidationError) {
      t.equal(e.status, 422);
      for (const d of e.detail) t.same(Object.keys(d).sort(), ['ctx', 'input', 'loc', 'msg', 'type'], 'all five fields');
      return e.detail;
    }
    throw e;
  }
  t.fail('expected a ValidationError');
  return [];
}

const SLUG = 'A1b2C3d4E5f6G7h8J9k1Lm';
const PATTERN_MSG = "String should match pattern '^[1-9A-HJ-NP-Za-km-z]{22}$'";

t.test('validateSlug accepts slugs, raw or percent-encoded', async (t) => {
  t.equal(validateSlug(SLUG), SLUG);
  const fresh = newSlug();
  t.equal(validateSlug(fresh), fresh);
  t.equal(validateSlug('%41' + SLUG.slice(1)), SLUG, '%41 is A');
});

t.test('validateSlug: too short, too long, then pattern, exactly as SPEC §1.4', async (t) => {
  t.same(
    detail(t, () => validateSlug('abc')),
    [
      {
        loc: ['path', 'slug'],
        msg: 'String should have at least 22 characters',
        type: 'string_too_short',
        input: 'abc',
        ctx: { min_length: 22 },
      },
    ],
  );
  t.same(
    detail(t, () => validateSlug('')),
    [
      {
        loc: ['path', 'slug'],
        msg: 'String should have at least 22 characters',
        type: 'string_too_short',
        input: '',
        ctx: { min_length: 22 },
      },
    ],
  );
  t.same(
    detail(t, () => validateSlug(SLUG + 'x')),
    [
      {
        loc: ['path', 'slug'],
        msg: 'String should have at most 22 characters',
        type: 'string_too_long',
        input: SLUG + 'x',
        ctx: { max_length: 22 },
      },
    ],
  );
  const bad = '0' + SLUG.slice(1);
  t.same(
    detail(t, () => validateSlug(bad)),
    [{ loc: ['path', 'slug'], msg: PATTERN_MSG, type: 'string_pattern_mismatch', input: bad, ctx: { pattern: SLUG_PATTERN } }],
  );
  t.equal(SLUG_PATTERN, '^[1-9A-HJ-NP-Za-km-z]{22}$');
  // Length wins over the alphabet: a short slug of bad characters is "too short".
  t.equal(detail(t, () => validateSlug('0OIl'))[0]!.type, 'string_too_short');
  t.equal(detail(t, () => validateSlug('0'.repeat(30)))[0]!.type, 'string_too_long');
});

t.test('validateSlug: input is the percent-decoded segment; malformed escapes stay raw', async (t) => {
  const spaced = SLUG.slice(0, 21) + '%20';
  t.same(detail(t, () => validateSlug(spaced))[0], {
    loc: ['path', 'slug'],
    msg: PATTERN_MSG,
    type: 'string_pattern_mismatch',
    input: SLUG.slice(0, 21) + ' ',
    ctx: { pattern: SLUG_PATTERN },
  });
  // '%E0%A4%A' throws URIError: the raw 8-character text is validated instead.
  t.same(detail(t, () => validateSlug('%E0%A4%A'))[0]!.input, '%E0%A4%A');
  const lone = SLUG.slice(0, 21) + '%';
  t.same(
    detail(t, () => validateSlug(lone))[0],
    {
      loc: ['path', 'slug'],
      msg: PATTERN_MSG,
      type: 'string_pattern_mismatch',
      input: lone,
      ctx: { pattern: SLUG_PATTERN },
    },
    'a trailing lone % keeps the raw 22 characters',
  );
});

t.test('validateSlug counts code points, as Pydantic does', async (t) => {
  // 21 ASCII + one astral character: 23 UTF-16 units but 22 characters → pattern, not length.
  const astral = SLUG.slice(0, 21) + '😀';
  t.equal(astral.length, 23);
  t.equal(detail(t, () => validateSlug(astral))[0]!.type, 'string_pattern_mismatch');
  // 22 'é' percent-encoded: 132 bytes on the wire, 22 characters after decoding.
  const e22 = '%C3%A9'.repeat(22);
  const d = detail(t, () => validateSlug(e22))[0]!;
  t.equal(d.type, 'string_pattern_mismatch');
  t.equal(d.input, 'é'.repeat(22));
  t.equal(detail(t, () => validateSlug('é'.repeat(21)))[0]!.type, 'string_too_short');
});

const OPTS: ShareBodyOptions = { maxFiles: 3 };
const snapshot = { title: 'Hi', model: 'llama', messages: [{ role: 'user', content: 'hello' }], metadata: { a: 1 } };

t.test('validateShareBody accepts a minimal and a full body', async (t) => {
  const minimal = { snapshot: { messages: [{ role: 'user', content: 'x' }] } };
  t.same(validateShareBody(minimal, OPTS), { snapshot: minimal.snapshot, files: [] });

  const files = [
    { name: 'a.txt', content_type: 'text/plain', size: 0 },
    { name: 'résumé 😀.pdf', content_type: 'application/pdf', size: MAX_FILE_SIZE },
  ];
  const body = { snapshot, files, extra: 'ignored', account: 'ignored too' };
  const out = validateShareBody(body, OPTS);
  t.same(out, { snapshot, files });
  t.notOk('account' in out, 'account is only read for the admin variant');
  t.equal(out.snapshot, snapshot, 'the snapshot object is returned as given, not copied');
  t.same(snapshot, { title: 'Hi', model: 'llama', messages: [{ role: 'user', content: 'hello' }], metadata: { a: 1 } }, 'and not mutated');
});

t.test('snapshot extras and nulls are kept as published', async (t) => {
  const s = { title: null, model: null, metadata: null, messages: [{}], custom: [1, 2] };
  t.equal(validateShareBody({ snapshot: s }, OPTS).snapshot, s);
});

t.test('admin variant (parseShareBody): a valid account id is required, its issues beside the rest', async (t) => {
  const limits = { maxSnapshotBytes: 1 << 20, maxFiles: 3, filesEnabled: true };
  const parse = (body: unknown) => parseShareBody(JSON.stringify(body), limits, true);
  t.equal(parse({ account: 'acct_1', snapshot }).account, 'acct_1');
  const body = { snapshot };
  t.match(
    detail(t, () => parse(body)),
    [{ loc: ['body', 'account'], type: 'missing' }],
  );
  t.match(
    detail(t, () => parse({ account: 7, snapshot })),
    [{ loc: ['body', 'account'], type: 'string_type', input: 7 }],
  );
  t.match(
    detail(t, () => parse({ account: '', snapshot })),
    [{ loc: ['body', 'account'], type: 'string_too_short' }],
  );
  const d = detail(t, () => parse({ snapshot: { messages: [] }, files: [{ name: '', content_type: 'x', size: 1 }] }));
  t.same(
    d.map((i) => i.loc.join('.')),
    ['body.snapshot.messages', 'body.files.0.name', 'body.account'],
    'issues from snapshot, files and account come together',
  );
});

const file = (over: Record<string, unknown>) => ({ snapshot, files: [{ name: 'f.txt', content_type: 'text/plain', size: 1, ...over }] });
const issueOf = (t: Test, over: Record<string, unknown>): ValidationIssue => {
  const d = detail(t, () => validateShareBody(file(over), OPTS));
  t.equal(d.length, 1, JSON.stringify(over));
  return d[0]!;
};

t.test('file size: strict integer in 0..5 GiB', async (t) => {
  t.same(issueOf(t, { size: '5' }), {
    loc: ['body', 'files', '0', 'size'],
    msg: 'Input should be a valid integer',
    type: 'int_type',
    input: '5',
    ctx: {},
  });
  t.equal(issueOf(t, { size: true }).type, 'int_type');
  t.equal(issueOf(t, { size: null }).type, 'int_type');
  t.same(issueOf(t, { size: 1.5 }), {
    loc: ['body', 'files', '0', 'size'],
    msg: 'Input should be a valid integer, got a number with a fractional part',
    type: 'int_from_float',
    input: 1.5,
    ctx: {},
  });
  t.same(issueOf(t, { size: MAX_FILE_SIZE + 1 }), {
    loc: ['body', 'files', '0', 'size'],
    msg: 'Input should be less than or equal to 5368709120',
    type: 'less_than_equal',
    input: MAX_FILE_SIZE + 1,
    ctx: { le: 5368709120 },
  });
  t.equal(validateShareBody(file({ size: 2.0 }), OPTS).files[0]!.size, 2, '2.0 is an integer (JSON cannot tell them apart)');
});

t.test('file content_type: printable ASCII words, header-safe', async (t) => {
  const pattern = '^[!-~]+( [!-~]+)*$';
  t.same(issueOf(t, { content_type: 'text/plain\r\nx-evil: 1' }), {
    loc: ['body', 'files', '0', 'content_type'],
    msg: `String should match pattern '${pattern}'`,
    type: 'string_pattern_mismatch',
    input: 'text/plain\r\nx-evil: 1',
    ctx: { pattern },
  });
  for (const bad of ['', ' text/plain', 'text/plain ', 'text/plain;  charset=utf-8', 'texte/é'])
    t.equal(issueOf(t, { content_type: bad }).type, 'string_pattern_mismatch', JSON.stringify(bad));
  t.same(issueOf(t, { content_type: 'a'.repeat(256) }).ctx, { max_length: 255 });
  t.equal(validateShareBody(file({ content_type: 'text/plain; charset=utf-8' }), OPTS).files[0]!.content_type, 'text/plain; charset=utf-8');
});

t.test('file name rules', async (t) => {
  t.same(issueOf(t, { name: '' }), {
    loc: ['body', 'files', '0', 'name'],
    msg: 'String should have at least 1 character',
    type: 'string_too_short',
    input: '',
    ctx: { min_length: 1 },
  });
  t.same(issueOf(t, { name: 'a'.repeat(256) }).ctx, { max_length: 255 });
  t.equal(validateShareBody(file({ name: 'a'.repeat(255) }), OPTS).files[0]!.name.length, 255);
  t.equal(issueOf(t, { name: 7 }).type, 'string_type');
  const valueError = (name: string, reason: string) => {
    t.same(
      issueOf(t, { name }),
      { loc: ['body', 'files', '0', 'name'], msg: `Value error, ${reason}`, type: 'value_error', input: name, ctx: { error: reason } },
      JSON.stringify(name),
    );
  };
  valueError('a/b', "file name must not contain '/' or '\\'");
  valueError('a\\b', "file name must not contain '/' or '\\'");
  valueError('a\u0000b', 'file name must not contain control characters');
  valueError('a\nb', 'file name must not contain control characters');
  valueError('a\u007fb', 'file name must not contain control characters');
  valueError('a\u0085b', 'file name must not contain control characters');
  valueError('.', "file name must not be '.' or '..'");
  valueError('..', "file name must not be '.' or '..'");
  valueError('snapshot.json', "file name 'snapshot.json' is reserved");
  t.equal(validateShareBody(file({ name: 'Snapshot.json' }), OPTS).files[0]!.name, 'Snapshot.json', 'S3 keys are case-sensitive');
  valueError('a\ud800b', 'file name must be valid Unicode');
  // 128 × 'é' = 128 characters but 256 UTF-8 bytes.
  valueError('é'.repeat(128), 'file name must be at most 255 bytes in UTF-8');
  t.equal(validateShareBody(file({ name: 'é'.repeat(127) + 'a' }), OPTS).files[0]!.name, 'é'.repeat(127) + 'a', '255 bytes is fine');
  t.equal(validateShareBody(file({ name: '...' }), OPTS).files[0]!.name, '...', "'...' is an ordinary name");
});

t.test('file names are unique within a share (exact match)', async (t) => {
  const f = (name: string) => ({ name, content_type: 'text/plain', size: 1 });
  t.same(
    detail(t, () => validateShareBody({ snapshot, files: [f('a.txt'), f('b.txt'), f('a.txt')] }, OPTS)),
    [
      {
        loc: ['body', 'files', '2', 'name'],
        msg: 'Value error, duplicate file name',
        type: 'value_error',
        input: 'a.txt',
        ctx: { error: 'duplicate file name' },
      },
    ],
  );
  t.equal(validateShareBody({ snapshot, files: [f('a.txt'), f('A.txt')] }, OPTS).files.length, 2, 'case matters, as in S3 keys');
});

t.test('a snapshot of a million bad messages: the first MAX_ISSUES issues, found without walking the rest', async (t) => {
  const t0 = performance.now();
  const d = detail(t, () => validateShareBody({ snapshot: { messages: Array(2_000_000).fill(1) } }, { maxFiles: 20 }));
  const ms = performance.now() - t0;
  t.equal(d.length, MAX_ISSUES);
  t.same(d[0]!.loc, ['body', 'snapshot', 'messages', '0']);
  t.ok(ms < 200, `refused in ${ms.toFixed(1)} ms`);
  t.ok(JSON.stringify({ detail: d }).length < 16 * 1024, 'a small 422');
});
