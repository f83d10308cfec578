import t from 'tap';
import type { IncomingMessage } from 'node:http';
import { createAdminGuard } from '../../src/admin/token.ts';
import { GatewayError } from '../../src/http/errors.ts';

const req = (authorization?: string) => ({ headers: authorization === undefined ? {} : { authorization } }) as IncomingMessage;

function code(fn: () => void): string | undefined {
  try {
    fn();
    return undefined;
  } catch (e) {
    if (!(e instanceof GatewayError)) throw e;
    return e.code;
  }
}

t.test('no token configured: the admin API answers 404 whatever is sent', async (t) => {
  for (const token of [undefined, '']) {
    const guard = createAdminGuard(token);
    t.equal(
      code(() => guard(req())),
      'not_found',
    );
    t.equal(
      code(() => guard(req('Bearer '))),
      'not_found',
    );
    t.equal(
      code(() => guard(req('Bearer anything'))),
      'not_found',
    );
  }
});

t.test('the right bearer token passes; anything else is 401 invalid_admin_token', async (t) => {
  const guard = createAdminGuard('s3cret-token');
  t.equal(
    code(() => guard(req('Bearer s3cret-token'))),
    undefined,
  );
  t.equal(
    code(() => guard(req('bearer s3cret-token'))),
    undefined,
    'the scheme is case-insensitive (RFC 7235)',
  );
  for (const h of [
    undefined,
    '',
    'Bearer',
    'Bearer ',
    'Bearer s3cret-toke',
    'Bearer s3cret-token2',
    'Bearer S3CRET-TOKEN',
    'Basic s3cret-token',
    's3cret-token',
    'Bearer s3cret-token extra',
  ]) {
    t.equal(
      code(() => guard(req(h))),
      'invalid_admin_token',
      JSON.stringify(h),
    );
  }
});

t.test('admin token strength: placeholders and predictable tokens are refused, generated ones pass (issue 27)', async (t) => {
  const { execFileSync } = await import('node:child_process');
  const { randomBytes, randomUUID } = await import('node:crypto');
  const { adminTokenBits, adminTokenWeakness } = await import('../../src/admin/token.ts');
  const weak: Array<[string, RegExp]> = [
    ['short-token', /at least 32 characters \(got 11\)/],
    ['replace-with-openssl-rand-base64-32-output', /placeholder/],
    ['${TOLLGATE_ADMIN_TOKEN}-0000000000000000000', /placeholder/],
    ['a'.repeat(36), /too predictable: about 4 bits/],
    ['abcdefghijklmnopqrstuvwxyz0123456789', /too predictable/],
    ['abababababababababababababababababab', /too predictable/],
    ['test-admin-token-0123456789-abcdefghij', /too predictable/],
    ['0123456789abcdef0123456789abcdef', /too predictable/],
  ];
  for (const [token, why] of weak) {
    const w = adminTokenWeakness(token);
    t.match(w, why, token);
    t.notMatch(w ?? '', token, 'never echoes the token');
    t.match(w, /openssl rand -base64 32/, 'names a command that makes a good one');
  }
  // 500 generated tokens of each recommended kind pass: the estimate does not refuse real secrets.
  const refused: string[] = [];
  for (let i = 0; i < 500; i++) {
    for (const token of [randomBytes(32).toString('base64'), randomBytes(32).toString('hex'), randomBytes(24).toString('base64url')])
      if (adminTokenWeakness(token) !== undefined) refused.push(token);
  }
  t.same(refused, [], 'no generated token refused');
  t.ok(adminTokenBits(randomUUID()) >= 128, 'a UUID passes (its 122 random bits are over-estimated: documented)');
  const openssl = (() => {
    try {
      return execFileSync('openssl', ['rand', '-base64', '32'], { encoding: 'utf8' }).trim();
    } catch {
      return undefined;
    }
  })();
  if (openssl) t.equal(adminTokenWeakness(openssl), undefined, 'the documented command passes');
});
