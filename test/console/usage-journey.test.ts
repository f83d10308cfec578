// The usage page in a real browser (Chromium via playwright-core) against a gateway on Redis: chat
// requests with two keys on two models, the usage flush (20 ms here), then the page a member reads:
// the charts drawn with a bar for today and the date on the axis, the table equal to the admin API's
// rows, the filters applied by the form; and the keys page's "Last used" column.
import t from 'tap';
import { formatCredits } from '../../src/credit/money.ts';
import { startGateway } from '../helpers/gateway.ts';
import { startRedis } from '../helpers/redis.ts';
import { startBrowser, newPage } from '../helpers/browser.ts';
import { waitFor } from '../helpers/wait.ts';
import { sdk, startSim } from '../e2e/chat-fixture.ts';

const redis = await startRedis(t);
const browser = redis && (await startBrowser(t));
if (redis && browser) {
  await redis.client.flushdb();
  const sim = await startSim(t);
  const gw = await startGateway(t, { redisUrl: redis.url, upstreamUrl: sim.url, config: { usage: { flush_interval_ms: 20 } } });
  await gw.grant('umbra', 10_000_000);
  const web = await gw.createKey({ account: 'umbra', env: 'live', name: 'web app' });
  const jobs = await gw.createKey({ account: 'umbra', env: 'test', name: 'nightly jobs' });
  const spare = await gw.createKey({ account: 'umbra', env: 'live', name: 'spare' });
  const calls: [string, string, number][] = [
    [web.key, 'sim-small', 12],
    [web.key, 'sim-small', 8],
    [web.key, 'sim-free', 5],
    [jobs.key, 'sim-free', 6],
    [jobs.key, 'sim-small', 4],
  ];
  for (const [key, model, tokens] of calls) {
    await sdk(gw, key).chat.completions.create({
      model,
      messages: [{ role: 'user', content: 'how much did we use?' }],
      max_tokens: 32,
      // The simulator reports a cached prefix of 3 prompt tokens: the table's Cached column shows them.
      sim: { tokens, cached_tokens: 3 },
    } as any);
  }
  const today = new Date().toISOString().slice(0, 10);
  const from = new Date(Date.now() - 29 * 86_400_000).toISOString().slice(0, 10);
  const apiRows = async () =>
    (await gw.admin(`/admin/accounts/umbra/usage?from=${from}&to=${today}&group_by=day,key,model`)).body.rows as any[];
  await waitFor(async () => (await apiRows()).reduce((s, r) => s + r.requests, 0) === calls.length, 3000, 'the usage flush');

  const page = await newPage(browser, gw.url);
  await page.goto((await gw.admin('/admin/console/sessions', { body: { account: 'umbra' } })).body.url);
  const cells = async () =>
    (await page
      .locator('#usage-rows tbody tr')
      .evaluateAll((rows) =>
        rows.map((r) => [...r.querySelectorAll('td')].map((c) => (c.textContent ?? '').replace(/\s+/g, ' ').trim())),
      )) as string[][];
  const expected = (rows: any[], names: Record<string, string>) =>
    rows
      .map((r) => [
        r.day,
        names[r.key_id],
        r.model,
        String(r.requests),
        String(r.prompt_tokens),
        String(r.cached_tokens),
        String(r.completion_tokens),
        formatCredits(r.cost_micros),
      ])
      .sort();
  const names = { [web.id]: `web app …${web.key.slice(-4)}`, [jobs.id]: `nightly jobs …${jobs.key.slice(-4)}` };

  t.test('the usage page: charts with a bar for today, the table equal to the admin API rows', async (t) => {
    await page.click('nav >> text=Usage');
    t.equal(new URL(page.url()).pathname, '/console/accounts/umbra/usage');
    for (const chart of ['#chart-requests', '#chart-tokens', '#chart-cost']) {
      t.equal(await page.locator(`${chart} svg g.bar`).count(), 1, `${chart}: one bar, today's`);
      t.equal(await page.locator(`${chart} svg g.bar`).getAttribute('data-day'), today);
      const box = await page.locator(`${chart} svg g.bar rect`).first().boundingBox();
      t.ok(box && box.height > 10 && box.width > 2, `${chart}: drawn at a visible size (${JSON.stringify(box)})`);
    }
    t.equal(await page.locator('#chart-requests g.bar').getAttribute('data-value'), String(calls.length));
    t.equal(await page.locator('#chart-tokens g.bar rect').count(), 2, 'tokens stacked: prompt and completion');
    const month = new Date().toLocaleString('en', { month: 'short', timeZone: 'UTC' });
    t.ok(
      (await page.locator('#chart-requests text.axis').allTextContents()).includes(`${month} ${new Date().getUTCDate()}`),
      "the axis names today's date",
    );
    const api = await apiRows();
    t.equal(api.length, 4, 'two keys × two models today');
    t.same((await cells()).sort(), expected(api, names), 'every row and number, as the admin API reads them');
    t.equal(await page.textContent('#total-requests'), String(calls.length));
    t.equal(await page.textContent('#total-cost'), formatCredits(api.reduce((s, r) => s + r.cost_micros, 0)));
  });

  t.test('the filter form narrows the table and the charts', async (t) => {
    await page.selectOption('select[name="key"]', jobs.id);
    await page.selectOption('select[name="model"]', 'sim-small');
    await page.click('form.filters button:has-text("Apply")');
    await page.waitForURL(/key=/);
    const api = (await apiRows()).filter((r) => r.key_id === jobs.id && r.model === 'sim-small');
    t.same((await cells()).sort(), expected(api, names));
    t.equal(await page.locator('#chart-requests g.bar').getAttribute('data-value'), '1');
    await page.click('text=Clear');
    t.equal(await page.locator('#usage-rows tbody tr').count(), 4, 'cleared: every row again');
  });

  t.test('the keys page: a last-used time for the used keys, "never" for the unused one', async (t) => {
    await page.click('nav >> text=API keys');
    const keys = (await gw.admin('/admin/keys?account=umbra')).body.data as any[];
    const at = keys.find((k) => k.id === web.id).last_used_at as string;
    t.equal((await page.innerText(`#key-${web.id} td.last-used`)).trim(), `${at.slice(0, 10)} ${at.slice(11, 16)} UTC`);
    t.match(await page.innerText(`#key-${jobs.id} td.last-used`), new RegExp(`${today} \\d\\d:\\d\\d UTC`));
    t.equal((await page.innerText(`#key-${spare.id} td.last-used`)).trim(), 'never');
  });

  t.test('the ledger names the key of each debit, as the usage page does', async (t) => {
    await page.click('nav >> text=Credit');
    const debits = (await page
      .locator('#ledger tbody tr:has(.badge:text-is("debit"))')
      .evaluateAll((rows) => rows.map((r) => (r.querySelector('td.key')?.textContent ?? '').replace(/\s+/g, ' ').trim()))) as string[];
    // Test keys are free (no ledger entry): the live key's three requests.
    t.equal(debits.length, calls.filter(([key]) => key === web.key).length, 'one debit per live request');
    t.same([...new Set(debits)], [names[web.id]], 'the key name with its last four, not the id');
  });

  t.test('no chart label is cut at the edge of its chart', async (t) => {
    await page.click('nav >> text=Usage');
    const outside = await page.locator('figure.chart svg').evaluateAll((svgs) =>
      svgs.flatMap((svg) => {
        const box = svg.getBoundingClientRect();
        return [...svg.querySelectorAll('text.axis')]
          .map((text) => [text.textContent, text.getBoundingClientRect()] as const)
          .filter(([, r]) => r.left < box.left - 0.5 || r.right > box.right + 0.5)
          .map(([label]) => label);
      }),
    );
    t.same(outside, [], 'every axis label inside its SVG');
    t.ok((await page.locator('figure.chart svg text.axis').count()) >= 9, 'labels on all three charts');
  });

  t.test('on a phone the usage and ledger tables fit the screen, the credits first in each card', async (t) => {
    const context = await browser.newContext({ viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true });
    const phone = await context.newPage();
    await phone.goto((await gw.admin('/admin/console/sessions', { body: { account: 'umbra' } })).body.url);
    for (const [path, table] of [
      ['/usage', '#usage-rows'],
      ['/credit', '#ledger'],
    ] as const) {
      await phone.goto(`${gw.url}/console/accounts/umbra${path}`);
      const fit = await phone.evaluate((sel) => {
        const el = (globalThis as any).document.querySelector(sel);
        const doc = (globalThis as any).document.documentElement;
        return { page: doc.scrollWidth <= doc.clientWidth, panel: el.parentElement.scrollWidth <= el.parentElement.clientWidth };
      }, table);
      t.same(fit, { page: true, panel: true }, `${path}: nothing scrolls sideways`);
      const first = await phone
        .locator(`${table} tbody tr`)
        .first()
        .evaluate((tr) => {
          const cells = [...tr.querySelectorAll('td')].filter((c) => c.getBoundingClientRect().height > 0);
          const top = Math.min(...cells.map((c) => c.getBoundingClientRect().top));
          return cells.filter((c) => c.getBoundingClientRect().top === top).map((c) => c.className);
        });
      t.same(first, ['num credits'], `${path}: the credits alone on the card's first line`);
      t.ok(await phone.locator(`${table} tbody tr`).first().locator('td.credits').isVisible(), 'and visible');
    }
    await context.close();
  });
}
