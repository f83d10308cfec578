// Key authentication over real HTTP (SPEC §1.1, §1.3, §2a): 401 missing/invalid, 403 scope, the model
// allow-list on /v1/models, the per-address failed-auth limiter, and error bodies that never echo a key.
import t from 'tap';
import type { Test } from 'tap';
import { request } from 'node:http';
import type { ErrorCode } from '../../src/http/errors.ts';
import { createKeyTable } from '../../src/auth/key-table.ts';
import { ADMIN_TOKEN, expectError as expectEnvelope, REQ_ID, startGateway } from '../helpers/gateway.ts';
import { startRedis } from '../helpers/redis.ts';
import { waitFor } from '../helpers/wait.ts';
import { countingKeyReads } from '../store/harness.ts';

/** Generous enough that the 401 cases below never meet the failed-auth limiter. */
const NO_LIMIT = { auth: { failed_per_minute: 100_000 } };

/** The shared envelope check (helpers/gateway.ts expectError); none of `mustNotContain` (8+ chars) echoed. */
async function expectError(
  t: Test,
  res: Response,
  status: number,
  code: ErrorCode,
  mustNotContain: string[] = [],
): Promise<{ message: string }> {
  const { text, error } = await expectEnvelope(t, res, status, code);
  for (const s of mustNotContain) if (s.length >= 8) t.notOk(text.includes(s), 'the submitted credential is not echoed');
  return error;
}

interface ModelList {
  object: string;
  data: { id: string; object: string; created: number; owned_by: string }[];
}

const models = (url: string, headers: Record<string, string> = {}) => fetch(`${url}/v1/models`, { headers });

t.test('401 missing_api_key when there is no Bearer credential', async (t) => {
  const gw = await startGateway(t, { config: NO_LIMIT });
  await expectError(t, await models(gw.url), 401, 'missing_api_key');
  for (const authorization of [
    '',
    'Bearer',
    'Bearer ',
    'Basic dXNlcjpzdmMtbGl2ZS14eHh4',
    'Token svc-live-abc',
    'svc-live-' + '2'.repeat(32),
    'Digest username="x"',
  ]) {
    await expectError(t, await models(gw.url, { authorization }), 401, 'missing_api_key', [authorization]);
  }
});

t.test('401 invalid_api_key for malformed, unknown and disabled keys; the key is never echoed', async (t) => {
  const gw = await startGateway(t, { config: NO_LIMIT });
  const { key, id } = await gw.createKey({ account: 'acme', env: 'live' });
  t.equal((await models(gw.url, gw.auth(key))).status, 200);

  const flip = key.slice(0, -1) + (key.endsWith('2') ? '3' : '2');
  const malformed = [
    'not-a-key',
    'svc-live-short',
    `svc-prod-${'2'.repeat(32)}`,
    `svc-live-${'0'.repeat(32)}`,
    `${key}x`,
    key.slice(0, -1),
    key.toUpperCase(),
  ];
  for (const k of malformed) await expectError(t, await models(gw.url, gw.auth(k)), 401, 'invalid_api_key', [k]);
  for (const k of [flip, `svc-test-${key.slice(9)}`, `svc-live-${'2'.repeat(32)}`]) {
    await expectError(t, await models(gw.url, gw.auth(k)), 401, 'invalid_api_key', [k]);
    await expectError(t, await models(gw.url, gw.auth(k)), 401, 'invalid_api_key', [k]); // negatively cached: same answer
  }
  t.equal((await models(gw.url, { authorization: `bearer   ${key}  ` })).status, 200, 'scheme case and spacing are tolerated');

  t.equal((await gw.admin(`/admin/keys/${id}`, { method: 'PATCH', body: { active: false } })).status, 200);
  const disabled = await expectError(t, await models(gw.url, gw.auth(key)), 401, 'invalid_api_key', [key, key.slice(9)]);
  t.notMatch(disabled.message, key.slice(-8));
  t.equal((await gw.admin(`/admin/keys/${id}`, { method: 'PATCH', body: { active: true } })).status, 200);
  let status = 0;
  for (let i = 0; i < 50 && status !== 200; i++) {
    status = (await models(gw.url, gw.auth(key))).status;
    if (status !== 200) await new Promise((r) => setTimeout(r, 20));
  }
  t.equal(status, 200, 're-enabled key works again');
});

t.test('403 permission_denied on /v1/models for a key without the models scope', async (t) => {
  const gw = await startGateway(t, { config: NO_LIMIT });
  const { key } = await gw.createKey({ account: 'acme', env: 'live', scopes: ['chat', 'shares'] });
  const err = await expectError(t, await models(gw.url, gw.auth(key)), 403, 'permission_denied', [key]);
  t.match(err.message, 'models');
  const ok = await gw.createKey({ account: 'acme', env: 'test', scopes: ['models'] });
  t.equal((await models(gw.url, gw.auth(ok.key))).status, 200);
});

t.test("/v1/models: OpenAI list shape, filtered by the key's model allow-list", async (t) => {
  const gw = await startGateway(t, { config: NO_LIMIT });
  const all = await gw.createKey({ account: 'acme', env: 'live' });
  const res = await models(gw.url, gw.auth(all.key));
  t.equal(res.status, 200);
  t.match(res.headers.get('content-type'), /^application\/json/);
  t.match(res.headers.get('x-request-id'), REQ_ID);
  const body = (await res.json()) as ModelList;
  t.same(Object.keys(body).sort(), ['data', 'object']);
  t.equal(body.object, 'list');
  t.same(
    body.data.map((m: { id: string }) => m.id),
    ['sim-small', 'sim-free'],
    'empty allow-list = every configured model',
  );
  for (const m of body.data) {
    t.same(Object.keys(m).sort(), ['created', 'id', 'object', 'owned_by']);
    t.equal(m.object, 'model');
    t.ok(Number.isInteger(m.created));
    t.type(m.owned_by, 'string');
  }
  t.notOk(JSON.stringify(body).includes('sim/small-1'), 'upstream model ids are not exposed');
  t.notOk(JSON.stringify(body).includes('upstream-secret'));

  const one = await gw.createKey({ account: 'acme', env: 'test', models: ['sim-small'] });
  t.same(
    ((await (await models(gw.url, gw.auth(one.key))).json()) as ModelList).data.map((m: { id: string }) => m.id),
    ['sim-small'],
  );
  // A key naming a model the gateway does not serve could never be used: the create is refused.
  const refused = await gw.admin('/admin/keys', {
    body: { account: 'acme', env: 'test', name: 'n', models: ['sim-small', 'not-configured'] },
  });
  t.equal(refused.status, 422);
  t.match(refused.body.detail, [{ loc: ['body', 'models', '1'], type: 'literal_error', input: 'not-configured' }]);
  // A key whose model was removed from the config since (written straight to the store) lists none.
  const none = await createKeyTable({ store: gw.store, now: Date.now }).create({
    account: 'acme',
    env: 'test',
    name: 'old',
    models: ['removed-model'],
  });
  t.same(await (await models(gw.url, gw.auth(none.key))).json(), { object: 'list', data: [] });
});

/** GET /v1/models from a chosen loopback source address (the failed-auth limiter counts per address). */
function fromAddress(
  url: string,
  localAddress: string,
  authorization?: string,
): Promise<{ status: number; headers: Record<string, string | string[] | undefined>; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request(`${url}/v1/models`, { localAddress, headers: authorization ? { authorization } : {}, agent: false }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

t.test('failed-auth limiter: 30 failures from one address, then 429; a valid key, known or fresh, still works', async (t) => {
  const { store, reads } = countingKeyReads();
  const gw = await startGateway(t, { store });
  const { key } = await gw.createKey({ account: 'acme', env: 'live' });
  t.equal((await models(gw.url, gw.auth(key))).status, 200, 'the valid key is known before the attack');

  const attempts = [
    () => models(gw.url),
    () => models(gw.url, { authorization: 'Basic eDp5' }),
    () => models(gw.url, gw.auth('garbage')),
    () => models(gw.url, gw.auth(`svc-live-${String(Math.random()).slice(2).replace(/0/g, '1').padEnd(32, '2').slice(0, 32)}`)),
  ];
  for (let i = 0; i < 30; i++) {
    const res = await attempts[i % attempts.length]!();
    t.equal(res.status, 401, `failure ${i + 1} is still a 401`);
    await res.arrayBuffer();
  }
  const readsBefore = reads();
  for (const attempt of [...attempts, ...attempts]) {
    const res = await attempt();
    const err = await expectError(t, res, 429, 'rate_limit_exceeded');
    const retry = Number(res.headers.get('retry-after'));
    t.ok(Number.isInteger(retry) && retry >= 1 && retry <= 60, `retry-after ${retry} s`);
    t.ok(Number(res.headers.get('retry-after-ms')) > 0, 'retry-after-ms');
    t.match(err.message, /retry/i);
  }
  // attempts[3] makes a fresh well-formed key each time: looked up (a valid one must never be refused), then 429.
  t.equal(reads(), readsBefore + 2, 'past the limit only fresh well-formed keys reach the store; missing and malformed do not');
  const unknown = `svc-live-${'3'.repeat(32)}`;
  await expectError(t, await models(gw.url, gw.auth(unknown)), 429, 'rate_limit_exceeded', [unknown]);

  for (let i = 0; i < 3; i++)
    t.equal((await models(gw.url, gw.auth(key))).status, 200, 'the known valid key is never refused by the limiter');
  // The NAT case (SPEC §12): a key this instance has never seen, created after the address was throttled.
  const { key: fresh } = await gw.createKey({ account: 'acme-nat', env: 'live' });
  t.equal((await models(gw.url, gw.auth(fresh))).status, 200, 'a fresh valid key from the throttled address is served');

  // The limit is per client address: another loopback address is not blocked.
  const other = await fromAddress(gw.url, '127.0.0.2');
  t.equal(other.status, 401, 'another address still gets plain 401s');
  t.equal(JSON.parse(other.body).error.code, 'missing_api_key');
  const same = await fromAddress(gw.url, '127.0.0.1');
  t.equal(same.status, 429);
  t.ok(same.headers['retry-after']);

  const metrics = await (await fetch(`${gw.adminUrl}/metrics`)).text();
  t.match(metrics, /tollgate_auth_failures_total\{reason="missing"\} \d+/);
  t.match(metrics, /tollgate_auth_failures_total\{reason="malformed"\} \d+/);
  t.match(metrics, /tollgate_auth_failures_total\{reason="unknown"\} \d+/);
  t.match(metrics, /tollgate_auth_failures_total\{reason="throttled"\} \d+/);
  t.notOk(metrics.includes(key), 'no key in a metric');
});

t.test('the request log line names the key id and account, never the key', async (t) => {
  const gw = await startGateway(t, { config: NO_LIMIT });
  const { key, id } = await gw.createKey({ account: 'acme', env: 'live' });
  const res = await models(gw.url, gw.auth(key));
  await res.arrayBuffer();
  const rid = res.headers.get('x-request-id');
  await waitFor(() => gw.logs.some((l) => l.includes(`"${rid}"`)), 3000);
  const line = gw.logs.map((l) => JSON.parse(l)).find((l) => l.request_id === rid);
  t.ok(line);
  t.equal(line.key_id, id);
  t.equal(line.account, 'acme');
  t.equal(line.route, '/v1/models');
  t.equal(line.status, 200);
  t.type(line.duration_ms, 'number');
  t.notOk(gw.logs.join('\n').includes(key));
});

t.test('Redis down: cached keys keep authenticating; lookups and admin writes fail fast with 503 store_unavailable', async (t) => {
  const redis = await startRedis(t, { restartable: true });
  if (!redis) return;
  const gw = await startGateway(t, { redisUrl: redis.url, config: { ...NO_LIMIT, store: { command_timeout_ms: 300 } } }); // outage: fail fast
  const cached = await gw.createKey({ account: 'acme', env: 'live' });
  const uncached = await gw.createKey({ account: 'acme', env: 'test' });
  t.equal((await models(gw.url, gw.auth(cached.key))).status, 200);
  await redis.stop();

  t.equal((await models(gw.url, gw.auth(cached.key))).status, 200, 'a cached key works until its TTL (SPEC §5)');
  const admin = { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' };
  const calls: [string, () => Promise<Response>][] = [
    ['uncached key', () => models(gw.url, gw.auth(uncached.key))],
    ['unknown key', () => models(gw.url, gw.auth(`svc-live-${'5'.repeat(32)}`))],
    ['grant', () => fetch(`${gw.adminUrl}/admin/accounts/acme/credits`, { method: 'POST', headers: admin, body: '{"amount_micros":5}' })],
    [
      'create key',
      () => fetch(`${gw.adminUrl}/admin/keys`, { method: 'POST', headers: admin, body: '{"account":"a","env":"live","name":"n"}' }),
    ],
    ['account', () => fetch(`${gw.adminUrl}/admin/accounts/acme`, { headers: admin })],
  ];
  for (const [name, call] of calls) {
    // Fail fast, never hang: the store's command timeout is 300 ms here; 5 s is a hang.
    const res = await Promise.race([call(), new Promise<null>((r) => setTimeout(r, 5_000, null).unref())]);
    t.ok(res, `${name} answered`);
    if (res) await expectError(t, res, 503, 'store_unavailable', [uncached.key]);
  }
  await redis.start();
});
