// SPEC §13 "bounds keys made": limits.max_keys_per_account counts keys held, and deleting a key frees its
// slot, so a member could create a test key in the console, use it once and delete it, over and over.
// Every key id made and used writes a usage cell (per UTC day, key and model) kept usage.retention_days
// (400 days): measured on real Redis, ~280 B a cycle, 200 cycles in 1.9 s, all accepted, one tenant
// growing Redis without bound. limits.max_keys_made_per_day bounds it: here 5, so the sixth create of the
// day is 429 `key_limit_exceeded` (retry-after: the next UTC midnight) whatever was deleted, through the
// console, the admin API and a roll alike. Real Redis, the real gateway, requests through the simulator.
import t, { type Test } from 'tap';
import * as K from '../../src/store/redis-keys.ts';
import { startRedis } from '../helpers/redis.ts';
import { startGateway, type TestGateway } from '../helpers/gateway.ts';
import { postChat, startSim } from '../e2e/chat-fixture.ts';

const PER_DAY = 5;
const CYCLES = 8;

const redis = await startRedis(t);
if (redis) {
  const sim = await startSim(t);
  const start = () =>
    startGateway(t, {
      redisUrl: redis.url,
      upstreamUrl: sim.url,
      config: { limits: { max_keys_made_per_day: PER_DAY }, usage: { flush_interval_ms: 20 } },
    });

  /** A member's console session for `account`: form posts as its browser sends them. */
  async function member(gw: TestGateway, account: string) {
    const { body: link } = await gw.admin('/admin/console/sessions', { body: { account } });
    const cookie = (await fetch(link.url, { redirect: 'manual' })).headers.get('set-cookie')!.split(';')[0]!;
    return (path: string, form: string, extra: Record<string, string> = {}) =>
      fetch(`${gw.url}/console/accounts/${account}${path}`, {
        method: 'POST',
        redirect: 'manual',
        headers: { cookie, origin: gw.url, 'content-type': 'application/x-www-form-urlencoded', ...extra },
        body: form,
      });
  }

  const untilMidnight = () =>
    Math.ceil((Date.parse(`${new Date().toISOString().slice(0, 10)}T00:00:00Z`) + 86_400_000 - Date.now()) / 1000);
  function retriesTomorrow(t: Test, headers: Headers) {
    const s = Number(headers.get('retry-after'));
    t.ok(s >= 1 && Math.abs(s - untilMidnight()) <= 60, `retry-after ${headers.get('retry-after')} s: the next UTC midnight`);
  }

  t.test(
    `create, use, delete in the console: ${PER_DAY} cycles a day, then 429; Redis keeps ${PER_DAY} usage cells, not ${CYCLES}`,
    async (t) => {
      const gw = await start();
      const post = await member(gw, 'churner');
      const statuses: number[] = [];
      let refused: Response | undefined;
      for (let i = 0; i < CYCLES; i++) {
        const made = await post('/keys', `name=churn-${i}&env=test&scopes=chat`);
        const page = await made.text();
        statuses.push(made.status);
        if (made.status !== 201) {
          refused ??= new Response(page, { status: made.status, headers: made.headers });
          continue;
        }
        const key = /svc-test-[1-9A-HJ-NP-Za-km-z]{32}/.exec(page)![0];
        const used = await postChat(gw, key, {
          model: 'sim-small',
          messages: [{ role: 'user', content: 'hi' }],
          max_tokens: 4,
          sim: { tokens: 2 },
        });
        t.equal(used.status, 200, await used.text());
        const [held] = (await gw.admin('/admin/keys?account=churner')).body.data;
        t.equal((await post(`/keys/${held.id}`, `action=delete&confirm=${held.id}`)).status, 303, 'deleted');
      }
      t.strictSame(statuses, [...Array(PER_DAY).fill(201), ...Array(CYCLES - PER_DAY).fill(429)], 'the daily bound, though no key is held');
      t.strictSame((await gw.admin('/admin/keys?account=churner')).body.data, [], 'the account holds no key: not the held-keys cap');

      t.equal(refused!.headers.get('x-error-code'), 'key_limit_exceeded');
      retriesTomorrow(t, refused!.headers);
      const text = await refused!.text();
      t.match(text, /<h1>API keys<\/h1>/, 'the keys page itself, not an error card');
      t.match(text, /No key was created: this account has made its limit of 5 keys today\./);
      t.match(text, /deleting a key makes no room/);
      t.notMatch(text, /reached its limit of/, "not the held-keys cap's words");
      const fragment = await post('/keys', 'name=one+more&env=test&scopes=chat', { 'hx-request': 'true' });
      t.equal(fragment.status, 429, 'htmx: the same refusal');
      t.match(await fragment.text(), /^<div id="key-limit"[^]*made its limit of 5 keys today/);

      await gw.gateway.usage.flush();
      const day = await redis.client.hkeys(K.usageDay('churner', new Date().toISOString().slice(0, 10)));
      t.equal(day.filter((f) => f.endsWith('|r')).length, PER_DAY, `${PER_DAY} usage cells kept usage.retention_days, one per key made`);

      const admin = await gw.admin('/admin/keys', { body: { account: 'churner', env: 'test', name: 'api' } });
      t.equal(admin.status, 429, 'the admin API counts the same keys');
      t.equal(admin.body.error.code, 'key_limit_exceeded');
      t.match(admin.body.error.message, /^Account "churner" already made 5 keys today \(UTC\), the most one account may make in a day/);
      t.match(admin.body.error.message, /limits\.max_keys_made_per_day/);
      retriesTomorrow(t, admin.headers);
      t.equal((await gw.admin('/admin/keys', { body: { account: 'bystander', env: 'test', name: 'mine' } })).status, 201, 'per account');
    },
  );

  t.test('a roll makes a key and counts: refused past the bound, by the admin API and the console, the old key unchanged', async (t) => {
    const gw = await start();
    let current = (await gw.admin('/admin/keys', { body: { account: 'roller', env: 'live', name: 'rolled' } })).body;
    for (let i = 1; i < PER_DAY; i++) {
      const rolled = await gw.admin(`/admin/keys/${current.id}/roll`, { body: { expires_in_seconds: 3600 } });
      t.equal(rolled.status, 201, `roll ${i}`);
      current = rolled.body;
    }
    const api = await gw.admin(`/admin/keys/${current.id}/roll`, { body: { expires_in_seconds: 3600 } });
    t.equal(api.status, 429, `the roll that would make key ${PER_DAY + 1} today`);
    t.equal(api.body.error.code, 'key_limit_exceeded');
    retriesTomorrow(t, api.headers);

    const post = await member(gw, 'roller');
    const page = await post(`/keys/${current.id}`, 'action=roll&grace_seconds=3600');
    t.equal(page.status, 429);
    t.equal(page.headers.get('x-error-code'), 'key_limit_exceeded');
    t.match(await page.text(), /<p class="field-error" id="roll-error" role="alert">Account &quot;roller&quot; already made 5 keys today/);
    const after = await gw.admin(`/admin/keys/${current.id}`);
    t.equal(after.body.expires_at, null, 'the refused roll left the key as it was');
    t.equal((await gw.admin('/admin/keys?account=roller')).body.data.length, PER_DAY, 'no key was made');
  });
}
