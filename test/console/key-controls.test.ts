// SPEC §15's key controls in the console at the HTTP level, where a browser adds nothing: the search and
// sort helpers and the budget bar alone, then the key page's posts (what they change, what they refuse,
// the delete confirmation, the roll answer carrying the new key once), CSP-clean markup, and another
// account's key → 404 for every action.
import t from 'tap';
import type { KeyRecord } from '../../src/store/types.ts';
import { budgetBar, filterKeys, keyStatus, rateText, modelsText, sortKeys, type KeyView } from '../../src/console/pages/keys.ts';
import { startGateway, type TestGateway } from '../helpers/gateway.ts';

const NOW = Date.parse('2026-11-25T12:00:00Z');
const rec = (o: Partial<KeyRecord>): KeyRecord => ({
  id: 'key_x',
  account: 'acme',
  env: 'live',
  name: 'k',
  active: true,
  scopes: ['chat'],
  models: [],
  rate_limits: null,
  created_at: '2026-11-01T00:00:00.000Z',
  last4: 'abcd',
  version: 1,
  ...o,
});
const view = (o: Partial<KeyRecord>, lastUsed?: string): KeyView => ({ record: rec(o), lastUsed, budget: null });

t.test('search by name (any case) or last four; sort by each column, ties stable', async (t) => {
  const views = [
    view({ id: 'key_1', name: 'Prod backend', last4: 'Zq9x', created_at: '2026-11-03T00:00:00.000Z' }, '2026-11-24T10:00:00Z'),
    view({ id: 'key_2', name: 'ci', last4: 'ab12', created_at: '2026-11-01T00:00:00.000Z', active: false }),
    view({ id: 'key_3', name: 'batch', last4: 'PROD', created_at: '2026-11-02T00:00:00.000Z', expires_at: '2026-11-20T00:00:00.000Z' }),
    view({ id: 'key_4', name: 'analytics', last4: 'x0x0', created_at: '2026-11-04T00:00:00.000Z' }, '2026-11-25T10:00:00Z'),
  ];
  const ids = (v: KeyView[]) => v.map((x) => x.record.id);
  t.same(ids(filterKeys(views, 'prod')), ['key_1', 'key_3'], 'name or last four, any case');
  t.same(ids(filterKeys(views, 'svc-live-…ab12')), ['key_2'], 'the key as shown');
  t.same(ids(filterKeys(views, '  ')), ids(views), 'blank: every key');
  t.same(ids(filterKeys(views, 'nothing')), []);
  t.same(ids(sortKeys([...views], 'name', 'asc', NOW)), ['key_4', 'key_3', 'key_2', 'key_1'], 'name A→Z, case-insensitive');
  t.same(ids(sortKeys([...views], 'created', 'desc', NOW)), ['key_4', 'key_1', 'key_3', 'key_2'], 'newest first');
  t.same(
    ids(sortKeys([...views], 'last_used', 'desc', NOW)),
    ['key_4', 'key_1', 'key_2', 'key_3'],
    'last used, never last (ties by creation)',
  );
  t.same(ids(sortKeys([...views], 'status', 'asc', NOW)), ['key_1', 'key_4', 'key_3', 'key_2'], 'active, expired, disabled');
  t.equal(keyStatus(rec({ expires_at: '2026-11-25T12:00:00.000Z' }), NOW), 'expired', 'expired at its instant');
  t.equal(keyStatus(rec({ expires_at: '2026-11-25T12:00:00.001Z' }), NOW), 'active');
  t.equal(keyStatus(rec({ active: false, expires_at: '2026-01-01T00:00:00.000Z' }), NOW), 'disabled', 'disabled wins');
  t.equal(modelsText(rec({})), 'all models');
  t.equal(modelsText(rec({ models: ['a', 'b'] })), 'a, b');
  t.equal(rateText(rec({ env: 'test' })), 'test defaults');
  t.equal(rateText(rec({ rate_limits: { tokens_per_minute: 900 } })), '900 tokens/min');
});

const flat = (s: string) => s.replace(/\s+/g, ' ');
t.test('the budget bar: a <meter> capped at the limit, the figures in words', async (t) => {
  const half = flat(budgetBar({ limit_micros: 50_000_000, period: 'month', spent_micros: 25_000_000 }).value);
  t.match(half, /<meter min="0" max="50000000" low="40000000" high="49999999" optimum="0" value="25000000"/);
  t.match(half, /25<\/span> of <span class="limit">50<\/span> credits this month \(UTC\) \(50%\)/);
  const over = flat(budgetBar({ limit_micros: 10, period: 'day', spent_micros: 23 }).value);
  t.match(over, /max="10"[^>]*value="10"/, 'an overrun (an upstream ignoring the cap) fills the bar, no more');
  t.match(over, /\(100%\)/);
  const zero = flat(budgetBar({ limit_micros: 0, period: 'total', spent_micros: 0 }).value);
  t.match(zero, /max="1"[^>]*value="0"/, 'a zero limit is still a valid meter');
  t.match(zero, /\(100%\)/, 'and reads as used up');
  t.notMatch(half + over + zero, /style=/, 'no style attribute (CSP)');
});

const gw = await startGateway(t);
async function session(gw: TestGateway, body: unknown): Promise<string> {
  const { body: link } = await gw.admin('/admin/console/sessions', { body });
  return (await fetch(link.url, { redirect: 'manual' })).headers.get('set-cookie')!.split(';')[0]!;
}
const member = await session(gw, { account: 'acme' });
const get = async (path: string, cookie = member) => {
  const res = await fetch(`${gw.url}${path}`, { headers: { cookie }, redirect: 'manual' });
  return {
    status: res.status,
    text: await res.text(),
    location: res.headers.get('location'),
    csp: res.headers.get('content-security-policy'),
  };
};
const post = async (path: string, body: string, cookie = member) => {
  const res = await fetch(`${gw.url}${path}`, {
    method: 'POST',
    redirect: 'manual',
    headers: { cookie, origin: gw.url, 'content-type': 'application/x-www-form-urlencoded' },
    body,
  });
  return { status: res.status, text: await res.text(), location: res.headers.get('location') };
};
const keyPath = (id: string) => `/console/accounts/acme/keys/${id}`;
const record = async (id: string) => (await gw.admin(`/admin/keys/${id}`)).body;

t.test('the key page: facts, forms, CSP-clean markup', async (t) => {
  const k = await gw.createKey({
    account: 'acme',
    env: 'live',
    name: 'a<b>',
    models: ['sim-small'],
    rate_limits: { requests_per_minute: 7 },
  });
  const r = await get(keyPath(k.id));
  t.equal(r.status, 200);
  t.match(r.csp, /style-src 'self'/);
  t.match(r.text, /Key “a&lt;b&gt;”/, 'the name escaped');
  t.match(r.text, /<dd class="models">sim-small<\/dd>[\s\S]*<dd class="rate">7 requests\/min<\/dd>/);
  t.notMatch(r.text, /style=|<style|<script>|\son[a-z]+=/, 'no inline style, script or handler');
  for (const a of ['budget', 'expire', 'expire_now', 'roll', 'delete'])
    t.match(r.text, new RegExp(`name="action" value="${a}"`), `the ${a} form`);
  t.notMatch(r.text, /value="unbudget"|value="unexpire"/, 'nothing to remove yet');
  const list = await get('/console/accounts/acme/keys');
  t.match(list.text, new RegExp(`href="${keyPath(k.id)}"[^>]*>Manage`), 'the list links to it');
});

t.test('budget and expiry posts: stored as the admin API stores them; bad input → 422, nothing changed', async (t) => {
  const k = await gw.createKey({ account: 'acme', env: 'live', name: 'b' });
  const ok = await post(keyPath(k.id), 'action=budget&limit=12.5&period=day');
  t.equal(ok.status, 303);
  t.equal(ok.location, `${keyPath(k.id)}?saved=budget`);
  t.same((await record(k.id)).budget, { limit_micros: 12_500_000, period: 'day', spent_micros: 0 });
  t.match((await get(ok.location!)).text, /The budget was saved[\s\S]*id="budget-bar"[\s\S]*value="Change budget"|Change budget/);
  // Only the named notices: an inherited name (`constructor`, `toString`) shows none.
  for (const inherited of ['constructor', 'toString', '__proto__']) {
    const page = await get(`${keyPath(k.id)}?saved=${inherited}`);
    t.equal(page.status, 200, inherited);
    t.notMatch(page.text, /native code|\[object /, `?saved=${inherited}: no notice`);
  }
  for (const body of [
    'action=budget&limit=-1&period=day',
    'action=budget&limit=abc&period=day',
    'action=budget&limit=1&period=week',
    'action=budget&period=day',
    'action=expire&expires_at=tomorrow',
    'action=expire&expires_at=',
    'action=roll&grace_seconds=5',
    'action=explode',
  ]) {
    const r = await post(keyPath(k.id), body);
    t.equal(r.status, 422, body);
  }
  const refused = await post(keyPath(k.id), 'action=budget&limit=12%2C5&period=month');
  t.match(refused.text, /<h1>Key “b”<\/h1>/, 'a refused budget: the key page again');
  t.match(refused.text, /name="limit"[^>]*value="12,5"[^>]*aria-invalid="true" aria-describedby="budget-error"/, 'what was typed, marked');
  t.match(refused.text, /id="budget-error" role="alert">[^<]*decimal/, 'the message beside the form');
  const badTime = await post(keyPath(k.id), 'action=expire&expires_at=soon');
  t.match(badTime.text, /id="expiry-error" role="alert">[^<]*datetime/);
  t.match(badTime.text, /name="expires_at" required value="soon"/);
  t.match((await post(keyPath(k.id), 'action=roll&grace_seconds=5')).text, /id="roll-error" role="alert">One of 0, 3600, 86400, 604800/);
  // A time already past (a mistyped year) does not end the key at once: "Expire now" is the button for that.
  const past = await post(keyPath(k.id), 'action=expire&expires_at=2020-01-02T03:04');
  t.equal(past.status, 422, 'an expiry in the past');
  t.match(past.text, /id="expiry-error" role="alert">Input should be in the future/);
  t.same((await record(k.id)).budget.limit_micros, 12_500_000, 'unchanged');
  t.equal((await record(k.id)).expires_at, null);
  t.equal((await post(keyPath(k.id), 'action=expire&expires_at=2030-01-02T03:04')).status, 303);
  t.equal((await record(k.id)).expires_at, '2030-01-02T03:04:00.000Z', 'a datetime-local value is UTC');
  t.equal((await post(keyPath(k.id), 'action=expire&expires_at=2030-01-02T03:04:00%2B02:00')).status, 303);
  t.equal((await record(k.id)).expires_at, '2030-01-02T01:04:00.000Z', 'a zone, when sent, is honoured');
  const page = await get(keyPath(k.id));
  t.match(page.text, /value="2030-01-02T01:04"/, 'the form shows the current expiry');
  t.match(page.text, /value="unexpire"/);
  await post(keyPath(k.id), 'action=unexpire');
  await post(keyPath(k.id), 'action=unbudget');
  const after = await record(k.id);
  t.same([after.expires_at, after.budget], [null, null], 'both cleared');
  await post(keyPath(k.id), 'action=expire_now');
  t.ok(Date.parse((await record(k.id)).expires_at) <= Date.now(), 'expire now');
  t.match(
    (await get('/console/accounts/acme/keys')).text,
    new RegExp(`id="key-${k.id}" class="off"[^>]*data-status="expired"`),
    'listed as expired',
  );
});

t.test('delete: the first post asks, a confirmation for another key does not delete, the right one does', async (t) => {
  const k = await gw.createKey({ account: 'acme', env: 'test', name: 'gone' });
  const other = await gw.createKey({ account: 'acme', env: 'test', name: 'stays' });
  const ask = await post(keyPath(k.id), 'action=delete');
  t.equal(ask.status, 200);
  t.match(ask.text, new RegExp(`id="delete-confirm"[\\s\\S]*name="confirm" value="${k.id}"`));
  t.equal((await gw.admin(`/admin/keys/${k.id}`)).status, 200, 'not deleted by the first post');
  t.equal((await post(keyPath(k.id), `action=delete&confirm=${other.id}`)).status, 200, 'another id: asked again');
  t.equal((await gw.admin(`/admin/keys/${k.id}`)).status, 200);
  t.equal((await gw.admin(`/admin/keys/${other.id}`)).status, 200);
  const done = await post(keyPath(k.id), `action=delete&confirm=${k.id}`);
  t.equal(done.location, '/console/accounts/acme/keys?deleted=1');
  t.equal((await gw.admin(`/admin/keys/${k.id}`)).status, 404);
  t.match((await get(done.location!)).text, /The key was deleted/);
  t.equal((await get(keyPath(k.id))).status, 404, 'its page is gone');
  t.equal((await post(keyPath(k.id), `action=delete&confirm=${k.id}`)).status, 404, 'a second delete');
});

t.test('roll without JavaScript: 201, the new key once, the old key’s new expiry', async (t) => {
  const k = await gw.createKey({ account: 'acme', env: 'test', name: 'rolled', scopes: ['chat', 'models'] });
  const r = await post(keyPath(k.id), 'action=roll&grace_seconds=86400');
  t.equal(r.status, 201);
  const key = /<code id="new-key-value">([^<]+)<\/code>/.exec(r.text)?.[1];
  t.ok(key, 'the new key in full');
  t.equal((await fetch(`${gw.url}/v1/models`, { headers: gw.auth(key!) })).status, 200, 'it works');
  const old = await record(k.id);
  t.match(r.text, new RegExp(`Rolled from <span class="mono">svc-test-…${k.key.slice(-4)}`));
  t.match(r.text, new RegExp(`id="old-key-expires">${old.expires_at.slice(0, 10)} ${old.expires_at.slice(11, 16)} UTC`));
  const rolled = (await gw.admin('/admin/keys?account=acme')).body.data.find((x: any) => x.last4 === key!.slice(-4));
  t.same(rolled.scopes, ['chat', 'models'], 'same scopes');
  // A key rolls once: a second roll (a double submit, another tab) makes no key and names the successor.
  const again = await post(keyPath(k.id), 'action=roll&grace_seconds=86400');
  t.equal(again.status, 409, 'a second roll of the same key');
  t.match(again.text, new RegExp(`id="roll-error" role="alert">Key ${k.id} was already rolled: its successor is ${rolled.id}`));
  t.notMatch(again.text, /new-key-value/, 'no new key shown');
  t.notOk((await get('/console/accounts/acme/keys')).text.includes(key!), 'the list never shows it again');
  t.notOk(
    gw.logs.some((l) => l.includes(key!)),
    'no log line has it',
  );
});

t.test('keys page search and sort over HTTP; unknown sort falls back', async (t) => {
  const r = await get('/console/accounts/acme/keys?q=ROLL&sort=name&dir=desc');
  t.equal(r.status, 200);
  const names = [...r.text.matchAll(/name="name" value="([^"]+)"/g)].map((m) => m[1]);
  t.same(names, ['rolled', 'rolled'], 'the rolled key and its successor');
  t.match(r.text, /2 of \d+ keys/);
  t.match(r.text, /aria-sort="descending"[\s\S]*>Name ↓/);
  t.equal((await get('/console/accounts/acme/keys?sort=bogus&dir=sideways')).status, 200);
});

t.test("another account's key: every action and its page → 404, nothing changed", async (t) => {
  const k = await gw.createKey({ account: 'globex', env: 'live', name: 'theirs' });
  t.equal((await get(`/console/accounts/acme/keys/${k.id}`)).status, 404);
  t.equal((await get(`/console/accounts/globex/keys/${k.id}`)).status, 404);
  for (const body of [
    'action=budget&limit=1&period=day',
    'action=expire_now',
    'action=roll&grace_seconds=0',
    `action=delete&confirm=${k.id}`,
  ]) {
    t.equal((await post(`/console/accounts/acme/keys/${k.id}`, body)).status, 404, body);
    t.equal((await post(`/console/accounts/globex/keys/${k.id}`, body)).status, 404, `${body} (their account)`);
  }
  const after = await record(k.id);
  t.same([after.budget, after.expires_at], [null, null], 'untouched');
  t.equal((await gw.admin('/admin/keys?account=globex')).body.data.length, 1, 'not rolled');
  const operator = await session(gw, { operator: true });
  t.equal(
    (await post(`/console/accounts/globex/keys/${k.id}`, 'action=budget&limit=3&period=total', operator)).status,
    303,
    'an operator may',
  );
  t.same((await record(k.id)).budget.limit_micros, 3_000_000);
});
