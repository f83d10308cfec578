// The console's pages at the HTTP level, where a browser adds nothing: the ledger's pages newest first,
// the grant form's validation, the account search, the share list's states, and the operator's link page.
import t from 'tap';
import { startGateway, type TestGateway } from '../helpers/gateway.ts';

const gw = await startGateway(t);
async function session(gw: TestGateway, body: unknown): Promise<string> {
  const { body: link } = await gw.admin('/admin/console/sessions', { body });
  return (await fetch(link.url, { redirect: 'manual' })).headers.get('set-cookie')!.split(';')[0]!;
}
const operator = await session(gw, { operator: true });
const get = async (path: string, cookie = operator) => {
  const res = await fetch(`${gw.url}${path}`, { headers: { cookie }, redirect: 'manual' });
  return { status: res.status, text: await res.text(), location: res.headers.get('location') };
};
const post = (path: string, body: string, cookie = operator) =>
  fetch(`${gw.url}${path}`, {
    method: 'POST',
    redirect: 'manual',
    headers: { cookie, origin: gw.url, 'content-type': 'application/x-www-form-urlencoded' },
    body,
  });
const notes = (text: string) => [...text.matchAll(/<tr data-entry="[^"]+">[\s\S]*?<\/tr>/g)].map((m) => /\bn(\d+)\b/.exec(m[0])?.[1]);

t.test('the ledger pages newest first, 50 a page, with Older and Newest links', async (t) => {
  for (let i = 1; i <= 120; i++) await gw.admin('/admin/accounts/paged/credits', { body: { amount_micros: i, note: `n${i}` } });
  const first = await get('/console/accounts/paged/credit');
  const p1 = notes(first.text);
  t.equal(p1.length, 50);
  t.same([p1[0], p1.at(-1)], ['120', '71'], 'the newest 50');
  const older = /href="([^"]+\?before=[^"]+)" rel="next"/.exec(first.text)![1]!;
  t.notMatch(first.text, /← Newest/, 'no Newest link on the first page');
  const second = await get(older);
  t.same([notes(second.text)[0], notes(second.text).at(-1)], ['70', '21']);
  t.match(second.text, /← Newest/);
  const third = await get(/href="([^"]+\?before=[^"]+)" rel="next"/.exec(second.text)![1]!);
  t.same(
    notes(third.text),
    Array.from({ length: 20 }, (_, i) => String(20 - i)),
    'the last 20, then no Older link',
  );
  t.notMatch(third.text, /rel="next"/);
  t.match(first.text, /id="balance">0\.00726</, 'Σ 1..120 micros = 0.00726 credits');
  t.equal((await get('/console/accounts/paged/credit?before=nonsense')).status, 422, 'a malformed cursor');
});

t.test('grant form: credits as exact decimals; bad amounts are explained beside the field, what was typed kept', async (t) => {
  const cases: [string, RegExp][] = [
    ['amount=&note=kept+note&idempotency_key=a', /id="amount-error">String should have at least 1 character/],
    ['amount=abc&note=kept+note&idempotency_key=b', /id="amount-error">not a decimal number of credits/],
    ['amount=0.0000001&note=kept+note&idempotency_key=c', /id="amount-error">[^<]*at most 6 decimals/],
    ['amount=0&note=kept+note&idempotency_key=d', /id="amount-error">The amount must not be zero/],
    ['amount=2000000000&note=kept+note&idempotency_key=e', /id="amount-error">At most 1000000000 credits/],
    ['amount=1&note=kept+note', /id="grant-error">idempotency_key: Field required/],
  ];
  for (const [body, message] of cases) {
    const res = await post('/console/accounts/granted/credit', body);
    t.equal(res.status, 422, body);
    const text = await res.text();
    t.match(text, message);
    t.match(text, /<nav aria-label="Sections">[\s\S]*Credit/, 'the whole page, navigation included');
    t.match(text, /name="note"[^>]*value="kept note"/, 'the typed note is kept');
    const amount = new URLSearchParams(body).get('amount')!;
    t.match(text, new RegExp(`name="amount"[^>]*value="${amount.replace('.', '\\.')}"`), 'the typed amount is kept');
    const idem = new URLSearchParams(body).get('idempotency_key');
    if (idem) t.match(text, new RegExp(`name="idempotency_key" value="${idem}"`), 'the same idempotency key');
    else t.match(text, /name="idempotency_key" value="console-[0-9a-f-]{36}"/, 'a fresh idempotency key');
  }
  t.equal((await gw.admin('/admin/accounts/granted')).body.balance_micros, 0, 'nothing granted');
  // "granted" has no key and no ledger yet: the first grant, however small, is confirmed (a typo?).
  t.match((await get('/console/accounts/granted/credit')).text, /id="unseen-account"[\s\S]*Account “granted” does not exist yet/);
  const ask = await post('/console/accounts/granted/credit', 'amount=-0.5&note=correction&idempotency_key=k1');
  t.equal(ask.status, 200);
  t.match(await ask.text(), /id="grant-confirm"[\s\S]*Account “granted” does not exist yet<\/strong>[\s\S]*name="confirm" value="-500000"/);
  t.equal((await gw.admin('/admin/accounts/granted')).body.balance_micros, 0, 'not before the confirmation');
  const ok = await post('/console/accounts/granted/credit', 'amount=-0.5&note=correction&idempotency_key=k1&confirm=-500000');
  t.equal(ok.status, 303);
  t.equal(ok.headers.get('location'), '/console/accounts/granted/credit?granted=new');
  const replay = await post('/console/accounts/granted/credit', 'amount=-0.5&note=correction&idempotency_key=k1');
  t.equal(replay.headers.get('location'), '/console/accounts/granted/credit?granted=replay', 'the replay is told so');
  t.match((await get('/console/accounts/granted/credit?granted=replay')).text, /already made; nothing was added twice/);
  t.equal((await gw.admin('/admin/accounts/granted')).body.balance_micros, -500_000, 'a correction, once');
});

t.test('a grant that would take the balance past 9 × 10^15 micro-credits is explained beside the amount', async (t) => {
  for (let i = 0; i < 9; i++) await gw.admin('/admin/accounts/rich/credits', { body: { amount_micros: 1e15 } });
  const res = await post('/console/accounts/rich/credit', 'amount=1&note=kept+note&idempotency_key=r1&confirm=1000000');
  t.equal(res.status, 422);
  const text = await res.text();
  t.match(text, /id="amount-error">Value error, the balance \(9000000000000000 micro-credits\) would pass ±9000000000000000/);
  t.match(text, /name="note"[^>]*value="kept note"/, 'the typed note is kept');
  t.equal((await gw.admin('/admin/accounts/rich')).body.balance_micros, 9e15, 'nothing granted');
});

t.test('a grant above console.confirm_grant_credits is booked only once confirmed, for that amount', async (t) => {
  const balance = async () => (await gw.admin('/admin/accounts/big')).body.balance_micros;
  await gw.createKey({ account: 'big', env: 'test' }); // an account that exists: only the size asks
  const atLimit = await post('/console/accounts/big/credit', 'amount=1000&idempotency_key=c0');
  t.equal(atLimit.status, 303, 'the default threshold (1000 credits) itself needs no confirmation');
  const ask = await post('/console/accounts/big/credit', 'amount=5000.5&note=big+one&idempotency_key=c1');
  t.equal(ask.status, 200);
  const text = await ask.text();
  t.match(text, /id="grant-confirm"[\s\S]*Grant\s+<strong[^>]*>5000\.5 credits<\/strong>\s+to\s+account <strong>big<\/strong>/);
  t.match(text, /name="confirm" value="5000500000"/);
  t.equal(await balance(), 1_000_000_000, 'nothing booked by the first post');
  const stale = await post('/console/accounts/big/credit', 'amount=9000&note=big+one&idempotency_key=c1&confirm=5000500000');
  t.equal(stale.status, 200, 'a confirmation of another amount asks again');
  t.match(await stale.text(), /name="confirm" value="9000000000"/);
  const yes = await post('/console/accounts/big/credit', 'amount=5000.5&note=big+one&idempotency_key=c1&confirm=5000500000');
  t.equal(yes.status, 303);
  t.equal(await balance(), 6_000_500_000, 'booked once confirmed');
  const correction = await post('/console/accounts/big/credit', 'amount=-2000&idempotency_key=c2');
  t.match(
    await correction.text(),
    /Confirm this correction[\s\S]*Take\s+<strong[^>]*>2000 credits<\/strong>\s+from/,
    'a large correction too',
  );

  const strict = await startGateway(t, { config: { console: { confirm_grant_credits: 0 } } });
  const op = await session(strict, { operator: true });
  const r = await fetch(`${strict.url}/console/accounts/x/credit`, {
    method: 'POST',
    redirect: 'manual',
    headers: { cookie: op, origin: strict.url, 'content-type': 'application/x-www-form-urlencoded' },
    body: 'amount=0.000001&idempotency_key=z',
  });
  t.match(await r.text(), /id="grant-confirm"/, 'confirm_grant_credits: 0 confirms every grant');
});

t.test('account search: substring, case-insensitive; an unknown valid id can be opened', async (t) => {
  await gw.createKey({ account: 'Search-Alpha', env: 'test' });
  await gw.createKey({ account: 'search-beta', env: 'test' });
  const names = (text: string) =>
    [...text.matchAll(/<td class="account"><a href="\/console\/accounts\/([^/]+)\/keys">/g)].map((m) => decodeURIComponent(m[1]!));
  t.same(names((await get('/console/accounts?q=SEARCH')).text), ['Search-Alpha', 'search-beta']);
  t.same(names((await get('/console/accounts?q=alpha')).text), ['Search-Alpha']);
  const none = await get('/console/accounts?q=brand-new');
  t.match(none.text, /Open account “brand-new”/);

  // The mistyped id opened anyway: the keys page says it does not exist, and a key needs a confirmation.
  const fresh = (await get('/console/accounts/brand-new/keys')).text;
  t.match(fresh, /id="unseen-account"[\s\S]*Account “brand-new” does not exist yet/);
  t.match(fresh, /<input type="checkbox" name="new_account" value="brand-new" required \/>/, 'a required confirmation in the form');
  const refused = await post('/console/accounts/brand-new/keys', 'name=k&env=test&scopes=chat');
  t.equal(refused.status, 422, 'no key without the confirmation');
  t.match(await refused.text(), /has no keys or credit yet: confirm that you mean to create it/);
  t.same((await gw.admin('/admin/keys?account=brand-new')).body.data, [], 'nothing created');
  const wrong = await post('/console/accounts/brand-new/keys', 'name=k&env=test&scopes=chat&new_account=brand-neww');
  t.equal(wrong.status, 422, 'a confirmation of another id does not count');
  const made = await post('/console/accounts/brand-new/keys', 'name=k&env=test&scopes=chat&new_account=brand-new');
  t.equal(made.status, 201, 'confirmed: created');
  t.notMatch((await get('/console/accounts/brand-new/keys')).text, /unseen-account|name="new_account"/, 'an account with a key is not new');
  t.notMatch((await get('/console/accounts/paged/keys')).text, /unseen-account/, 'nor one with a ledger');
  const member = await session(gw, { account: 'member-new' });
  t.notMatch((await get('/console/accounts/member-new/keys', member)).text, /unseen-account/, "a member's own account is not questioned");
  t.equal((await post('/console/accounts/member-new/keys', 'name=k&env=test&scopes=chat', member)).status, 201);
  t.match(
    (await get('/console/accounts?q=%3Cscript%3E')).text,
    /No account matches/,
    'not a valid id: nothing to open, nothing echoed raw',
  );
  t.notMatch((await get('/console/accounts?q=%3Cscript%3E')).text, /<script>/);
});

t.test("shares: live and revoked listed for the account; another account's slug is a 404", async (t) => {
  const mk = async (account: string, title: string) =>
    (await gw.admin('/admin/shares', { body: { account, snapshot: { title, messages: [{ role: 'user', content: 'x' }] } } })).body
      .slug as string;
  const live = await mk('sharer', 'Live one');
  const gone = await mk('sharer', 'Revoked one');
  const theirs = await mk('other-sharer', 'Not yours');
  await gw.admin(`/admin/shares/${gone}`, { method: 'DELETE' });
  const member = await session(gw, { account: 'sharer' });
  const page = (await get('/console/accounts/sharer/shares', member)).text;
  t.match(page, new RegExp(`id="share-${live}"[\\s\\S]*?Live one[\\s\\S]*?live`));
  // A revoked share's snapshot object is deleted at the revoke (docs/shares.md "Revoke"): listed, untitled.
  t.match(page, new RegExp(`id="share-${gone}" class="off"[\\s\\S]*?untitled[\\s\\S]*?revoked`));
  t.notMatch(page, /Revoked one/, 'its title went with its snapshot');
  t.notMatch(page, /Not yours/);
  t.match(page, /<th>State<\/th>\s*<th class="actions">Revocation<\/th>/, 'every column has a header');
  t.equal((await post(`/console/accounts/sharer/shares/${theirs}/revoke`, '', member)).status, 404, "another account's share");
  t.equal((await fetch(`${gw.url}/v1/shares/${theirs}`)).status, 200, 'untouched');
  const revoked = await post(`/console/accounts/sharer/shares/${live}/revoke`, '', member);
  t.equal(revoked.status, 303);
  t.equal((await fetch(`${gw.url}/v1/shares/${live}`)).status, 410);
});

t.test("the operator's member link page shows a working link once, for the lifetime chosen (up to 24 h)", async (t) => {
  const keys = (await get('/console/accounts/linked/keys')).text;
  t.match(keys, /<select name="ttl_seconds">[\s\S]*value="300"\s+selected[\s\S]*value="86400"\s*>24 hours/, 'five minutes unless chosen');
  t.equal((await post('/console/accounts/linked/links', 'ttl_seconds=86401')).status, 422, 'past 24 h');
  t.equal((await post('/console/accounts/linked/links', 'ttl_seconds=soon')).status, 422, 'not a number');
  const before = Date.now();
  const res = await post('/console/accounts/linked/links', 'ttl_seconds=86400');
  t.equal(res.status, 201);
  const text = await res.text();
  const until = new Date(before + 86_400_000).toISOString();
  t.match(text, new RegExp(`until ${until.slice(0, 10)} ${until.slice(11, 14)}`), 'valid for 24 h');
  const url = /<code id="member-link">([^<]+)<\/code>/.exec(text)![1]!.trim();
  const signedIn = await fetch(url, { redirect: 'manual' });
  t.equal(signedIn.status, 303);
  const cookie = signedIn.headers.get('set-cookie')!.split(';')[0]!;
  t.equal((await get('/console/', cookie)).location, '/console/accounts/linked/keys');
});
