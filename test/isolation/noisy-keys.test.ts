// Issue 24, attack #4 (SPEC §13 "Limits are per account too"): one account multiplied every per-key
// limit by making keys (20 test keys in 483 ms, nothing capped keys per account). Here the attacker's
// account fires 140 concurrent key creations through the admin API and then asks the console for more,
// while a victim account's requests are measured. Asserted: exactly limits.max_keys_per_account (the
// default, 100) keys exist, every other create is 429 `key_limit_exceeded` (the console says so in words
// on its keys page), a disabled key still counts, and the victim keeps succeeding, key creation included.
// On the code before the cap, all 140 creates answer 201.
import t from 'tap';
import { startRedis } from '../helpers/redis.ts';
import { startGateway, type TestGateway } from '../helpers/gateway.ts';
import { postChat, startSim } from '../e2e/chat-fixture.ts';

const CAP = 100; // limits.max_keys_per_account's default
const ATTEMPTS = 140;

const redis = await startRedis(t);
if (redis) {
  await redis.client.flushdb();
  const sim = await startSim(t);
  const gw = await startGateway(t, { redisUrl: redis.url, upstreamUrl: sim.url });
  await gw.grant('victim', 100_000_000);
  const victim = await gw.createKey({ account: 'victim', env: 'live' });

  /** The victim's requests, back to back until `stop` resolves: statuses and the slowest. */
  async function measureVictim(stop: Promise<unknown>): Promise<{ statuses: number[]; worstMs: number }> {
    let done = false;
    void stop.finally(() => (done = true));
    const statuses: number[] = [];
    let worstMs = 0;
    // Bounded: at most 200 requests, whatever happens.
    for (let i = 0; i < 200 && (!done || statuses.length < 3); i++) {
      const t0 = performance.now();
      const res = await postChat(gw, victim.key, { model: 'sim-small', messages: [{ role: 'user', content: 'hi' }], max_tokens: 5 });
      await res.arrayBuffer();
      worstMs = Math.max(worstMs, performance.now() - t0);
      statuses.push(res.status);
    }
    return { statuses, worstMs };
  }

  const createKey = (account: string, env = 'test') =>
    gw.admin('/admin/keys', { body: { account, env, name: `k-${Math.random().toString(36).slice(2, 8)}` } });

  t.test(`${ATTEMPTS} concurrent admin creates for one account make exactly ${CAP} keys; the victim is untouched`, async (t) => {
    const attack = Promise.all(Array.from({ length: ATTEMPTS }, () => createKey('attacker')));
    const [replies, measured] = await Promise.all([attack, measureVictim(attack)]);
    const created = replies.filter((r) => r.status === 201);
    const refused = replies.filter((r) => r.status === 429);
    t.equal(created.length, CAP, `exactly ${CAP} created, race or no race`);
    t.equal(refused.length, ATTEMPTS - CAP, 'every other create refused');
    for (const r of refused.slice(0, 3)) {
      t.equal(r.body.error.code, 'key_limit_exceeded');
      t.equal(r.body.error.type, 'rate_limit_error');
      t.match(r.body.error.message, /already has 100 keys/);
    }
    const listed = await gw.admin('/admin/keys?account=attacker');
    t.equal(listed.body.data.length, CAP, 'the account lists exactly the cap');
    t.equal(await redis.client.scard('{acct:attacker}:keys'), CAP, 'and counts exactly the cap in its Redis set');

    t.ok(measured.statuses.length >= 3, 'the victim was measured');
    t.strictSame([...new Set(measured.statuses)], [200], 'every victim request succeeded');
    t.ok(measured.worstMs < 2_000, `victim's slowest request ${measured.worstMs.toFixed(0)} ms`);
    const own = await createKey('victim', 'live');
    t.equal(own.status, 201, "the cap is per account: the victim's account still creates keys");
  });

  t.test('a disabled key still counts: disabling makes no room', async (t) => {
    const listed = await gw.admin('/admin/keys?account=attacker');
    const first = listed.body.data[0].id as string;
    t.equal((await gw.admin(`/admin/keys/${first}`, { method: 'PATCH', body: { active: false } })).status, 200);
    const r = await createKey('attacker');
    t.equal(r.status, 429);
    t.equal(r.body.error.code, 'key_limit_exceeded');
  });

  t.test('the console refuses past the cap and says so in words on the keys page', async (t) => {
    const { body: link } = await gw.admin('/admin/console/sessions', { body: { account: 'attacker' } });
    const cookie = (await fetch(link.url, { redirect: 'manual' })).headers.get('set-cookie')!.split(';')[0]!;
    const post = (extra: Record<string, string> = {}) =>
      fetch(`${gw.url}/console/accounts/attacker/keys`, {
        method: 'POST',
        redirect: 'manual',
        headers: { cookie, origin: gw.url, 'content-type': 'application/x-www-form-urlencoded', ...extra },
        body: 'name=one+more&env=test&scopes=chat',
      });

    const page = await post();
    const text = await page.text();
    t.equal(page.status, 429);
    t.equal(page.headers.get('x-error-code'), 'key_limit_exceeded');
    t.match(text, /<h1>API keys<\/h1>/, 'the keys page itself, not an error card');
    t.match(text, /No key was created: this account has reached its limit of 100 keys/);
    t.match(text, /Disabled keys count too/);
    t.match(text, /id="key-table"/, 'with the table of keys the member can reuse');
    t.notMatch(text, /id="new-key-value"/, 'and no new key');

    const fragment = await post({ 'hx-request': 'true' });
    const frag = await fragment.text();
    t.equal(fragment.status, 429, 'htmx: the same refusal');
    t.equal(fragment.headers.get('hx-retarget'), null, 'swapped where the new key would have shown, not into the error flash');
    t.match(frag, /^<div id="key-limit"/);
    t.match(frag, /reached its limit of 100 keys/);

    t.equal((await gw.admin('/admin/keys?account=attacker')).body.data.length, CAP, 'still exactly the cap');
  });
}
