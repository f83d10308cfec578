// SPEC §9's browser protections at the HTTP level: the headers on every console response (pages,
// redirects, errors, assets), the CSRF check before routing and before the session, member isolation,
// content-hashed immutable assets, and escaping of everything a page shows.
import { createHash } from 'node:crypto';
import { connect } from 'node:net';
import { gunzipSync } from 'node:zlib';
import t from 'tap';
import { startGateway, type TestGateway } from '../helpers/gateway.ts';

const CSP =
  "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
  "form-action 'self'; base-uri 'none'; frame-ancestors 'none'";

const gw = await startGateway(t);
async function session(gw: TestGateway, body: unknown): Promise<string> {
  const { body: link } = await gw.admin('/admin/console/sessions', { body });
  const res = await fetch(link.url, { redirect: 'manual' });
  return res.headers.get('set-cookie')!.split(';')[0]!;
}
const member = await session(gw, { account: 'acme' });
const operator = await session(gw, { operator: true });
const form = (cookie: string, body: string, headers: Record<string, string> = {}) => ({
  method: 'POST',
  redirect: 'manual' as const,
  headers: { cookie, origin: gw.url, 'content-type': 'application/x-www-form-urlencoded', ...headers },
  body,
});

t.test('every console response carries the security headers', async (t) => {
  const html = await fetch(`${gw.url}/console/accounts/acme/keys`, { headers: { cookie: member } });
  const asset = /href="(\/console\/assets\/console\.[0-9a-f]{12}\.css)"/.exec(await html.text())![1]!;
  const responses: [string, Response][] = [
    ['page', html],
    ['redirect', await fetch(`${gw.url}/console/`, { headers: { cookie: member }, redirect: 'manual' })],
    ['signed out', await fetch(`${gw.url}/console/accounts/acme/keys`)],
    ['login error', await fetch(`${gw.url}/console/login?token=nope`)],
    ['unknown path', await fetch(`${gw.url}/console/nope`, { headers: { cookie: member } })],
    ['wrong method', await fetch(`${gw.url}/console/login`, { method: 'DELETE', headers: { origin: gw.url } })],
    ['csrf refusal', await fetch(`${gw.url}/console/logout`, { method: 'POST' })],
    ['asset', await fetch(`${gw.url}${asset}`)],
  ];
  for (const [what, res] of responses) {
    t.equal(res.headers.get('content-security-policy'), CSP, `${what}: CSP without inline script or style`);
    t.equal(res.headers.get('x-frame-options'), 'DENY', `${what}: no framing`);
    t.equal(res.headers.get('referrer-policy'), 'no-referrer', `${what}: no referrer`);
    t.equal(res.headers.get('x-content-type-options'), 'nosniff', `${what}: nosniff`);
    t.ok(res.headers.get('x-request-id'), `${what}: a request id`);
    if (what !== 'asset') t.equal(res.headers.get('cache-control'), 'no-store', `${what}: no-store`);
  }
  t.equal(responses[4]![1].status, 404);
  t.match(responses[4]![1].headers.get('content-type'), /^text\/html/, 'errors are HTML pages');
  t.equal(responses[5]![1].status, 405);
  t.equal(responses[5]![1].headers.get('allow'), 'GET');
});

t.test('pages have no inline script or style, only same-origin assets', async (t) => {
  const body = await (await fetch(`${gw.url}/console/accounts/acme/keys`, { headers: { cookie: member } })).text();
  t.notMatch(body, /<script(?![^>]*\ssrc=)/, 'every script has a src');
  t.notMatch(body, /<style|\sstyle=|\son[a-z]+=/i, 'no style element, style attribute or inline handler');
  for (const m of body.matchAll(/(?:src|href)="([^"]+)"/g)) t.match(m[1], /^\/(console|v1)\//, `same-origin ${m[1]}`);
});

t.test('a favicon: the page names the icon, and /favicon.ico answers with the same bytes (no 404)', async (t) => {
  const page = await (await fetch(`${gw.url}/console/accounts/acme/keys`, { headers: { cookie: member } })).text();
  const href = /<link rel="icon" href="(\/console\/assets\/favicon\.[0-9a-f]{12}\.ico)"/.exec(page)?.[1];
  t.ok(href, 'a link rel=icon to the hashed asset');
  const linked = Buffer.from(await (await fetch(`${gw.url}${href}`)).arrayBuffer());
  const res = await fetch(`${gw.url}/favicon.ico`);
  t.equal(res.status, 200);
  t.equal(res.headers.get('content-type'), 'image/x-icon');
  t.equal(res.headers.get('cache-control'), 'public, max-age=86400');
  const bytes = Buffer.from(await res.arrayBuffer());
  t.same(bytes, linked, 'the same icon');
  t.same([...bytes.subarray(0, 4)], [0, 0, 1, 0], 'an ICO file');
  t.equal((await fetch(`${gw.url}/favicon.ico?v=2`)).status, 200, 'with a query');
  t.equal((await fetch(`${gw.url}/favicon.icons`)).status, 404, 'only that path');
  t.equal((await fetch(`${gw.url}/favicon.ico`, { method: 'HEAD' })).status, 200, 'HEAD');
});

t.test('assets: content-hashed URLs, immutable for a year, gzip when accepted', async (t) => {
  const page = await (await fetch(`${gw.url}/console/accounts/acme/keys`, { headers: { cookie: member } })).text();
  const urls = [...page.matchAll(/(?:src|href)="(\/console\/assets\/[^"]+)"/g)].map((m) => m[1]!);
  t.equal(urls.length, 4, 'icon, stylesheet, htmx, console script');
  for (const url of urls) {
    const res = await fetch(`${gw.url}${url}`, { headers: { 'accept-encoding': 'identity' } });
    const bytes = Buffer.from(await res.arrayBuffer());
    t.equal(res.status, 200);
    t.equal(res.headers.get('cache-control'), 'public, max-age=31536000, immutable', url);
    const hash = /\.([0-9a-f]{12})\.(css|js|ico)$/.exec(url)![1];
    t.equal(createHash('sha256').update(bytes).digest('hex').slice(0, 12), hash, `${url}: the name is the content's hash`);
  }
  const htmx = urls.find((u) => u.includes('/htmx.'))!;
  const { request } = await import('node:http');
  const gz = await new Promise<{ enc: string | undefined; body: Buffer }>((resolve, reject) => {
    request(`${gw.url}${htmx}`, { headers: { 'accept-encoding': 'gzip' } }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ enc: res.headers['content-encoding'], body: Buffer.concat(chunks) }));
    })
      .on('error', reject)
      .end();
  });
  t.equal(gz.enc, 'gzip');
  t.match(gunzipSync(gz.body).toString('utf8'), /htmx/, 'the precompressed htmx');
  t.equal((await fetch(`${gw.url}/console/assets/console.000000000000.css`)).status, 404, 'an old or made-up hash is not served');
});

t.test('CSRF: a change from anywhere but the console itself → 403, before routing and before the session', async (t) => {
  const path = `${gw.url}/console/accounts/acme/keys`;
  const create = 'name=x&env=test&scopes=chat';
  const refused: [string, RequestInit][] = [
    ['no Origin', { ...form(member, create), headers: { cookie: member, 'content-type': 'application/x-www-form-urlencoded' } }],
    ['another origin', form(member, create, { origin: 'https://evil.example' })],
    ['another port on the same host', form(member, create, { origin: gw.url.replace(/:\d+$/, ':1') })],
    ['the right Origin but cross-site', form(member, create, { 'sec-fetch-site': 'cross-site' })],
    ['Origin null from another site', form(member, create, { origin: 'null', 'sec-fetch-site': 'same-site' })],
    ['Origin null without Sec-Fetch-Site', form(member, create, { origin: 'null' })],
  ];
  for (const [what, init] of refused) {
    const res = await fetch(path, init);
    t.equal(res.status, 403, what);
    t.equal(res.headers.get('x-error-code'), 'permission_denied');
  }
  t.equal((await fetch(`${gw.url}/console/no/such/route`, form('', '', { origin: 'https://evil.example' }))).status, 403, 'before routing');
  t.equal((await fetch(path, form('', create, { origin: 'https://evil.example' }))).status, 403, 'before the session');
  t.equal((await gw.admin('/admin/keys?account=acme')).body.data.length, 0, 'nothing was created');

  t.equal((await fetch(path, form(member, create))).status, 201, 'the console origin is accepted');
  const nullOrigin = await fetch(path, form(member, create, { origin: 'null', 'sec-fetch-site': 'same-origin' }));
  t.equal(nullOrigin.status, 201, 'Origin null with Sec-Fetch-Site: same-origin (a form post under no-referrer)');
  t.equal((await fetch(path, form('', create))).status, 401, 'a right-origin post without a session is signed out, not 403');
  t.equal(
    (await fetch(path, { ...form(member, '{}'), headers: { ...form(member, '').headers, 'content-type': 'application/json' } })).status,
    415,
  );
});

t.test('a member reaches only its own account: everything else is 404', async (t) => {
  const mine = await gw.createKey({ account: 'acme', env: 'test', name: 'mine' });
  const theirs = await gw.createKey({ account: 'globex', env: 'test', name: 'theirs' });
  const get = (p: string, c = member) => fetch(`${gw.url}${p}`, { headers: { cookie: c }, redirect: 'manual' });
  for (const p of ['keys', 'credit', 'shares', 'ledger.csv'])
    t.equal((await get(`/console/accounts/globex/${p}`)).status, 404, `globex ${p}`);
  t.equal((await get('/console/accounts')).status, 404, 'the account list');
  t.equal((await get('/console/accounts/a%7Bb%7D/keys')).status, 404, 'an invalid account id');
  const post = (p: string, body: string) => fetch(`${gw.url}${p}`, form(member, body));
  t.equal((await post(`/console/accounts/acme/keys/${theirs.id}`, 'action=disable')).status, 404, "another account's key id");
  t.equal((await post('/console/accounts/acme/keys/key_doesnotexist0000', 'action=disable')).status, 404, 'an unknown key id');
  t.equal((await post('/console/accounts/globex/keys', 'name=x&env=test&scopes=chat')).status, 404, 'create in another account');
  t.equal((await post('/console/accounts/acme/credit', 'amount=5&idempotency_key=x')).status, 404, 'a member cannot grant');
  t.equal((await post('/console/accounts/acme/links', '')).status, 404, 'nor mint links');
  t.equal((await post('/console/accounts/acme/sessions/end', '')).status, 404, 'nor end sessions');
  t.equal((await gw.admin(`/admin/keys/${theirs.id}`)).body.active, true, "globex's key untouched");
  t.equal((await post(`/console/accounts/acme/keys/${mine.id}`, 'action=disable')).status, 303, 'its own key: done, then back to the list');
  t.equal((await gw.admin(`/admin/keys/${mine.id}`)).body.active, false);
  t.equal((await get('/console/accounts/globex/keys', operator)).status, 200, 'an operator reaches any account');
});

t.test('forms are validated; a created key appears in the create response only', async (t) => {
  const path = `${gw.url}/console/accounts/acme/keys`;
  const bad = await fetch(path, form(member, 'name=&env=prod', { 'hx-request': 'true' }));
  t.equal(bad.status, 422);
  t.equal(bad.headers.get('hx-retarget'), '#flash', 'htmx shows the message in the flash area');
  const text = await bad.text();
  t.match(text, /name: String should have at least 1 character/);
  t.match(text, /env: Input should be &#39;live&#39; or &#39;test&#39;/, 'escaped like any text');
  t.match(text, /scopes: Choose at least one scope/);

  const created = await fetch(
    path,
    form(member, 'name=%3Cb%3Ebold%3C%2Fb%3E&env=live&scopes=chat&scopes=models', { 'hx-request': 'true' }),
  );
  t.equal(created.status, 201);
  const fragment = await created.text();
  const key = /<code id="new-key-value">(svc-live-[1-9A-HJ-NP-Za-km-z]{32})<\/code>/.exec(fragment)?.[1];
  t.ok(key, 'the fragment carries the full key');
  t.match(fragment, /&lt;b&gt;bold&lt;\/b&gt;/, 'the name is escaped');
  t.notMatch(fragment, /<b>bold/);
  t.match(fragment, /id="key-table" class="panel flush" hx-swap-oob="true"/, 'the table is refreshed out of band');
  const list = (await gw.admin('/admin/keys?account=acme')).body.data as { name: string; scopes: string[] }[];
  t.same(list.find((k) => k.name === '<b>bold</b>')?.scopes, ['chat', 'models']);
  const again = await (await fetch(path, { headers: { cookie: member } })).text();
  t.notOk(again.includes(key!), 'the keys page never shows it again');
  t.notOk(
    gw.logs.some((l) => l.includes(key!)),
    'no log line has it',
  );
});

t.test('form posts are read under a budget: a stalled form is cut at body_timeout_ms, one account cannot hold every form', async (t) => {
  const slow = await startGateway(t, { config: { server: { body_timeout_ms: 1500 } } });
  const cookieOf = async (account: string) => session(slow, { account });
  const [acme, globex] = [await cookieOf('acme'), await cookieOf('globex')];
  const url = new URL(slow.url);
  /** A form post that declares `declared` bytes and sends `sent` of them; the status and how long it took. */
  const post = (cookie: string, declared: number, sent: number) => {
    const t0 = Date.now();
    const socket = connect(Number(url.port), url.hostname);
    socket.write(
      `POST /console/accounts/${cookie === acme ? 'acme' : 'globex'}/keys HTTP/1.1\r\nhost: ${url.host}\r\n` +
        `origin: ${slow.url}\r\ncookie: ${cookie}\r\ncontent-type: application/x-www-form-urlencoded\r\n` +
        `content-length: ${declared}\r\n\r\n${'a'.repeat(sent)}`,
    );
    const answer = new Promise<{ status: number; ms: number }>((resolve) => {
      let text = '';
      socket.on('data', (c: Buffer) => {
        text += c.toString('latin1');
        const m = /^HTTP\/1\.1 (\d{3})/.exec(text);
        if (m) resolve({ status: Number(m[1]), ms: Date.now() - t0 });
      });
      socket.on('error', () => resolve({ status: 0, ms: Date.now() - t0 }));
      socket.on('close', () => resolve({ status: 0, ms: Date.now() - t0 }));
    });
    t.teardown(() => socket.destroy());
    return answer;
  };
  const FORM = 16 * 1024;
  // Four stalled forms of 16,000 bytes fill acme's 64 KiB; the fifth passes it: 429 at once.
  const stalled = [0, 1, 2, 3].map(() => post(acme, FORM, 16_000));
  await new Promise((r) => setTimeout(r, 300));
  const fifth = await post(acme, FORM, 16_000);
  t.equal(fifth.status, 429, `a fifth stalled form of the same account is refused (${fifth.ms} ms)`);
  const other = await fetch(`${slow.url}/console/accounts/globex/keys`, {
    method: 'POST',
    redirect: 'manual',
    headers: { cookie: globex, origin: slow.url, 'content-type': 'application/x-www-form-urlencoded', 'hx-request': 'true' },
    body: 'name=ok&env=test&scopes=models',
  });
  t.equal(other.status, 201, 'another account posts its form meanwhile');
  const cut = await Promise.all(stalled);
  for (const c of cut) t.equal(c.status, 408, `a stalled form is answered 408 after ${c.ms} ms`);
  t.ok(Math.max(...cut.map((c) => c.ms)) < 10_000, 'at body_timeout_ms (1.5 s), not at request_timeout_ms (30 s)');
});
