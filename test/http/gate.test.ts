// The edge's gate (http/gate.ts): routes declare `auth: scope` or `admin: true` and the gate checks them
// once, before the handler. Every authenticated request counts against the request limit, refused ones
// too (SPEC §2a), on a plain route as on a metered one.
import t from 'tap';
import { startGateway } from '../helpers/gateway.ts';

const gw = await startGateway(t);

t.test('a scope refusal is admitted first: past the request limit the 429 wins', async (t) => {
  const { key } = await gw.createKey({ account: 'gate-a', env: 'test', scopes: ['chat'], rate_limits: { requests_per_minute: 2 } });
  const get = () => fetch(`${gw.url}/v1/models`, { headers: gw.auth(key) });
  const first = await get();
  t.equal(first.status, 403, 'lacks the models scope');
  t.ok(first.headers.get('x-ratelimit-remaining-requests') !== null, 'the refusal was admitted (rate-limit headers)');
  t.equal((await get()).status, 403);
  t.equal((await get()).status, 429, 'two refusals used the limit of 2');
});

t.test('a metered route that fails before admitting is admitted once by the gate', async (t) => {
  const { key } = await gw.createKey({ account: 'gate-b', env: 'test', rate_limits: { requests_per_minute: 2 } });
  const post = (body: unknown) =>
    fetch(`${gw.url}/v1/responses`, {
      method: 'POST',
      headers: { ...gw.auth(key), 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
  t.equal((await post({ model: 'nope', input: 'x' })).status, 404);
  t.equal((await post({ input: 'x' })).status, 422);
  t.equal((await post({ model: 'nope', input: 'x' })).status, 429, 'each refusal counted once');
});

t.test('admin routes: the token is checked before the handler reads anything', async (t) => {
  const res = await fetch(`${gw.adminUrl}/admin/keys`, { method: 'POST', headers: { 'content-type': 'text/plain' }, body: 'not json' });
  t.equal(res.status, 401, '401 before the 415 the body would earn');
  const noKey = await fetch(`${gw.url}/v1/embeddings`, { method: 'POST', body: '{}' });
  t.equal(noKey.status, 401);
  t.match(await noKey.json(), { error: { code: 'missing_api_key' } });
});
