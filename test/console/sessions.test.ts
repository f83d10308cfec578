// SPEC §9 at the HTTP level: minting links (validation, shape), signing in (303, cookie attributes),
// single use, expiry of links and sessions, ending an account's sessions (and with them the account's
// links not yet opened), signing out, and what the store holds (hashes only) on a real Redis.
import { createHash } from 'node:crypto';
import t from 'tap';
import type { Test } from 'tap';
import { compileConfig } from '../../src/config/schema.ts';
import { startGateway, type TestGateway } from '../helpers/gateway.ts';
import { startRedis } from '../helpers/redis.ts';

const TOKEN_URL = /\/console\/login\?token=([A-Za-z0-9_-]{43})$/;
const sha256 = (s: string) => createHash('sha256').update(s).digest('hex');

async function mint(gw: TestGateway, body: unknown) {
  return gw.admin('/admin/console/sessions', { body });
}

/** Follows a link's first hop; returns the status, location and the session cookie's name=value. */
async function signIn(url: string) {
  const res = await fetch(url, { redirect: 'manual' });
  const setCookie = res.headers.get('set-cookie') ?? '';
  return { res, status: res.status, location: res.headers.get('location'), setCookie, cookie: setCookie.split(';')[0]! };
}

const page = (gw: TestGateway, path: string, cookie: string) => fetch(`${gw.url}${path}`, { headers: { cookie }, redirect: 'manual' });

t.test(
  'minting a link: exactly one of account / operator: true, ttl 60..86400 (member) or 60..3600 (operator), admin token required',
  async (t) => {
    const gw = await startGateway(t);
    const bad = [
      {},
      { account: 'acme', operator: true },
      { operator: false },
      { account: 'a{b}' },
      { account: 'acme', ttl_seconds: 59 },
      { account: 'acme', ttl_seconds: 86_401 },
      { operator: true, ttl_seconds: 3601 },
    ];
    for (const body of bad) t.equal((await mint(gw, body)).status, 422, JSON.stringify(body));
    const extra = await mint(gw, { account: 'acme', nope: 1 });
    t.equal(extra.body.detail[0].type, 'extra_forbidden');
    const unauth = await fetch(`${gw.adminUrl}/admin/console/sessions`, { method: 'POST', body: '{"operator":true}' });
    t.equal(unauth.status, 401, 'no admin token');

    const before = Date.now();
    const r = await mint(gw, { account: 'acme' });
    t.equal(r.status, 201);
    t.same(Object.keys(r.body).sort(), ['expires_at', 'url']);
    t.match(r.body.url, new RegExp(`^${gw.url}/console/login\\?token=`), 'the public listener is the default origin');
    t.match(r.body.url, TOKEN_URL, '32 random bytes, base64url');
    const ttl = (Date.parse(r.body.expires_at) - before) / 1000;
    t.ok(ttl > 295 && ttl <= 301, `default lifetime 300 s (${ttl})`);
    const long = await mint(gw, { operator: true, ttl_seconds: 3600 });
    t.ok(Date.parse(long.body.expires_at) - before >= 3_599_000, 'ttl_seconds honoured');
    const day = await mint(gw, { account: 'acme', ttl_seconds: 86_400 });
    t.equal(day.status, 201, 'a member link may live 24 h');
    t.ok(Date.parse(day.body.expires_at) - before >= 86_399_000, 'for 24 h');
    const tokens = new Set(await Promise.all(Array.from({ length: 20 }, async () => (await mint(gw, { operator: true })).body.url)));
    t.equal(tokens.size, 20, 'every link is different');
  },
);

t.test('sign-in: 303 to /console/ with an HttpOnly, Strict, /console cookie; the token works once', async (t) => {
  const gw = await startGateway(t, { config: { console: { session_ttl_seconds: 600 } } });
  const { body } = await mint(gw, { account: 'acme' });
  const s = await signIn(body.url);
  t.equal(s.status, 303);
  t.equal(s.location, '/console/', 'the redirect drops the token from the address');
  const attrs = s.setCookie.split(';').map((x) => x.trim());
  t.match(attrs[0], /^tollgate_console=[A-Za-z0-9_-]{43}$/);
  t.same(attrs.slice(1).sort(), ['HttpOnly', 'Max-Age=600', 'Path=/console', 'SameSite=Strict'], 'no Secure over http');
  t.equal(s.res.headers.get('referrer-policy'), 'no-referrer');

  const home = await page(gw, '/console/', s.cookie);
  t.equal(home.headers.get('location'), '/console/accounts/acme/keys', 'a member goes to their keys');
  t.equal((await page(gw, '/console/accounts/acme/keys', s.cookie)).status, 200);

  const again = await signIn(body.url);
  t.equal(again.status, 401, 'used');
  t.equal(again.setCookie, '', 'no cookie');
  t.match(again.res.headers.get('content-type'), /^text\/html/);
  t.match(await again.res.text(), /already used, has expired, or was never valid/);
  for (const q of ['', '?token=', '?token=short', `?token=${'A'.repeat(43)}`]) {
    const r = await fetch(`${gw.url}/console/login${q}`);
    t.equal(r.status, 401, `bad token ${JSON.stringify(q)}`);
  }
  t.equal((await page(gw, '/console/accounts/acme/keys', 'tollgate_console=forged')).status, 401, 'a forged cookie');
  t.equal((await page(gw, '/console/accounts/acme/keys', '')).status, 401, 'no cookie');

  const op = await signIn((await mint(gw, { operator: true })).body.url);
  t.equal((await page(gw, '/console/', op.cookie)).headers.get('location'), '/console/accounts', 'an operator goes to the accounts');
});

t.test('failed sign-ins are limited per address (auth.failed_per_minute)', async (t) => {
  const gw = await startGateway(t, { config: { auth: { failed_per_minute: 3 } } });
  const { body } = await mint(gw, { account: 'acme' });
  for (let i = 0; i < 3; i++) t.equal((await fetch(`${gw.url}/console/login?token=${'x'.repeat(43)}`)).status, 401);
  const refused = await fetch(`${gw.url}/console/login?token=${'x'.repeat(43)}`);
  t.equal(refused.status, 429, 'past the limit');
  t.ok(Number(refused.headers.get('retry-after')) > 0);
  t.equal((await signIn(body.url)).status, 429, 'even a valid link waits for the window: the token is not spent');
  t.equal(await gw.store.takeLoginToken(sha256(TOKEN_URL.exec(body.url)![1]!)).then((g) => g?.account), 'acme');
});

t.test('links and sessions expire', async (t) => {
  let now = Date.now();
  const gw = await startGateway(t, { now: () => now, config: { console: { session_ttl_seconds: 60 } } });
  const stale = await mint(gw, { account: 'acme', ttl_seconds: 60 });
  const fresh = await mint(gw, { account: 'acme', ttl_seconds: 120 });
  now += 61_000;
  t.equal((await signIn(stale.body.url)).status, 401, 'the link expired');
  const s = await signIn(fresh.body.url);
  t.equal(s.status, 303);
  t.equal((await page(gw, '/console/accounts/acme/keys', s.cookie)).status, 200);
  now += 59_000;
  t.equal((await page(gw, '/console/accounts/acme/keys', s.cookie)).status, 200, 'still inside session_ttl_seconds');
  now += 2_000;
  const gone = await page(gw, '/console/accounts/acme/keys', s.cookie);
  t.equal(gone.status, 401, 'the session expired');
  t.match(await gone.text(), /You are signed out/);
});

t.test("ending an account's sessions; signing out", async (t) => {
  const gw = await startGateway(t);
  const one = await signIn((await mint(gw, { account: 'acme' })).body.url);
  const two = await signIn((await mint(gw, { account: 'acme' })).body.url);
  const other = await signIn((await mint(gw, { account: 'globex' })).body.url);
  const op = await signIn((await mint(gw, { operator: true })).body.url);
  t.equal((await gw.admin('/admin/console/sessions?account=a{b}', { method: 'DELETE' })).status, 422);
  const ended = await gw.admin('/admin/console/sessions?account=acme', { method: 'DELETE' });
  t.same(ended, { ...ended, status: 200, body: { account: 'acme', ended: 2 } });
  t.equal((await page(gw, '/console/accounts/acme/keys', one.cookie)).status, 401);
  t.equal((await page(gw, '/console/accounts/acme/keys', two.cookie)).status, 401);
  t.equal((await page(gw, '/console/accounts/globex/keys', other.cookie)).status, 200, 'other accounts keep theirs');
  t.equal((await page(gw, '/console/accounts', op.cookie)).status, 200, 'operators keep theirs');

  const out = await fetch(`${gw.url}/console/logout`, { method: 'POST', headers: { cookie: other.cookie, origin: gw.url } });
  t.equal(out.status, 200);
  t.match(
    out.headers.get('set-cookie'),
    /^tollgate_console=; Path=\/console; HttpOnly; SameSite=Strict; Max-Age=0$/,
    'the cookie is cleared',
  );
  t.equal((await page(gw, '/console/accounts/globex/keys', other.cookie)).status, 401, 'and the session is gone from the store');
});

/**
 * Links minted before an account's sessions are ended and not opened yet: the account's no longer sign in
 * (they used to, for their whole lifetime, up to 24 h); another account's and an operator's still do, and
 * so does a link minted after the end.
 */
async function endRevokesLinks(t: Test, gw: TestGateway) {
  const before = await mint(gw, { account: 'acme', ttl_seconds: 86_400 });
  const otherAccount = await mint(gw, { account: 'globex' });
  const operator = await mint(gw, { operator: true });
  const ended = await gw.admin('/admin/console/sessions?account=acme', { method: 'DELETE' });
  t.same(ended.body, { account: 'acme', ended: 0 }, 'no session to end, only links');
  const after = await mint(gw, { account: 'acme' });
  const refused = await signIn(before.body.url);
  t.equal(refused.status, 401, 'the link minted before the end no longer signs in');
  t.equal(refused.setCookie, '', 'no cookie');
  t.match(await refused.res.text(), /This sign-in link does not work/);
  const s = await signIn(after.body.url);
  t.equal(s.status, 303, 'a link minted after the end signs in');
  t.equal((await page(gw, '/console/accounts/acme/keys', s.cookie)).status, 200);
  t.equal((await signIn(otherAccount.body.url)).status, 303, "another account's link still signs in");
  t.equal((await signIn(operator.body.url)).status, 303, "an operator's link still signs in");
}

t.test("ending an account's sessions revokes its links not yet opened (embedded store)", async (t) => {
  await endRevokesLinks(t, await startGateway(t));
});

t.test('an https public_url: links on it, and the cookie is Secure', async (t) => {
  const gw = await startGateway(t, { config: { console: { public_url: 'https://console.example.com/' } } });
  const { body } = await mint(gw, { account: 'acme' });
  t.match(body.url, /^https:\/\/console\.example\.com\/console\/login\?token=/);
  const token = TOKEN_URL.exec(body.url)![1]!;
  const s = await signIn(`${gw.url}/console/login?token=${token}`);
  t.match(s.setCookie, /; Secure(;|$)/);
  t.throws(() => compileConfig({ models: [], console: { public_url: 'https://x.example.com/console' } }, {}), /console\.public_url/);
  t.throws(() => compileConfig({ models: [], console: { public_url: 'ftp://x.example.com' } }, {}), /console\.public_url/);
});

t.test('console.enabled: false serves no console and mints no links', async (t) => {
  const gw = await startGateway(t, { config: { console: { enabled: false } } });
  const res = await fetch(`${gw.url}/console/`);
  t.equal(res.status, 404);
  t.equal(((await res.json()) as { error: { code: string } }).error.code, 'not_found');
  t.equal((await mint(gw, { operator: true })).status, 404);
});

const redis = await startRedis(t);
if (redis) {
  t.test('Redis holds only hashes of tokens and session ids, with their TTLs', async (t) => {
    await redis.client.flushdb();
    const gw = await startGateway(t, { redisUrl: redis.url });
    const { body } = await mint(gw, { account: 'acme', ttl_seconds: 120 });
    const token = TOKEN_URL.exec(body.url)![1]!;
    const login = `tg:console:login:${sha256(token)}`;
    const ttl = await redis.client.ttl(login);
    t.ok(ttl > 100 && ttl <= 120, `the token's key expires with the link (${ttl})`);
    const s = await signIn(body.url);
    const sid = s.cookie.split('=')[1]!;
    t.equal(await redis.client.exists(login), 0, 'the token is gone once used');
    t.ok((await redis.client.ttl(`tg:console:session:${sha256(sid)}`)) > 43_000, 'the session lives session_ttl_seconds');
    const dump: string[] = [];
    for (const k of await redis.client.keys('*')) {
      const type = await redis.client.type(k);
      dump.push(k, type === 'string' ? ((await redis.client.get(k)) ?? '') : (await redis.client.smembers(k)).join(' '));
    }
    const all = dump.join('\n');
    t.notOk(all.includes(token), 'the token is in no key or value');
    t.notOk(all.includes(sid), 'the session id is in no key or value');
    t.ok(all.includes(sha256(sid)), 'its hash is');
    t.notOk(
      gw.logs.some((l) => l.includes(token) || l.includes(sid)),
      'neither is logged',
    );
  });

  t.test("ending an account's sessions revokes its links not yet opened (Redis)", async (t) => {
    await redis.client.flushdb();
    await endRevokesLinks(t, await startGateway(t, { redisUrl: redis.url }));
  });
}
