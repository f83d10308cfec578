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
