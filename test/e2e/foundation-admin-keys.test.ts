// The admin listener (SPEC §2, §2a): token guard, the unauthenticated ops endpoints, /readyz against a
// real Redis outage, and the key API's exact bodies — on the embedded store and on Redis.
import t from 'tap';
import { ADMIN_TOKEN, expectError, REQ_ID, startGateway, type TestGateway } from '../helpers/gateway.ts';
import { startRedis } from '../helpers/redis.ts';

const KEY = /^svc-(live|test)-[1-9A-HJ-NP-Za-km-z]{32}$/;
const KEY_ID = /^key_[1-9A-HJ-NP-Za-km-z]{16}$/;
const ISO_UTC = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,3})?Z$/;
const RECORD_FIELDS = [
  'account',
  'active',
  'budget',
  'created_at',
  'env',
  'expires_at',
  'id',
  'last4',
  'last_used_at',
  'models',
  'name',
  'rate_limits',
  'scopes',
];

/** Every admin route, with a body where it takes one. */
const ADMIN_CALLS: [string, string, unknown?][] = [
  ['POST', '/admin/keys', { account: 'acme', env: 'live', name: 'n' }],
  ['GET', '/admin/keys?account=acme'],
  ['GET', '/admin/keys/key_1111111111111111'],
  ['PATCH', '/admin/keys/key_1111111111111111', { active: false }],
  ['POST', '/admin/accounts/acme/credits', { amount_micros: 5 }],
  ['GET', '/admin/accounts/acme'],
  ['GET', '/admin/accounts/acme/ledger'],
];

function call(gw: TestGateway, [method, path, body]: [string, string, unknown?], authorization?: string): Promise<Response> {
  return fetch(gw.adminUrl + path, {
    method,
    headers: { ...(authorization !== undefined && { authorization }), ...(body !== undefined && { 'content-type': 'application/json' }) },
    ...(body !== undefined && { body: JSON.stringify(body) }),
  });
}

t.test('without TOLLGATE_ADMIN_TOKEN, /admin/ answers 404; ops endpoints still work', async (t) => {
  const gw = await startGateway(t, { env: { TOLLGATE_ADMIN_TOKEN: '' } });
  for (const c of ADMIN_CALLS) {
    for (const auth of [undefined, `Bearer ${ADMIN_TOKEN}`, 'Bearer ', 'Bearer anything']) {
      await expectError(t, await call(gw, c, auth), 404, 'not_found');
    }
  }
  t.equal((await fetch(`${gw.adminUrl}/healthz`)).status, 200);
  t.equal((await fetch(`${gw.adminUrl}/readyz`)).status, 200);
  t.equal((await fetch(`${gw.adminUrl}/metrics`)).status, 200);
});

t.test('a TOLLGATE_ADMIN_TOKEN read from a file with its newline still admits the token', async (t) => {
  // HTTP strips the newline from the header, so a token kept with it refused the right token for good.
  const gw = await startGateway(t, { env: { TOLLGATE_ADMIN_TOKEN: `${ADMIN_TOKEN}\n` } });
  const res = await fetch(`${gw.adminUrl}/admin/accounts/acme`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
  t.equal(res.status, 200);
  await res.text();
});

t.test('a missing or wrong admin token is 401 invalid_admin_token on every admin route', async (t) => {
  // Many failures from one address on purpose: the failed-admin limiter gets out of the way here.
  const gw = await startGateway(t, { config: { auth: { admin_failed_per_minute: 100_000 } } });
  for (const c of ADMIN_CALLS) {
    for (const auth of [
      undefined,
      '',
      'Bearer',
      `Bearer ${ADMIN_TOKEN}x`,
      `Bearer ${ADMIN_TOKEN.slice(0, -1)}`,
      `Basic ${ADMIN_TOKEN}`,
      ADMIN_TOKEN,
    ]) {
      await expectError(t, await call(gw, c, auth), 401, 'invalid_admin_token');
    }
  }
  t.same(
    (await gw.admin('/admin/accounts/acme')).body,
    { id: 'acme', balance_micros: 0, held_micros: 0 },
    'refused grants credited nothing',
  );
  t.same((await gw.admin('/admin/keys?account=acme')).body.data, [], 'refused creates created nothing');
});

t.test('failed admin authentications are limited per address: past the limit even the right token waits (SPEC §12)', async (t) => {
  const gw = await startGateway(t, { config: { auth: { admin_failed_per_minute: 5 } } });
  const c = ADMIN_CALLS[0]!;
  for (let i = 0; i < 5; i++) await expectError(t, await call(gw, c, `Bearer guess-${i}-${'x'.repeat(32)}`), 401, 'invalid_admin_token');
  const sixth = await call(gw, c, 'Bearer guess-6');
  await expectError(t, sixth, 429, 'rate_limit_exceeded');
  const retry = Number(sixth.headers.get('retry-after'));
  t.ok(retry >= 1 && retry <= 60, `retry-after ${retry}`);
  await expectError(t, await call(gw, c, `Bearer ${ADMIN_TOKEN}`), 429, 'rate_limit_exceeded');
  t.equal((await fetch(`${gw.adminUrl}/healthz`)).status, 200, 'ops endpoints are not behind the guard');
});

t.test('/metrics, /healthz and /readyz need no token', async (t) => {
  const gw = await startGateway(t);
  const { key } = await gw.createKey({ account: 'acme', env: 'test' });
  await (await fetch(`${gw.url}/v1/models`, { headers: gw.auth(key) })).arrayBuffer();
  const m = await fetch(`${gw.adminUrl}/metrics`);
  t.equal(m.status, 200);
  t.match(m.headers.get('content-type'), /^text\/plain/);
  t.match(m.headers.get('x-request-id'), REQ_ID);
  const text = await m.text();
  t.match(text, /# TYPE tollgate_requests_total counter/);
  t.match(text, /tollgate_requests_total\{route="\/v1\/models",model="",status="200",env="test"\} 1/);
  t.match(text, /tollgate_cache_lookups_total\{cache="keys",outcome="(hit|miss)"\}/);
  for (const line of text.split('\n').filter((l) => l && !l.startsWith('#')))
    t.match(line, /^tollgate_/, 'every metric has the tollgate_ prefix');
  t.notOk(text.includes('acme'), 'no account in a label');

  const h = await fetch(`${gw.adminUrl}/healthz`);
  t.equal(h.status, 200);
  t.same(await h.json(), { status: 'ok' });
  const r = await fetch(`${gw.adminUrl}/readyz`);
  t.equal(r.status, 200);
  const ready = (await r.json()) as { status: string; store_kind: string; config: string };
  t.equal(ready.status, 'ready');
  t.equal(ready.store_kind, 'memory');
  t.equal(ready.config, 'loaded');
  await expectError(t, await fetch(`${gw.url}/metrics`), 404, 'not_found');
  await expectError(
    t,
    await fetch(`${gw.url}/admin/keys?account=acme`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } }),
    404,
    'not_found',
  );
});

t.test('/readyz is 503 while Redis is down and 200 again once it is back; it never hangs', async (t) => {
  const redis = await startRedis(t, { restartable: true });
  if (!redis) return;
  const gw = await startGateway(t, { redisUrl: redis.url });
  const ready = async () => {
    const res = await fetch(`${gw.adminUrl}/readyz`, { signal: AbortSignal.timeout(3000) });
    return { status: res.status, body: (await res.json()) as { status: string; store: string; store_kind: string } };
  };
  t.same((await ready()).status, 200);
  t.equal((await ready()).body.store_kind, 'redis');

  await redis.stop();
  const down = await ready();
  t.equal(down.status, 503);
  t.equal(down.body.status, 'not_ready');
  t.equal(down.body.store, 'unreachable');
  t.equal((await fetch(`${gw.adminUrl}/healthz`)).status, 200, 'the process is still healthy');

  await redis.start();
  let status = 0;
  const deadline = Date.now() + 15_000;
  while (status !== 200 && Date.now() < deadline) {
    status = (await ready()).status;
    if (status !== 200) await new Promise((r) => setTimeout(r, 100));
  }
  t.equal(status, 200, 'ready again after Redis came back');
});

for (const storeKind of ['memory', 'redis'] as const) {
  t.test(`key API on the ${storeKind} store`, async (t) => {
    const redis = storeKind === 'redis' ? await startRedis(t) : undefined;
    if (redis === null) return;
    const gw = await startGateway(t, redis ? { redisUrl: redis.url } : {});
    const before = Date.now();

    const created = await gw.admin('/admin/keys', { body: { account: 'acme', env: 'live', name: 'prod backend' } });
    t.equal(created.status, 201);
    t.match(created.headers.get('x-request-id'), REQ_ID);
    const k = created.body;
    t.same(Object.keys(k).sort(), ['key', ...RECORD_FIELDS].sort(), 'exactly the SPEC §2a fields, plus key');
    t.match(k.key, KEY);
    t.ok(k.key.startsWith('svc-live-'));
    t.match(k.id, KEY_ID);
    t.equal(k.account, 'acme');
    t.equal(k.env, 'live');
    t.equal(k.name, 'prod backend');
    t.equal(k.active, true);
    t.same(k.scopes, ['chat', 'models', 'shares', 'embeddings'], 'all scopes by default');
    t.same(k.models, [], 'no allow-list by default');
    t.equal(k.rate_limits, null);
    t.equal(k.last4, k.key.slice(-4));
    t.match(k.created_at, ISO_UTC);
    const created_at = Date.parse(k.created_at);
    t.ok(created_at >= before - 1000 && created_at <= Date.now() + 1000, 'created_at is now');

    const t2 = await gw.admin('/admin/keys', {
      body: {
        account: 'acme',
        env: 'test',
        name: 'ci',
        scopes: ['models', 'chat', 'models'],
        models: ['sim-free'],
        rate_limits: { requests_per_minute: 5 },
      },
    });
    t.equal(t2.status, 201);
    t.ok(t2.body.key.startsWith('svc-test-'));
    t.same([...t2.body.scopes].sort(), ['chat', 'models']);
    t.same(t2.body.models, ['sim-free']);
    t.same(t2.body.rate_limits, { requests_per_minute: 5 });
    t.not(t2.body.key, k.key);
    t.not(t2.body.id, k.id);
    const other = await gw.createKey({ account: 'other', env: 'live' });

    const { key: _full, ...record } = k;
    const got = await gw.admin(`/admin/keys/${k.id}`);
    t.equal(got.status, 200);
    t.same(Object.keys(got.body).sort(), RECORD_FIELDS, 'reads never return key');
    t.same(got.body, record);

    const listed = await gw.admin('/admin/keys?account=acme');
    t.equal(listed.status, 200);
    t.same(listed.body.data.map((r: { id: string }) => r.id).sort(), [k.id, t2.body.id].sort(), "only this account's keys");
    for (const r of listed.body.data) t.same(Object.keys(r).sort(), RECORD_FIELDS);
    t.notOk(JSON.stringify(listed.body).includes(k.key));
    t.same((await gw.admin('/admin/keys?account=nobody')).body.data, []);
    t.same(
      (await gw.admin('/admin/keys?account=other')).body.data.map((r: { id: string }) => r.id),
      [other.id],
    );

    const renamed = await gw.admin(`/admin/keys/${k.id}`, { method: 'PATCH', body: { name: 'renamed' } });
    t.equal(renamed.status, 200);
    t.same(Object.keys(renamed.body).sort(), RECORD_FIELDS);
    t.same(renamed.body, { ...record, name: 'renamed' }, 'only the name changed');
    t.equal((await fetch(`${gw.url}/v1/models`, { headers: gw.auth(k.key) })).status, 200, 'a renamed key still works');

    const off = await gw.admin(`/admin/keys/${k.id}`, { method: 'PATCH', body: { active: false } });
    t.same(off.body, { ...record, name: 'renamed', active: false });
    t.equal((await gw.admin(`/admin/keys/${k.id}`)).body.active, false);
    const on = await gw.admin(`/admin/keys/${k.id}`, { method: 'PATCH', body: { active: true, name: 'back' } });
    t.same(on.body, { ...record, name: 'back', active: true });

    await expectError(
      t,
      await fetch(`${gw.adminUrl}/admin/keys/key_zzzzzzzzzzzzzzzz`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } }),
      404,
      'not_found',
    );
    // The full key in place of the id: 404, and the key is not echoed back (only its last four).
    for (const [method, body] of [
      ['GET', undefined],
      ['PATCH', '{"active":false}'],
      ['DELETE', undefined],
    ] as const) {
      const res = await fetch(`${gw.adminUrl}/admin/keys/${k.key}`, {
        method,
        headers: { authorization: `Bearer ${ADMIN_TOKEN}`, ...(body && { 'content-type': 'application/json' }) },
        ...(body && { body }),
      });
      const text = await res.text();
      t.equal(res.status, 404, method);
      t.notOk(text.includes(k.key), `${method}: the key is not in the answer`);
      t.match(JSON.parse(text).error.message, `svc-${k.env}-…${k.key.slice(-4)}: that is an API key, not its id`);
    }
    await expectError(
      t,
      await fetch(`${gw.adminUrl}/admin/keys/key_zzzzzzzzzzzzzzzz`, {
        method: 'PATCH',
        headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' },
        body: '{"active":false}',
      }),
      404,
      'not_found',
    );
    const missing = await fetch(`${gw.adminUrl}/admin/keys`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
    t.equal(missing.status, 422, 'listing needs ?account=');
    const d = ((await missing.json()) as { detail: { loc: string[]; type: string }[] }).detail;
    t.same(
      d.map((x: { loc: string[]; type: string }) => [x.loc, x.type]),
      [[['query', 'account'], 'missing']],
    );
    // A malformed account id is a 422 like on every other account route, not an empty list.
    for (const bad of ['acme%20', 'a%7Db', '-acme', 'x'.repeat(129)]) {
      const r = await gw.admin(`/admin/keys?account=${bad}`);
      t.equal(r.status, 422, bad);
      t.same(
        r.body.detail.map((x: { loc: string[] }) => x.loc),
        [['query', 'account']],
      );
    }
  });
}

t.test('server.metrics_port serves /metrics alone; the admin listener keeps it too', async (t) => {
  const gw = await startGateway(t, { config: { server: { metrics_port: 0 } } });
  t.ok(gw.metricsUrl, 'a metrics listener');
  const m = await fetch(`${gw.metricsUrl}/metrics`);
  t.equal(m.status, 200);
  t.match(await m.text(), /tollgate_requests_total|# HELP tollgate_/);
  for (const path of ['/admin/keys?account=a', '/healthz', '/readyz']) {
    const r = await fetch(`${gw.metricsUrl}${path}`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
    t.equal(r.status, 404, `${path} is not on the metrics listener`);
    await r.arrayBuffer();
  }
  t.equal((await fetch(`${gw.adminUrl}/metrics`)).status, 200);
});
