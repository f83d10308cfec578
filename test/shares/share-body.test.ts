import t from 'tap';
import { GatewayError, ValidationError } from '../../src/http/errors.ts';
import { maxShareBodyBytes, parseShareBody } from '../../src/shares/share-body.ts';

const limits = { maxSnapshotBytes: 2048, maxFiles: 3, filesEnabled: true };
const buf = (s: string) => s; // the body as readBody decodes it

function detail(fn: () => unknown): unknown {
  try {
    fn();
  } catch (e) {
    if (e instanceof ValidationError) return e.detail;
    throw e;
  }
  throw new Error('no ValidationError');
}

t.test('keeps the snapshot text exactly as published', async (t) => {
  const snap = '{ "messages" : [ {"role": "user", "content": "h\\u00e9"} ],\n "n": 1.0, "2": 2, "1": 1 }';
  const b = parseShareBody(buf(`{"files": [], "snapshot": ${snap}, "account": "ignored"}`), limits, false);
  t.equal(b.snapshotText, snap);
  t.same(b.files, []);
  t.equal(b.account, undefined, 'the public body has no account');
});

t.test('a snapshot over max_snapshot_bytes is a 413, counted in UTF-8 bytes of its text', async (t) => {
  const fits = `{"messages":[{"c":"${'x'.repeat(2048 - 23)}"}]}`;
  t.equal(Buffer.byteLength(fits), 2048);
  t.equal(parseShareBody(buf(`{"snapshot":${fits}}`), limits, false).snapshotText, fits);
  const over = `{"messages":[{"c":"${'é'.repeat(1100)}"}]}`; // 1,100 characters, 2,200 bytes
  const err = t.throws(() => parseShareBody(buf(`{"snapshot":${over}}`), limits, false)) as unknown as GatewayError;
  t.equal(err.code, 'request_too_large');
  t.equal(err.status, 413);
  t.match(err.message, /2223 bytes.*2048/);
  t.throws(
    () => parseShareBody(buf(`{"snapshot":"${'x'.repeat(3000)}"}`), limits, false),
    { code: 'request_too_large' },
    'whatever its type',
  );
});

t.test('the whole-body bound leaves room for the envelope and every file entry', async (t) => {
  t.equal(maxShareBodyBytes(limits), 2048 + 64 * 1024 + 3 * 4096);
});

t.test('JSON errors and validation issues are 422s; the admin account is validated as in /admin/keys', async (t) => {
  t.match(
    detail(() => parseShareBody(buf('{"snapshot":'), limits, false)),
    [{ loc: ['body'], type: 'json_invalid', msg: 'JSON decode error' }],
  );
  t.same(
    detail(() => parseShareBody(buf('[]'), limits, true)),
    [
      {
        loc: ['body'],
        msg: 'Input should be a valid dictionary or object to extract fields from',
        type: 'model_attributes_type',
        input: [],
        ctx: {},
      },
    ],
  );
  const body = { snapshot: { messages: [] }, files: [{ name: 'a', content_type: 'text/plain', size: -1 }], account: 'bad account!' };
  t.same(
    detail(() => parseShareBody(buf(JSON.stringify(body)), limits, true)),
    [
      {
        loc: ['body', 'snapshot', 'messages'],
        msg: 'List should have at least 1 item after validation, not 0',
        type: 'too_short',
        input: [],
        ctx: { field_type: 'List', min_length: 1, actual_length: 0 },
      },
      {
        loc: ['body', 'files', '0', 'size'],
        msg: 'Input should be greater than or equal to 0',
        type: 'greater_than_equal',
        input: -1,
        ctx: { ge: 0 },
      },
      {
        loc: ['body', 'account'],
        msg: "String should match pattern '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$'",
        type: 'string_pattern_mismatch',
        input: 'bad account!',
        ctx: { pattern: '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$' },
      },
    ],
    'every issue, in field order',
  );
  const noAccount = { snapshot: { messages: [{}] } };
  t.same(
    detail(() => parseShareBody(buf(JSON.stringify(noAccount)), limits, true)),
    [{ loc: ['body', 'account'], msg: 'Field required', type: 'missing', input: noAccount, ctx: {} }],
  );
  t.equal(parseShareBody(buf('{"account":"acme","snapshot":{"messages":[{}]}}'), limits, true).account, 'acme');
});

t.test('declaring files without S3 configured is a 422 naming the reason; no files is fine', async (t) => {
  const off = { ...limits, filesEnabled: false };
  const files = [{ name: 'a.txt', content_type: 'text/plain', size: 1 }];
  t.same(
    detail(() => parseShareBody(buf(JSON.stringify({ snapshot: { messages: [{}] }, files })), off, false)),
    [
      {
        loc: ['body', 'files'],
        msg: 'Value error, file uploads are not configured on this gateway (shares.s3)',
        type: 'value_error',
        input: files,
        ctx: { error: 'file uploads are not configured on this gateway (shares.s3)' },
      },
    ],
  );
  t.equal(parseShareBody(buf('{"snapshot":{"messages":[{}]},"files":[]}'), off, false).snapshotText, '{"messages":[{}]}');
});
