// SPEC §1.1 / issue 2: no full key ever reaches the store, a log line, a metric, a pub/sub message or an
// error body. The create response is the only place a key is ever shown.
import t from 'tap';
import { Redis } from 'ioredis';
import { hashKey } from '../../src/auth/keys.ts';
import { keyRecord } from '../../src/store/redis-keys.ts';
import { ADMIN_TOKEN, startGateway } from '../helpers/gateway.ts';
import { startRedis } from '../helpers/redis.ts';
import { waitFor } from '../helpers/wait.ts';

// Capture every level, so a debug line that leaked a key would be caught too.
process.env.TEST_LOG_LEVEL = 'trace';

/** Every value in the Redis DB, whatever its type, as text. */
async function dumpRedis(client: Redis): Promise<{ keys: string[]; types: Set<string>; text: string }> {
  const keys: string[] = [];
  let cursor = '0';
  do {
    const [next, batch] = await client.scan(cursor, 'COUNT', 1000);
    cursor = next;
    keys.push(...batch);
  } while (cursor !== '0');
  const parts: string[] = [];
  const types = new Set<string>();
  for (const k of keys) {
    const type = await client.type(k);
    types.add(type);
    let value: unknown;
    if (type === 'string') value = await client.get(k);
    else if (type === 'hash') value = await client.hgetall(k);
    else if (type === 'set') value = await client.smembers(k);
    else if (type === 'zset') value = await client.call('ZRANGE', k, '0', '-1', 'WITHSCORES');
    else if (type === 'list') value = await client.lrange(k, 0, -1);
    else if (type === 'stream') value = await client.xrange(k, '-', '+');
    else throw new Error(`unexpected Redis type ${type} for ${k}`);
    parts.push(`${k} (${type}) ${JSON.stringify(value)}`);
  }
  return { keys, types, text: parts.join('\n') };
}

const redis = await startRedis(t);
if (redis) {
  t.test('after creating and using keys, no full key is in Redis, the logs, the metrics or pub/sub', async (t) => {
    // Every pub/sub message of the run, on every channel.
    const sub = new Redis(redis.url, { lazyConnect: true });
    sub.on('error', () => {});
    await sub.connect();
    const messages: string[] = [];
    sub.on('pmessage', (_p: string, channel: string, msg: string) => messages.push(`${channel} ${msg}`));
    await sub.psubscribe('*');
    t.teardown(() => sub.disconnect());

    const gw = await startGateway(t, { redisUrl: redis.url, config: { auth: { failed_per_minute: 100_000 } } });
    const responses: { path: string; text: string }[] = [];
    const adminCall = async (path: string, method = 'GET', body?: unknown) => {
      const res = await fetch(gw.adminUrl + path, {
        method,
        headers: { authorization: `Bearer ${ADMIN_TOKEN}`, ...(body !== undefined && { 'content-type': 'application/json' }) },
        ...(body !== undefined && { body: JSON.stringify(body) }),
      });
      const text = await res.text();
      responses.push({ path: `${method} ${path}`, text });
      return { status: res.status, text };
    };

    const created: { key: string; id: string; last4: string; createText: string }[] = [];
    const specs = [
      { account: 'acme', env: 'live', name: 'one' },
      { account: 'acme', env: 'test', name: 'two', scopes: ['models'] },
      { account: 'beta', env: 'live', name: 'three', models: ['sim-free'], rate_limits: { requests_per_minute: 9 } },
      { account: 'beta', env: 'test', name: 'four' },
    ];
    for (const spec of specs) {
      const r = await adminCall('/admin/keys', 'POST', spec);
      t.equal(r.status, 201);
      const body = JSON.parse(r.text);
      created.push({ key: body.key, id: body.id, last4: body.last4, createText: r.text });
    }

    const publicTexts: string[] = [];
    const use = async (authorization: string) => {
      const res = await fetch(`${gw.url}/v1/models`, { headers: { authorization } });
      publicTexts.push(await res.text());
      return res.status;
    };
    for (const c of created) {
      t.equal(await use(`Bearer ${c.key}`), 200, 'valid use');
      const flipped = c.key.slice(0, -1) + (c.key.endsWith('2') ? '3' : '2');
      t.equal(await use(`Bearer ${flipped}`), 401, 'unknown key');
      t.equal(await use(`Bearer ${c.key}x`), 401, 'malformed key');
      t.equal(await use(`Basic ${Buffer.from(`u:${c.key}`).toString('base64')}`), 401);
      t.equal(await use(c.key), 401, 'key without a scheme');
    }
    const victim = created[0]!;
    await adminCall(`/admin/keys/${victim.id}`, 'PATCH', { active: false, name: 'disabled one' });
    // The disable reaches this gateway's key cache (which holds the key from its valid use above) over
    // Redis pub/sub, after the PATCH's reply; the cache's 10 s TTL is far past this bound.
    t.ok(
      await waitFor(async () => (await use(`Bearer ${victim.key}`)) === 401, 3000, 'the disable reaching the key cache'),
      'disabled key',
    );
    for (const c of created) await adminCall(`/admin/keys/${c.id}`);
    await adminCall('/admin/keys?account=acme');
    await adminCall('/admin/keys?account=beta');
    await adminCall('/admin/accounts/acme/credits', 'POST', { amount_micros: 1000, idempotency_key: 'i-1', note: 'grant' });
    await adminCall('/admin/accounts/acme/ledger');
    // A credit hold too, so the dump covers the hold index (a sorted set) as well.
    t.ok((await gw.store.hold('acme', 'req_secretstest', 10, Date.now() + 60_000)).ok);
    const metrics = await (await fetch(`${gw.adminUrl}/metrics`)).text();
    await new Promise((r) => setTimeout(r, 100));

    const { keys, types, text: dump } = await dumpRedis(redis.client);
    for (const type of ['hash', 'string', 'set', 'stream', 'zset']) t.ok(types.has(type), `the scan covered a ${type}`);
    const logs = gw.logs.join('\n');
    t.ok(messages.length >= 1, 'pub/sub carried the invalidation');
    const requestsMade = responses.length + publicTexts.length + 1; // + /metrics
    const requestLines = gw.logs.filter((l) => /"msg":"request/.test(l)).length;
    t.ok(requestLines >= requestsMade, `log capture works: ${requestLines} request lines for ${requestsMade} requests`);
    for (const c of created) {
      t.ok(keys.includes(keyRecord(hashKey(c.key))), 'the scan sees the key record (right DB), stored under its hash');
      t.ok(dump.includes(c.last4), 'last4 is stored (that is fine)');
      const secret = c.key.slice(9); // the 32 random characters, with or without the prefix
      t.notOk(dump.includes(secret), `Redis holds no ${c.key.slice(0, 9)}… key`);
      t.notOk(logs.includes(secret), 'no log line holds the key');
      t.notOk(metrics.includes(secret), 'no metric holds the key');
      t.notOk(
        messages.some((m) => m.includes(secret)),
        'no pub/sub message holds the key',
      );
      t.notOk(
        publicTexts.some((p) => p.includes(secret)),
        'no public response (error bodies included) holds the key',
      );
      const shownIn = responses.filter((r) => r.text.includes(secret)).map((r) => r.path);
      t.same(shownIn, ['POST /admin/keys'], 'the create response is the only place the key appears');
      t.ok(c.createText.includes(c.key));
      t.ok(
        gw.logs.some((l) => l.includes(c.id)),
        'the key id is logged (that is how requests are traced)',
      );
    }
  });
}
