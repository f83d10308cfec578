// Key expiry, rotation, deletion and self-service quota (SPEC §15, docs/keys.md), on two gateways
// sharing one real Redis: an expired, rolled-over or deleted key is refused by the other instance within
// 1 s, even while that instance has it cached; GET /v1/key shows a key its own quota.
import t from 'tap';
import { setTimeout as sleep } from 'node:timers/promises';
import { ADMIN_TOKEN, startGateway, type TestGateway } from '../helpers/gateway.ts';
import { startRedis } from '../helpers/redis.ts';

const CONFIG = { auth: { failed_per_minute: 10_000_000 } };

const status = async (gw: TestGateway, key: string) => {
  const res = await fetch(`${gw.url}/v1/models`, { headers: gw.auth(key) });
  const body = (await res.json()) as { error?: { code: string; message: string } };
  return { status: res.status, code: body.error?.code, message: body.error?.message };
};

/** Polls every 20 ms until the key answers `want`; returns the wall-clock time (ms) of that answer. */
const until = async (gw: TestGateway, key: string, want: number, limitMs = 5000): Promise<number> => {
  const start = Date.now();
  while (Date.now() - start < limitMs) {
    if ((await status(gw, key)).status === want) return Date.now();
    await sleep(20);
  }
  return Number.POSITIVE_INFINITY;
};

const redis = await startRedis(t);
if (redis) {
  t.test('a key past its expires_at is refused on both instances within 1 s, cached or not', async (t) => {
    const a = await startGateway(t, { redisUrl: redis.url, config: CONFIG });
    const b = await startGateway(t, { redisUrl: redis.url, config: CONFIG });
    const expiresAt = Date.now() + 1500;
    const made = await a.createKey({ account: 'exp', env: 'live', expires_at: new Date(expiresAt).toISOString() });
    t.equal(made.expires_at, new Date(expiresAt).toISOString(), 'the create body shows the expiry');
    t.equal((await status(b, made.key)).status, 200, 'B accepts (and caches) the key before its expiry');
    const refusedAt = await until(b, made.key, 401);
    t.ok(refusedAt >= expiresAt, 'not refused before its expiry');
    t.ok(refusedAt - expiresAt < 1000, `B refused it ${refusedAt - expiresAt} ms after expires_at`);
    const r = await status(a, made.key);
    t.equal(r.code, 'invalid_api_key');
    t.match(r.message, /expired/, 'the message says it expired');

    // PATCH moves the expiry: into the future re-admits it, null clears it.
    const later = await a.admin(`/admin/keys/${made.id}`, { method: 'PATCH', body: { expires_at: '2999-01-01T00:00:00+02:00' } });
    t.equal(later.status, 200);
    t.equal(later.body.expires_at, '2998-12-31T22:00:00.000Z', 'normalised to UTC');
    t.ok((await until(b, made.key, 200, 2000)) < Infinity, 'a later expiry admits it again');
    const never = await a.admin(`/admin/keys/${made.id}`, { method: 'PATCH', body: { expires_at: null } });
    t.equal(never.body.expires_at, null);

    const bad = await a.admin(`/admin/keys/${made.id}`, { method: 'PATCH', body: { expires_at: '2026-13-01' } });
    t.equal(bad.status, 422);
    t.same(bad.body.detail[0].loc, ['body', 'expires_at']);
  });

  t.test('roll: a new key with the same settings, the old one refused after its grace period', async (t) => {
    const a = await startGateway(t, { redisUrl: redis.url, config: CONFIG });
    const b = await startGateway(t, { redisUrl: redis.url, config: CONFIG });
    const old = await a.createKey({
      account: 'roll',
      env: 'test',
      name: 'ci',
      scopes: ['models', 'chat'],
      rate_limits: { requests_per_minute: 1000 },
      budget: { limit_micros: 5_000, period: 'month' },
    });
    t.equal((await status(b, old.key)).status, 200, 'B has the old key cached');
    const rolled = await a.admin(`/admin/keys/${old.id}/roll`, { method: 'POST', body: { expires_in_seconds: 1 } });
    const rolledAt = Date.now();
    t.equal(rolled.status, 201);
    t.match(rolled.body.key, /^svc-test-/, 'the new key is shown');
    t.equal(rolled.headers.get('cache-control'), 'no-store', 'and kept by no cache');
    const created = await a.admin('/admin/keys', { body: { account: 'roll', env: 'test', name: 'another' } });
    t.equal(created.status, 201);
    t.equal(created.headers.get('cache-control'), 'no-store', 'a created key is kept by no cache either');
    const listed = await a.admin('/admin/keys?account=roll');
    t.equal(listed.headers.get('cache-control'), null, 'a list, which shows no key, is not marked');
    t.not(rolled.body.id, old.id);
    for (const f of ['account', 'env', 'name', 'scopes', 'models', 'rate_limits']) t.same(rolled.body[f], old[f], `same ${f}`);
    t.same(rolled.body.budget, { limit_micros: 5_000, period: 'month', spent_micros: 0 }, 'same budget');
    t.equal(rolled.body.expires_at, null, 'the new key does not expire');
    t.equal(rolled.body.previous.id, old.id);
    const graceEnd = Date.parse(rolled.body.previous.expires_at);
    t.ok(Math.abs(graceEnd - (rolledAt + 1000)) < 1000, 'the old key expires after the grace period');
    t.equal((await status(b, rolled.body.key)).status, 200, 'the new key works on B at once');
    t.equal((await status(b, old.key)).status, 200, 'the old key still works during the grace period');
    const refusedAt = await until(b, old.key, 401);
    t.ok(refusedAt - graceEnd < 1000, `B refused the old key ${refusedAt - graceEnd} ms after its grace period`);
    t.equal((await status(b, rolled.body.key)).status, 200, 'the new key still works');

    const now = await a.admin(`/admin/keys/${rolled.body.id}/roll`, { method: 'POST' });
    t.equal(now.status, 201, 'a roll without a body');
    t.equal((await until(b, rolled.body.key, 401, 1000)) < Infinity, true, 'expires the old key at once');
    t.equal((await a.admin('/admin/keys/key_1111111111111111/roll', { method: 'POST', body: {} })).status, 404);
    const bad = await a.admin(`/admin/keys/${now.body.id}/roll`, { method: 'POST', body: { expires_in_seconds: -1 } });
    t.equal(bad.status, 422);
  });

  t.test('delete: gone from every list, refused on both instances within 1 s, for good', async (t) => {
    const a = await startGateway(t, { redisUrl: redis.url, config: CONFIG });
    const b = await startGateway(t, { redisUrl: redis.url, config: CONFIG });
    const doomed = await a.createKey({ account: 'del', env: 'live' });
    const kept = await a.createKey({ account: 'del', env: 'live' });
    t.equal((await status(b, doomed.key)).status, 200, 'B has the key cached');
    const res = await fetch(`${a.adminUrl}/admin/keys/${doomed.id}`, {
      method: 'DELETE',
      headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
    });
    const deletedAt = Date.now();
    t.equal(res.status, 204);
    t.equal(await res.text(), '');
    const refusedAt = await until(b, doomed.key, 401);
    t.ok(refusedAt - deletedAt < 1000, `B refused the deleted key ${refusedAt - deletedAt} ms after the DELETE`);
    t.same((await status(a, doomed.key)).code, 'invalid_api_key');
    t.equal((await a.admin(`/admin/keys/${doomed.id}`)).status, 404);
    t.same(
      (await b.admin('/admin/keys?account=del')).body.data.map((k: { id: string }) => k.id),
      [kept.id],
      'the list has only the other key',
    );
    t.equal((await a.admin(`/admin/keys/${doomed.id}`, { method: 'PATCH', body: { active: true } })).status, 404, 'cannot be re-enabled');
    t.equal((await a.admin(`/admin/keys/${doomed.id}`, { method: 'DELETE' })).status, 404, 'a second delete is 404');
    await sleep(300);
    t.equal((await status(b, doomed.key)).status, 401, 'still refused');
    t.equal((await status(b, kept.key)).status, 200, 'the other key is untouched');
  });

  t.test('delete of a half-deleted key (record gone, the rest left by a partial delete): finished, 204, then 404', async (t) => {
    const a = await startGateway(t, { redisUrl: redis.url, config: { ...CONFIG, limits: { max_keys_per_account: 2 } } });
    const b = await startGateway(t, { redisUrl: redis.url, config: CONFIG });
    const account = 'half-del';
    const half = await a.createKey({ account, env: 'live' });
    const rolled = await a.admin(`/admin/keys/${half.id}/roll`, { method: 'POST', body: { expires_in_seconds: 600 } });
    t.equal(rolled.status, 201);
    t.equal((await status(b, half.key)).status, 200, 'B has the old key cached');
    // What a delete by an older version (all its writes at once) could leave when only the record's landed:
    // the id index, the key-set entry, its last use, its claim, and no invalidation sent.
    const hash = await redis.client.get(`tg:keyid:${half.id}`);
    await redis.client.del(`tg:key:${hash}`);
    await redis.client.hset(`{acct:${account}}:used`, half.id, '2026-11-22T10:00');
    t.equal((await a.admin(`/admin/keys/${half.id}`)).status, 404, 'reads no longer find it');
    t.equal((await status(b, half.key)).status, 200, 'yet B still serves it from its cache');

    const deletedAt = Date.now();
    t.equal((await a.admin(`/admin/keys/${half.id}`, { method: 'DELETE' })).status, 204, 'the DELETE finishes the delete: 204');
    const refusedAt = await until(b, half.key, 401);
    t.ok(refusedAt - deletedAt < 1000, `B refused it ${refusedAt - deletedAt} ms after the DELETE (an invalidation was sent)`);
    t.equal(await redis.client.exists(`tg:keyid:${half.id}`), 0, 'its id index is gone');
    t.equal(await redis.client.sismember(`{acct:${account}}:keys`, half.id), 0, 'so is its key-set entry');
    t.equal(await redis.client.hexists(`{acct:${account}}:used`, half.id), 0, 'and its last use');
    t.equal(await redis.client.hexists(`{acct:${account}}:rolled`, half.id), 0, 'and its claim');
    t.equal((await a.admin(`/admin/keys/${half.id}`, { method: 'DELETE' })).status, 404, 'a second DELETE is 404');
    const made = await a.admin('/admin/keys', { body: { account, env: 'live', name: 'fits' } });
    t.equal(made.status, 201, 'its place under limits.max_keys_per_account (2) is free again');
    t.equal((await a.admin(`/admin/keys/${rolled.body.id}`)).status, 200, 'the successor is untouched');
  });

  t.test('GET /v1/key: the calling key’s quota with any valid key', async (t) => {
    const gw = await startGateway(t, { redisUrl: redis.url, config: CONFIG });
    const live = await gw.createKey({
      account: 'quota',
      env: 'live',
      name: 'prod',
      scopes: ['shares'],
      budget: { limit_micros: 9_000_000, period: 'day' },
      expires_at: '2999-01-01T00:00:00Z',
    });
    await gw.grant('quota', 1_234_567);
    const res = await fetch(`${gw.url}/v1/key`, { headers: gw.auth(live.key) });
    t.equal(res.status, 200, 'a key without the models or chat scope may read its own quota');
    t.equal(res.headers.get('cache-control'), 'no-store');
    t.same(await res.json(), {
      id: live.id,
      name: 'prod',
      env: 'live',
      expires_at: '2999-01-01T00:00:00.000Z',
      budget: { limit_micros: 9_000_000, period: 'day', spent_micros: 0 },
      rate_limits: { requests_per_minute: null, tokens_per_minute: null },
      balance_micros: 1_234_567,
    });
    const test = await gw.createKey({ account: 'quota', env: 'test', rate_limits: { tokens_per_minute: 77 } });
    const tb = (await (await fetch(`${gw.url}/v1/key`, { headers: gw.auth(test.key) })).json()) as Record<string, unknown>;
    t.equal(tb.balance_micros, null, 'test keys: no balance');
    t.equal(tb.budget, null);
    t.same(tb.rate_limits, { requests_per_minute: 60, tokens_per_minute: 77 }, 'the override, else the env default');
    t.equal((await fetch(`${gw.url}/v1/key`)).status, 401);
    const post = await fetch(`${gw.url}/v1/key`, { method: 'POST', headers: gw.auth(live.key) });
    t.equal(post.status, 405);
  });
}
