// The usage page and the keys page's "Last used" column at the HTTP level (SPEC §9, §10): the table is
// the admin API's day × key × model rows, the charts sum them per day, the filters narrow both, a
// member reads only their account, data is escaped. Real requests through the simulator on a clock
// moved three days back and then forward, so the page has two days of usage.
import t from 'tap';
import { formatCredits } from '../../src/credit/money.ts';
import { startGateway, type TestGateway } from '../helpers/gateway.ts';
import { waitFor } from '../helpers/wait.ts';
import { postChat, startSim } from '../e2e/chat-fixture.ts';

const DAY_MS = 86_400_000;
const sim = await startSim(t);
let clock = Date.now() - 3 * DAY_MS;
const gw = await startGateway(t, { upstreamUrl: sim.url, now: () => clock, config: { usage: { flush_interval_ms: 20 } } });
const day = (ms: number) => new Date(ms).toISOString().slice(0, 10);

async function session(body: unknown): Promise<string> {
  const { body: link } = await gw.admin('/admin/console/sessions', { body });
  return (await fetch(link.url, { redirect: 'manual' })).headers.get('set-cookie')!.split(';')[0]!;
}
const get = async (path: string, cookie: string) => {
  const res = await fetch(`${gw.url}${path}`, { headers: { cookie }, redirect: 'manual' });
  return { status: res.status, text: await res.text() };
};
async function chat(g: TestGateway, key: string, model: string, tokens: number): Promise<void> {
  const r = await postChat(g, key, { model, messages: [{ role: 'user', content: 'hello there' }], max_tokens: 32, sim: { tokens } });
  if (r.status !== 200) throw new Error(`chat: ${r.status} ${await r.text()}`);
  await r.arrayBuffer();
}

await gw.grant('acme', 50_000_000);
const prod = await gw.createKey({ account: 'acme', env: 'live', name: 'prod <b>backend</b>' });
const batch = await gw.createKey({ account: 'acme', env: 'live', name: 'batch' });
const idle = await gw.createKey({ account: 'acme', env: 'live', name: 'idle' });
const foreign = await gw.createKey({ account: 'globex', env: 'test', name: 'globex key' });
const earlier = day(clock);
await chat(gw, prod.key, 'sim-small', 10);
await chat(gw, batch.key, 'sim-free', 4);
clock = Date.now();
const today = day(clock);
await chat(gw, prod.key, 'sim-small', 7);
await chat(gw, prod.key, 'sim-small', 9);
await chat(gw, prod.key, 'sim-free', 3);
await chat(gw, batch.key, 'sim-small', 5);
await chat(gw, foreign.key, 'sim-small', 2);
const from = day(clock - 29 * DAY_MS);
const apiRows = async (account: string) =>
  (await gw.admin(`/admin/accounts/${account}/usage?from=${from}&to=${today}&group_by=day,key,model`)).body.rows as any[];
await waitFor(async () => (await apiRows('acme')).reduce((s, r) => s + r.requests, 0) === 6, 3000, 'the usage flush');
const member = await session({ account: 'acme' });

/** The table's rows as the admin API spells them, from the data attributes and the cells. */
function tableRows(text: string) {
  return [...text.matchAll(/<tr data-day="([^"]+)" data-key-id="([^"]+)" data-model="([^"]+)">([\s\S]*?)<\/tr>/g)].map((m) => {
    const nums = [...m[4]!.matchAll(/<td class="num[^"]*"[^>]*>([^<]*)<\/td>/g)].map((c) => c[1]!);
    return {
      day: m[1],
      key_id: m[2],
      model: m[3],
      requests: +nums[0]!,
      prompt_tokens: +nums[1]!,
      cached_tokens: +nums[2]!,
      completion_tokens: +nums[3]!,
      cost: nums[4],
    };
  });
}
const asShown = (rows: any[]) =>
  rows.map((r) => ({ ...r, cost: formatCredits(r.cost_micros), cost_micros: undefined })).map(({ cost_micros, ...r }) => r);
const byId = (a: any, b: any) => `${a.day}${a.key_id}${a.model}`.localeCompare(`${b.day}${b.key_id}${b.model}`);
const bars = (text: string, chart: string) => {
  const svg = new RegExp(`<figure class="chart" id="${chart}">([\\s\\S]*?)</figure>`).exec(text)![1]!;
  return [...svg.matchAll(/<g class="bar" data-day="([^"]+)" data-value="(\d+)">/g)].map((m) => [m[1], +m[2]!]);
};

t.test('the table is the admin API rows; the charts are their sums per day', async (t) => {
  const page = await get('/console/accounts/acme/usage', member);
  t.equal(page.status, 200);
  t.match(page.text, /<a href="\/console\/accounts\/acme\/usage" aria-current="page">Usage<\/a>/, 'a section of the nav');
  const api = await apiRows('acme');
  t.equal(api.length, 5, 'two days, two keys, two models: five cells with usage');
  t.same(tableRows(page.text).sort(byId), asShown(api).sort(byId), 'every row, every number, credits formatted');
  const perDay = (f: (r: any) => number) => [earlier, today].map((d) => [d, api.filter((r) => r.day === d).reduce((s, r) => s + f(r), 0)]);
  t.same(
    bars(page.text, 'chart-requests'),
    perDay((r) => r.requests),
    'one bar per day with usage, its height the day total',
  );
  t.same(
    bars(page.text, 'chart-tokens'),
    perDay((r) => r.prompt_tokens + r.completion_tokens),
  );
  t.same(
    bars(page.text, 'chart-cost'),
    perDay((r) => r.cost_micros),
  );
  t.match(page.text, /<div class="value" id="total-requests">6<\/div>/);
  const cost = api.reduce((s, r) => s + r.cost_micros, 0);
  t.ok(cost > 0, 'sim-small costs something');
  t.match(page.text, `id="total-cost">${formatCredits(cost)}<`);
  const [mm, dd] = [today.slice(5, 7), Number(today.slice(8, 10))];
  const month = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'][Number(mm) - 1];
  t.match(page.text, new RegExp(`<text class="axis"[^>]*>${month} ${dd}</text>`), "today's date labels the axis");
  t.match(page.text, /prod &lt;b&gt;backend&lt;\/b&gt;/, 'key names are text');
  t.notMatch(page.text, /<b>backend/);
});

t.test('filters by key and model narrow the table and the charts', async (t) => {
  const api = await apiRows('acme');
  const q = async (qs: string) => tableRows((await get(`/console/accounts/acme/usage?${qs}`, member)).text).sort(byId);
  t.same(await q(`key=${prod.id}`), asShown(api.filter((r) => r.key_id === prod.id)).sort(byId), 'one key');
  t.same(await q('model=sim-free'), asShown(api.filter((r) => r.model === 'sim-free')).sort(byId), 'one model');
  t.same(
    await q(`key=${batch.id}&model=sim-small`),
    asShown(api.filter((r) => r.key_id === batch.id && r.model === 'sim-small')).sort(byId),
    'both',
  );
  const filtered = (await get(`/console/accounts/acme/usage?key=${batch.id}&model=`, member)).text;
  t.same(bars(filtered, 'chart-requests'), [
    [earlier, 1],
    [today, 1],
  ]);
  t.match(filtered, new RegExp(`<option value="${batch.id}" selected>batch`), 'the chosen key stays selected');
  t.match(filtered, /<option value="" selected>All models<\/option>/, 'an empty model means all');
});

t.test('empty states, and bad filters', async (t) => {
  const fresh = await session({ account: 'quiet' });
  const none = await get('/console/accounts/quiet/usage', fresh);
  t.equal(none.status, 200);
  t.match(none.text, /id="usage-empty"[\s\S]*No usage in the last 30 days/);
  t.notMatch(none.text, /<svg viewBox="0 0 340/, 'no chart without data');
  const unused = await get(`/console/accounts/acme/usage?key=${idle.id}`, member);
  t.match(unused.text, /No usage for this filter in the last 30 days/);
  const script = await get('/console/accounts/acme/usage?model=%3Cscript%3Ealert(1)%3C%2Fscript%3E', member);
  t.equal(script.status, 200);
  t.notMatch(script.text, /<script>alert/, 'a filter value is never echoed as markup');
  t.equal((await get(`/console/accounts/acme/usage?model=${'m'.repeat(201)}`, member)).status, 422, 'an overlong filter');
});

t.test("a member reads only their account's usage; an operator reads any", async (t) => {
  const other = await get('/console/accounts/globex/usage', member);
  t.equal(other.status, 404, "another account's usage page");
  t.notMatch(other.text, /globex key/);
  const probe = await get(`/console/accounts/acme/usage?key=${foreign.id}`, member);
  t.match(probe.text, /No usage for this filter/, "another account's key id as a filter finds nothing");
  const operator = await session({ operator: true });
  const theirs = await get('/console/accounts/globex/usage', operator);
  t.equal(theirs.status, 200);
  t.same(tableRows(theirs.text), asShown(await apiRows('globex')));
  t.equal((await get('/console/accounts/acme/usage', 'tollgate_console=nope')).status, 401, 'no session');
});

t.test('keys page: "Last used" at minute precision from the usage service, "never" for an unused key', async (t) => {
  const page = (await get('/console/accounts/acme/keys', member)).text;
  const keys = (await gw.admin('/admin/keys?account=acme')).body.data as any[];
  const cell = (id: string) =>
    new RegExp(`id="key-${id}"[\\s\\S]*?<td class="last-used">([\\s\\S]*?)</td>`).exec(page)![1]!.replace(/<[^>]+>/g, '');
  const at = keys.find((k) => k.id === prod.id).last_used_at as string;
  t.match(at, new RegExp(`^${today}T\\d\\d:\\d\\d:00Z$`));
  t.match(cell(prod.id), `${today} ${at.slice(11, 16)} UTC`, 'the admin API minute, as people read it');
  t.match(cell(batch.id), new RegExp(`${today} \\d\\d:\\d\\d UTC`));
  t.match(cell(idle.id), /never/);
  t.notMatch(cell(prod.id), /never/);
});

t.test("the operator's account list: balance, keys, last use of any key; sorted by any of them", async (t) => {
  const operator = await session({ operator: true });
  await gw.createKey({ account: 'dormant', env: 'test', name: 'never used' });
  const list = async (qs = '') => {
    const text = (await get(`/console/accounts${qs}`, operator)).text;
    return [...text.matchAll(/<tr data-account="([^"]+)">([\s\S]*?)<\/tr>/g)].map((m) => {
      const cells = [...m[2]!.matchAll(/<td[^>]*>([\s\S]*?)<\/td>/g)].map((c) =>
        c[1]!
          .replace(/<[^>]+>/g, '')
          .replace(/\s+/g, ' ')
          .trim(),
      );
      return { id: m[1]!, balance: cells[1], keys: cells[2], last: cells[3] };
    });
  };
  const rows = await list();
  t.same(
    rows.map((r) => r.id),
    ['acme', 'dormant', 'globex'],
    'by name by default',
  );
  const acme = rows.find((r) => r.id === 'acme')!;
  const api = (await gw.admin('/admin/accounts/acme')).body;
  t.equal(acme.balance, formatCredits(api.balance_micros), 'the balance the admin API reads');
  t.equal(acme.keys, '3', 'three active keys');
  const keys = (await gw.admin('/admin/keys?account=acme')).body.data as any[];
  const newest = keys
    .map((k) => k.last_used_at)
    .filter(Boolean)
    .sort()
    .at(-1) as string;
  t.equal(acme.last, `${newest.slice(0, 10)} ${newest.slice(11, 16)} UTC`, "the newest of its keys' last use");
  t.equal(rows.find((r) => r.id === 'dormant')!.last, 'never');
  t.same(
    (await list('?sort=balance&dir=desc')).map((r) => r.id),
    ['acme', 'dormant', 'globex'].sort((a, b) => (a === 'acme' ? -1 : b === 'acme' ? 1 : a.localeCompare(b))),
    'balance, largest first (ties by name)',
  );
  t.same((await list('?sort=last_used&dir=asc')).map((r) => r.id)[0], 'dormant', 'never used sorts before any use');
  t.same(
    (await list('?sort=keys&dir=desc')).map((r) => r.id),
    ['acme', 'dormant', 'globex'],
    'most keys first',
  );
  const sorted = (await get('/console/accounts?sort=balance&dir=desc', operator)).text;
  t.match(
    sorted,
    /<th class="num" aria-sort="descending">\s*<a class="sort" href="\/console\/accounts\?sort=balance&amp;dir=asc">Balance ↓<\/a>/,
    'the header says how it is sorted and flips it',
  );
  t.equal((await get('/console/accounts?sort=nonsense', operator)).status, 200, 'an unknown sort is the default one');
});
