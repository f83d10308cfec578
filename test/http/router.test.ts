import t from 'tap';
import { createRouter, type Route } from '../../src/http/router.ts';
import { GatewayError } from '../../src/http/errors.ts';
import type { Handler } from '../../src/http/context.ts';

const h = (name: string): Handler => Object.assign(async () => {}, { label: name });
const label = (x: Handler) => (x as Handler & { label: string }).label;

const routes: Route[] = [
  { method: 'GET', pattern: '/v1/models', handler: h('models') },
  { method: 'POST', pattern: '/v1/shares', handler: h('create-share') },
  { method: 'GET', pattern: '/v1/shares/{slug}', handler: h('get-share') },
  { method: 'DELETE', pattern: '/v1/shares/{slug}', handler: h('delete-share') },
  { method: 'GET', pattern: '/admin/accounts/{id}/ledger', handler: h('ledger') },
  { method: 'GET', pattern: '/admin/keys/{id}', handler: h('get-key') },
  { method: 'PATCH', pattern: '/admin/keys/{id}', handler: h('patch-key') },
];
const router = createRouter(routes);

function thrown(fn: () => unknown): GatewayError {
  try {
    fn();
  } catch (e) {
    if (e instanceof GatewayError) return e;
    throw e;
  }
  throw new Error('expected a GatewayError');
}

t.test('literal and parameterised patterns match with their params', async (t) => {
  const m = router.match('GET', '/v1/models');
  t.equal(label(m.handler), 'models');
  t.equal(m.pattern, '/v1/models');
  t.same(m.params, {});

  const s = router.match('GET', '/v1/shares/abc123');
  t.equal(label(s.handler), 'get-share');
  t.equal(s.pattern, '/v1/shares/{slug}', 'the pattern, not the slug, is the metric label');
  t.same(s.params, { slug: 'abc123' });

  const l = router.match('GET', '/admin/accounts/acme/ledger');
  t.equal(label(l.handler), 'ledger');
  t.same(l.params, { id: 'acme' });
  t.equal(label(router.match('DELETE', '/v1/shares/x').handler), 'delete-share');
  t.equal(label(router.match('PATCH', '/admin/keys/key_1').handler), 'patch-key');
});

t.test("params are passed raw (percent-decoding is the handler's decision)", async (t) => {
  t.same(router.match('GET', '/v1/shares/a%20b').params, { slug: 'a%20b' });
});

t.test('unknown paths are 404 not_found', async (t) => {
  for (const p of [
    '/',
    '/v1',
    '/v1/model',
    '/v1/models/',
    '/v1/models/extra',
    '/v1/shares/a/b',
    '/admin/accounts/acme',
    '/V1/MODELS',
    '',
  ]) {
    const e = thrown(() => router.match('GET', p));
    t.equal(e.code, 'not_found', `GET ${JSON.stringify(p)}`);
    t.equal(e.status, 404);
    t.equal(e.headers, undefined, 'no Allow on a 404');
  }
});

t.test('a known path with another method is 405 with Allow listing the methods', async (t) => {
  const e = thrown(() => router.match('POST', '/v1/models'));
  t.equal(e.code, 'method_not_allowed');
  t.equal(e.status, 405);
  t.same(e.headers, { allow: 'GET' });

  const s = thrown(() => router.match('PUT', '/v1/shares/abc'));
  t.equal(s.code, 'method_not_allowed');
  const allow = s
    .headers!.allow!.split(',')
    .map((x) => x.trim())
    .sort();
  t.same(allow, ['DELETE', 'GET']);

  const k = thrown(() => router.match('DELETE', '/admin/keys/key_1'));
  t.same(
    k
      .headers!.allow!.split(',')
      .map((x) => x.trim())
      .sort(),
    ['GET', 'PATCH'],
  );
});

t.test('methods are case-sensitive (HTTP methods are)', async (t) => {
  t.equal(thrown(() => router.match('get', '/v1/models')).code, 'method_not_allowed');
});

t.test('HEAD is served by the GET handler; HEAD without a GET is 405', async (t) => {
  t.equal(label(router.match('HEAD', '/v1/models').handler), 'models');
  t.same(router.match('HEAD', '/v1/shares/zz').params, { slug: 'zz' });
  const e = thrown(() => router.match('HEAD', '/v1/shares'));
  t.equal(e.code, 'method_not_allowed');
  t.same(e.headers, { allow: 'POST' });
});

t.test('the first route wins when two patterns could match', async (t) => {
  const r = createRouter([
    { method: 'GET', pattern: '/a/fixed', handler: h('fixed') },
    { method: 'GET', pattern: '/a/{x}', handler: h('param') },
  ]);
  t.equal(label(r.match('GET', '/a/fixed').handler), 'fixed');
  t.equal(label(r.match('GET', '/a/other').handler), 'param');
  // A literal path is looked up in a map built when compiling: it must still lose to an earlier
  // {param} pattern, with that pattern's params, and a 405 there names the earlier pattern's methods.
  const p = createRouter([
    { method: 'GET', pattern: '/b/{x}', handler: h('param') },
    { method: 'GET', pattern: '/b/fixed', handler: h('fixed') },
    { method: 'POST', pattern: '/b/fixed', handler: h('fixed-post') },
  ]);
  const m = p.match('GET', '/b/fixed');
  t.same([label(m.handler), m.pattern, m.params], ['param', '/b/{x}', { x: 'fixed' }]);
  t.match(
    thrown(() => p.match('POST', '/b/fixed')),
    { code: 'method_not_allowed', headers: { allow: 'GET' } },
  );
});
