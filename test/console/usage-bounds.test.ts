// The usage page's read is bounded (docs/console.md "Usage and Last used"): a member can grow an account's
// day hashes without bound (a test key created, used and deleted per request), so the page reads only the
// newest days whose stored counters fit USAGE_PAGE_MAX_FIELDS, checked with one HLEN a day before any
// HGETALL, and lists at most USAGE_TABLE_ROWS rows. Real Redis: the counts are its HLENs.
import t, { type Test } from 'tap';
import { lastDays } from '../../src/console/pages/usage.ts';
import type { UsageCell } from '../../src/store/types.ts';
import { startGateway } from '../helpers/gateway.ts';
import { startRedis } from '../helpers/redis.ts';

// The documented bounds (docs/console.md), spelled here so the test also runs against a gateway without them.
const USAGE_PAGE_MAX_FIELDS = 50_000;
const USAGE_TABLE_ROWS = 1000;
const redis = await startRedis(t);
if (redis) {
  const gw = await startGateway(t, { redisUrl: redis.url });
  const days = lastDays(new Date().toISOString().slice(0, 10), 30);
  const [today, yesterday, before] = [days[29]!, days[28]!, days[27]!];
  // Five counters a cell (every figure non-zero): `cells` cells are 5 × cells fields of the day's hash.
  const cell = (day: string, k: number, model: string): UsageCell & { account: string } => ({
    account: '',
    day,
    key_id: `key_${String(k).padStart(22, '0')}`,
    model,
    requests: 1,
    prompt_tokens: 10,
    completion_tokens: 20,
    cost_micros: 30,
    cached_tokens: 5,
  });
  async function fill(account: string, day: string, cells: number): Promise<void> {
    for (let i = 0; i < cells; i += 500) {
      const batch = Array.from({ length: Math.min(500, cells - i) }, (_, j) => ({ ...cell(day, i + j, 'm'), account }));
      await gw.store.flushUsage({ cells: batch, lastUsed: [], ledgerAccounts: [], retentionDays: 400 });
    }
  }
  async function page(t: Test, account: string): Promise<string> {
    const { body: link } = await gw.admin('/admin/console/sessions', { body: { account } });
    const cookie = (await fetch(link.url, { redirect: 'manual' })).headers.get('set-cookie')!.split(';')[0]!;
    const res = await fetch(`${gw.url}/console/accounts/${account}/usage`, { headers: { cookie } });
    t.equal(res.status, 200);
    return res.text();
  }
  const tableRows = (text: string) => [...text.matchAll(/<tr data-day="([^"]+)" data-key-id="([^"]+)"/g)].map((m) => m[1]!);
  const perDay = Math.floor(USAGE_PAGE_MAX_FIELDS / 5 / 2.5); // 4,000 cells: two days fit, the third does not

  t.test('only the newest days whose counters fit are read; the table lists the newest rows', async (t) => {
    for (const day of [before, yesterday, today]) await fill('big', day, perDay);
    const fields = await Promise.all([before, yesterday, today].map((d) => redis.client.hlen(`{acct:big}:usage:${d}`)));
    t.same(fields, [perDay * 5, perDay * 5, perDay * 5], 'five fields a cell');
    const text = await page(t, 'big');
    t.match(text, new RegExp(`id="usage-partial">\\s*Only ${yesterday} to ${today} are shown: with the 28 older days`));
    t.match(text, new RegExp(`id="total-requests">${2 * perDay}<`), 'the totals count the two days read, not the third');
    t.match(text, new RegExp(`id="usage-table-cut">\\s*The newest ${USAGE_TABLE_ROWS} of ${2 * perDay} rows are listed`));
    const listed = tableRows(text);
    t.equal(listed.length, USAGE_TABLE_ROWS, 'the table is capped');
    t.ok(
      listed.every((d) => d === today),
      'newest first: all of them today',
    );
    t.ok(text.length < 2_000_000, `a bounded page: ${text.length} bytes`);
  });

  t.test('a day too large alone is not read at all', async (t) => {
    await fill('huge', today, Math.ceil(USAGE_PAGE_MAX_FIELDS / 5) + 1);
    const text = await page(t, 'huge');
    t.match(text, /id="usage-too-large"[\s\S]*Too much usage to show here/);
    t.equal(tableRows(text).length, 0);
    t.notMatch(text, /id="usage-partial"/);
  });

  t.test('an account within the bound is read whole, as before', async (t) => {
    await fill('small', before, 3);
    await fill('small', today, 2);
    const text = await page(t, 'small');
    t.notMatch(text, /id="usage-partial"|id="usage-table-cut"|id="usage-too-large"/);
    t.equal(tableRows(text).length, 5);
  });
}
