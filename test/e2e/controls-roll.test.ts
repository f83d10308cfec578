// A roll over real HTTP (SPEC §15, docs/keys.md "Rotation"), on the embedded store and on two gateways
// sharing one real Redis: a key rolls once (concurrent rolls make one key, the others 409 naming it), the
// successor keeps the old key's state and expiry (a disabled key's successor is disabled; an expired key
// is not rolled), and a create refuses an expires_at already past (422, SPEC §3.1).
import { readFile } from 'node:fs/promises';
import t from 'tap';
import type { Test } from 'tap';
import { startGateway, type TestGateway } from '../helpers/gateway.ts';
import { startRedis } from '../helpers/redis.ts';
import { waitFor } from '../helpers/wait.ts';

const CONFIG = { auth: { failed_per_minute: 10_000_000 } };

const works = async (gw: TestGateway, key: string) => (await fetch(`${gw.url}/v1/models`, { headers: gw.auth(key) })).status;

const redis = await startRedis(t);
const stores: [string, (t: Test) => Promise<[TestGateway, TestGateway]>][] = [
  [
    'embedded store',
    async (t) => {
      const a = await startGateway(t, { config: CONFIG });
      return [a, a];
    },
  ],
];
if (redis) {
  stores.push([
    'Redis, two instances',
    async (t) => [
      await startGateway(t, { redisUrl: redis.url, config: CONFIG }),
      await startGateway(t, { redisUrl: redis.url, config: CONFIG }),
    ],
  ]);
}

for (const [name, start] of stores) {
  t.test(`${name}: three concurrent rolls of one key make one key; the others 409 naming it`, async (t) => {
    const [a, b] = await start(t);
    const account = `roll-race-${name.length}`;
    const old = await a.createKey({ account, env: 'test', name: 'raced' });
    const rolls = await Promise.all(
      [a, b, a].map((gw) => gw.admin(`/admin/keys/${old.id}/roll`, { method: 'POST', body: { expires_in_seconds: 600 } })),
    );
    t.strictSame(rolls.map((r) => r.status).sort(), [201, 409, 409], 'one roll made a key');
    const made = rolls.find((r) => r.status === 201)!.body;
    for (const r of rolls.filter((r) => r.status === 409)) {
      t.equal(r.body.error.code, 'key_not_rollable');
      t.equal(r.body.error.type, 'invalid_request_error');
      t.equal(
        r.body.error.message,
        `Key ${old.id} was already rolled: its successor is ${made.id}. A key rolls once: roll ${made.id} instead (or, if its key was never received, delete it and roll again).`,
      );
      t.notOk('key' in r.body, 'no key shown');
    }
    const listed = (await a.admin(`/admin/keys?account=${account}`)).body.data.map((k: { id: string }) => k.id);
    t.strictSame(listed.sort(), [old.id, made.id].sort(), 'the old key and one successor, nothing else');
    t.equal(await works(b, made.key), 200, 'the successor works');
    t.equal(await works(b, old.key), 200, 'the old key works through its grace period');

    const later = await b.admin(`/admin/keys/${old.id}/roll`, { method: 'POST' });
    t.equal(later.status, 409, 'a later roll of the rolled key too');
    t.equal(later.body.error.code, 'key_not_rollable');
    t.equal(
      (await a.admin(`/admin/keys/${old.id}`)).body.expires_at,
      rolls.find((r) => r.status === 201)!.body.previous.expires_at,
      'and it left the old key’s expiry as the roll set it',
    );
    const next = await a.admin(`/admin/keys/${made.id}/roll`, { method: 'POST' });
    t.equal(next.status, 201, 'the successor rolls in its turn');

    // The successor deleted, its old key (still in its grace period) may be rolled again.
    const again = await a.createKey({ account, env: 'test', name: 'again' });
    const first = await a.admin(`/admin/keys/${again.id}/roll`, { method: 'POST', body: { expires_in_seconds: 600 } });
    t.equal((await a.admin(`/admin/keys/${first.body.id}`, { method: 'DELETE' })).status, 204);
    const second = await b.admin(`/admin/keys/${again.id}/roll`, { method: 'POST', body: { expires_in_seconds: 600 } });
    t.equal(second.status, 201, 'a deleted successor frees the roll');
  });

  if (name.startsWith('Redis'))
    t.test(
      `${name}: a claim whose successor will never be stored does not block the key; one still being written is not taken`,
      async (t) => {
        const [a, b] = await start(t);
        const account = 'roll-stale';
        const rolled = `{acct:${account}}:rolled`;
        const keys = `{acct:${account}}:keys`;
        const roll = (gw: TestGateway, id: string) =>
          gw.admin(`/admin/keys/${id}/roll`, { method: 'POST', body: { expires_in_seconds: 600 } });

        // A confirmed claim whose successor was deleted without its cleanup (no id index): dropped at once.
        const k1 = await a.createKey({ account, env: 'test', name: 'stale' });
        await redis!.client.hset(rolled, k1.id, 'key_deleted');
        const r1 = await roll(b, k1.id);
        t.equal(r1.status, 201, 'a confirmed claim whose successor is gone: rolled');
        t.equal(await redis!.client.hget(rolled, k1.id), r1.body.id, 'the claim names the real successor, confirmed');

        // A pending claim its roll never confirmed (its writes failed, its process died): dropped after the
        // wait, with the never-stored id's place in the key set.
        const k2 = await a.createKey({ account, env: 'test', name: 'pending' });
        await redis!.client.hset(rolled, k2.id, '~key_neverstored');
        await redis!.client.sadd(keys, 'key_neverstored');
        const started = Date.now();
        const r2 = await roll(b, k2.id);
        t.equal(r2.status, 201, 'a pending claim left behind: rolled after the wait');
        t.ok(Date.now() - started >= 900, `it waited for a roll still in flight (${Date.now() - started} ms)`);
        t.equal(await works(a, r2.body.key), 200, 'the successor works');
        t.equal(await redis!.client.sismember(keys, 'key_neverstored'), 0, 'the never-stored id left the key set');
        // The roll that claimed it, had it only been slow, confirms now and is told to undo its key.
        const confirm = await readFile(new URL('../../src/store/lua/confirm-roll.lua', import.meta.url), 'utf8');
        t.equal(await redis!.client.eval(confirm, 1, rolled, k2.id, 'key_neverstored'), 0, 'a late confirm of the dropped claim fails');
        t.equal(await redis!.client.hget(rolled, k2.id), r2.body.id, 'and leaves the claim to the successor made');
        const again = await roll(a, k2.id);
        t.same([again.status, again.body.error.code], [409, 'key_not_rollable'], 'and the key still rolls once');

        // A pending claim whose roll confirms during the wait (a slow roll): not taken, no second successor.
        const k3 = await a.createKey({ account, env: 'test', name: 'slow' });
        await redis!.client.hset(rolled, k3.id, '~key_slow');
        const pending = roll(b, k3.id);
        await new Promise((r) => setTimeout(r, 300));
        await redis!.client.hset(rolled, k3.id, 'key_slow'); // what confirm-roll.lua does
        const r3 = await pending;
        t.same([r3.status, r3.body.error?.code], [409, 'key_not_rollable'], 'the slow roll kept its claim');
        t.match(r3.body.error.message, /its successor is key_slow/);
        const listed = (await a.admin(`/admin/keys?account=${account}`)).body.data.filter((k: { name: string }) => k.name === 'slow');
        t.equal(listed.length, 1, 'no key made for it');
      },
    );

  t.test(`${name}: the successor keeps the old key's state and expiry; an expired key is not rolled`, async (t) => {
    const [a, b] = await start(t);
    const account = `roll-state-${name.length}`;
    const off = await a.createKey({ account, env: 'test', name: 'off' });
    t.equal((await a.admin(`/admin/keys/${off.id}`, { method: 'PATCH', body: { active: false } })).status, 200);
    const offRolled = await b.admin(`/admin/keys/${off.id}/roll`, { method: 'POST', body: { expires_in_seconds: 60 } });
    t.equal(offRolled.status, 201);
    t.equal(offRolled.body.active, false, 'a disabled key’s successor is disabled');
    t.equal(await works(a, offRolled.body.key), 401, 'and refused');
    t.equal((await a.admin(`/admin/keys/${offRolled.body.id}`, { method: 'PATCH', body: { active: true } })).status, 200);
    await waitFor(async () => (await works(a, offRolled.body.key)) === 200, 2000, 'the successor to work once enabled');

    const until = new Date(Date.now() + 3_600_000).toISOString();
    const temp = await a.createKey({ account, env: 'test', name: 'temp', expires_at: until });
    const tempRolled = await b.admin(`/admin/keys/${temp.id}/roll`, { method: 'POST', body: { expires_in_seconds: 60 } });
    t.equal(tempRolled.status, 201);
    t.equal(tempRolled.body.expires_at, until, 'a key that expires has a successor that expires at the same time');
    t.equal(tempRolled.body.active, true);

    const dead = await a.createKey({ account, env: 'test', name: 'dead' });
    const expiredAt = new Date(Date.now() - 1000).toISOString();
    t.equal(
      (await a.admin(`/admin/keys/${dead.id}`, { method: 'PATCH', body: { expires_at: expiredAt } })).status,
      200,
      'a PATCH may set a past time',
    );
    const refused = await b.admin(`/admin/keys/${dead.id}/roll`, { method: 'POST' });
    t.equal(refused.status, 409, 'an expired key is not rolled');
    t.equal(refused.body.error.code, 'key_not_rollable');
    t.match(refused.body.error.message, `Key ${dead.id} expired at ${expiredAt}`);
    const names = (await a.admin(`/admin/keys?account=${account}`)).body.data.map((k: { name: string }) => k.name);
    t.strictSame(
      names.filter((n: string) => n === 'dead'),
      ['dead'],
      'no key made for it',
    );
    t.equal((await a.admin(`/admin/keys/${dead.id}`)).body.expires_at, expiredAt, 'its expiry untouched');
  });

  t.test(`${name}: a create with expires_at already past is 422 datetime_future, and makes no key`, async (t) => {
    const [a] = await start(t);
    const account = `roll-past-${name.length}`;
    const input = new Date(Math.floor(Date.now() / 1000) * 1000 - 60_000).toISOString().replace('.000Z', 'Z');
    const r = await a.admin('/admin/keys', { body: { account, env: 'live', name: 'born dead', expires_at: input } });
    t.equal(r.status, 422);
    t.strictSame(r.body, {
      detail: [{ loc: ['body', 'expires_at'], msg: 'Input should be in the future', type: 'datetime_future', input, ctx: {} }],
    });
    t.strictSame((await a.admin(`/admin/keys?account=${account}`)).body.data, [], 'nothing made');
    const soon = new Date(Date.now() + 60_000).toISOString();
    t.equal(
      (await a.admin('/admin/keys', { body: { account, env: 'live', name: 'fine', expires_at: soon } })).status,
      201,
      'a future time is taken',
    );
  });
}
