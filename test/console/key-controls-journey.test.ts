// SPEC §15 in the console, in a real browser (Chromium via playwright-core) against two gateways on one
// Redis: a member sets a budget on a key and sees the bar (spent = the admin API's spent_micros after a
// request), changes and removes it; expires a key (refused on the other instance) and clears the expiry;
// rolls a key with a grace period (the new key shown once, both working during the grace); deletes a key
// after a confirmation step (refused on the other instance); searches and sorts the keys. An operator
// does the same on any account.
import t from 'tap';
import OpenAI from 'openai';
import { KEY_FORMAT } from '../../src/auth/keys.ts';
import { startGateway, type TestGateway } from '../helpers/gateway.ts';
import { startRedis } from '../helpers/redis.ts';
import { startBrowser, newPage } from '../helpers/browser.ts';
import { waitFor } from '../helpers/wait.ts';
import { startSim } from '../e2e/chat-fixture.ts';

const redis = await startRedis(t);
const browser = redis && (await startBrowser(t));
if (redis && browser) {
  await redis.client.flushdb();
  const sim = await startSim(t);
  const a = await startGateway(t, { redisUrl: redis.url, upstreamUrl: sim.url });
  const b = await startGateway(t, { redisUrl: redis.url, upstreamUrl: sim.url });
  await a.grant('acme', 100_000_000);
  const link = async (body: unknown) => (await a.admin('/admin/console/sessions', { body })).body.url as string;
  const status = async (gw: TestGateway, key: string) => (await fetch(`${gw.url}/v1/models`, { headers: gw.auth(key) })).status;
  const chat = (key: string) =>
    new OpenAI({ apiKey: key, baseURL: `${a.url}/v1`, maxRetries: 0 }).chat.completions.create({
      model: 'sim-small',
      messages: [{ role: 'user', content: 'hello there' }],
      max_tokens: 8,
    });

  const text = (s: string | null) => (s ?? '').replace(/\s+/g, ' ').trim();
  const page = await newPage(browser, a.url);
  await page.goto(await link({ account: 'acme' }));
  const manage = async (id: string) => {
    await page.goto(`${a.url}/console/accounts/acme/keys`);
    await page.click(`#key-${id} >> text=Manage`);
    t.equal(new URL(page.url()).pathname, `/console/accounts/acme/keys/${id}`, 'Manage opens the key page');
  };

  t.test('budget: set, see the bar with the spend of a request, change, remove', async (t) => {
    const k = await a.createKey({
      account: 'acme',
      env: 'live',
      name: 'batch',
      models: ['sim-small'],
      rate_limits: { requests_per_minute: 120 },
    });
    await manage(k.id);
    t.match(await page.textContent('#key-facts'), /Models\s*sim-small[\s\S]*Rate limits\s*120 requests\/min/, 'allow-list and rate limits');
    t.match(await page.textContent('#budget'), /No budget/);
    await page.fill('#budget input[name="limit"]', '50');
    await page.selectOption('#budget select[name="period"]', 'month');
    await page.click('#budget button:has-text("Set budget")');
    t.match(await page.textContent('#notice'), /budget was saved/);
    t.same((await a.admin(`/admin/keys/${k.id}`)).body.budget, { limit_micros: 50_000_000, period: 'month', spent_micros: 0 }, 'stored');
    t.equal(await page.getAttribute('#budget-bar meter', 'value'), '0', 'an empty bar');

    await chat(k.key);
    const spent = await waitFor(async () => (await a.admin(`/admin/keys/${k.id}`)).body.budget.spent_micros, 2000, 'the settle');
    await page.reload();
    t.equal(Number(await page.getAttribute('#budget-bar meter', 'value')), spent, 'the bar is the admin API’s spent_micros');
    t.equal(await page.getAttribute('#budget-bar meter', 'max'), '50000000');
    t.match(
      text(await page.textContent('#budget-bar')),
      new RegExp(`${spent / 1e6} of 50 credits this month \\(UTC\\) \\(0%\\)`),
      'and says it in words',
    );
    t.ok(await page.locator('#budget-bar meter').isVisible(), 'drawn');

    await page.goto(`${a.url}/console/accounts/acme/keys`);
    t.equal(Number(await page.getAttribute(`#key-${k.id} .budget meter`, 'value')), spent, 'the keys table shows the bar too');
    t.match(await page.textContent(`#key-${k.id} .limits`), /sim-small[\s\S]*120 requests\/min/, 'with models and rate limits');

    await manage(k.id);
    t.equal(await page.inputValue('#budget input[name="limit"]'), '50', 'the form holds the current limit');
    await page.fill('#budget input[name="limit"]', '0.000001');
    await page.click('#budget button:has-text("Change budget")');
    t.same((await a.admin(`/admin/keys/${k.id}`)).body.budget.limit_micros, 1, 'changed');
    t.match(
      text(await page.textContent('#budget-bar')),
      new RegExp(`^100% ${spent / 1e6} of 0\\.000001 credits this month \\(UTC\\) \\(100%\\)$`),
      'full: the month’s spend is kept',
    );
    t.equal(await page.getAttribute('#budget-bar meter', 'value'), '1', 'the bar is full (its value capped at the limit)');
    const refused = await chat(k.key).then(
      () => 0,
      (e: { status: number }) => e.status,
    );
    t.equal(refused, 402, 'a request past the budget is refused');
    await page.click('#budget button:has-text("Remove budget")');
    t.equal((await a.admin(`/admin/keys/${k.id}`)).body.budget, null, 'removed');
    t.match(await page.textContent('#budget'), /No budget/);
    t.ok((await chat(k.key)).choices.length > 0, 'and the key spends again');
  });

  t.test('expiry: expire now → refused on B and shown as expired; set a time; never', async (t) => {
    const k = await a.createKey({ account: 'acme', env: 'test', name: 'ci' });
    t.equal(await status(b, k.key), 200, 'works on B (and is cached there)');
    await manage(k.id);
    t.match(await page.textContent('#expiry'), /Never expires/);
    await page.click('#expiry button:has-text("Expire now")');
    t.match(await page.textContent('.head'), /expired/, 'the key page says expired');
    await waitFor(async () => (await status(b, k.key)) === 401, 1000, 'B to refuse the expired key');
    const body = (await (await fetch(`${b.url}/v1/models`, { headers: b.auth(k.key) })).json()) as { error: { message: string } };
    t.match(body.error.message, /expired/);
    await page.goto(`${a.url}/console/accounts/acme/keys`);
    t.equal(await page.getAttribute(`#key-${k.id}`, 'data-status'), 'expired', 'the list shows it expired');
    t.match(await page.textContent(`#key-${k.id} .status`), /expired\s*since/);

    await manage(k.id);
    await page.fill('#expiry input[name="expires_at"]', '2099-12-31T18:30');
    await page.click('#expiry button:has-text("Set expiry")');
    t.equal((await a.admin(`/admin/keys/${k.id}`)).body.expires_at, '2099-12-31T18:30:00.000Z', 'the time is read as UTC');
    t.match(await page.textContent('#expiry'), /Expires at 2099-12-31 18:30 UTC/);
    await waitFor(async () => (await status(b, k.key)) === 200, 1000, 'B to accept it again');
    await page.click('#expiry button:has-text("Never expire")');
    t.equal((await a.admin(`/admin/keys/${k.id}`)).body.expires_at, null, 'cleared');
  });

  t.test('roll with a grace period: the new key shown once, both work during the grace', async (t) => {
    const k = await a.createKey({ account: 'acme', env: 'live', name: 'deploy', budget: { limit_micros: 7_000_000, period: 'total' } });
    await manage(k.id);
    await page.selectOption('#roll select[name="grace_seconds"]', '3600');
    const before = Date.now();
    await page.click('#roll button:has-text("Roll key")');
    const value = page.locator('#new-key-value');
    await value.waitFor();
    const key = (await value.textContent())!.trim();
    t.match(key, KEY_FORMAT, 'the new key in full');
    t.not(key, k.key);
    t.match(await page.textContent('dialog#new-key'), new RegExp(`Rolled from svc-live-…${k.key.slice(-4)}`));
    t.ok(await page.locator('dialog#new-key').evaluate((d) => d.matches(':modal')), 'in the modal dialog');
    const old = (await a.admin(`/admin/keys/${k.id}`)).body;
    const expires = Date.parse(old.expires_at);
    t.ok(expires >= before + 3_600_000 - 1000 && expires <= Date.now() + 3_600_000 + 1000, 'the old key expires in an hour');
    const rolled = (await a.admin('/admin/keys?account=acme')).body.data.find((r: any) => r.last4 === key.slice(-4));
    t.same(rolled.budget, { limit_micros: 7_000_000, period: 'total', spent_micros: 0 }, 'same budget on the new key');
    t.equal(await status(b, key), 200, 'the new key works');
    t.equal(await status(b, k.key), 200, 'and the old one, during the grace');
    await page.click('text=I have saved it');
    await page.locator('dialog#new-key').waitFor({ state: 'detached' });
    t.notOk((await page.content()).includes(key), 'closed: the key has left the page');
    // A reload of the roll's answer sends the form again: a key rolls once, so it is refused beside the
    // form (409 key_not_rollable) and no third key is made.
    await page.reload();
    t.notOk((await page.content()).includes(key), 'never shown again');
    t.match(await page.textContent('#roll'), new RegExp(`already rolled: its successor is ${rolled.id}`), 'the form sent again is refused');
    const deploy = (await a.admin('/admin/keys?account=acme')).body.data.filter((r: any) => r.name === 'deploy').map((r: any) => r.id);
    t.same(deploy.sort(), [k.id, rolled.id].sort(), 'the old key and its one successor, no third key');
    await page.goto(`${a.url}/console/accounts/acme/keys`);
    t.equal(await page.locator(`#key-${rolled.id}`).count(), 1, 'the new key is listed');
  });

  t.test('delete asks first, then removes the key everywhere', async (t) => {
    const k = await a.createKey({ account: 'acme', env: 'test', name: 'doomed' });
    t.equal(await status(b, k.key), 200);
    await manage(k.id);
    await page.click('#delete button:has-text("Delete key")');
    t.match(await page.textContent('#delete-confirm'), /Delete “doomed” for good\?/, 'the confirmation step');
    t.equal((await a.admin(`/admin/keys/${k.id}`)).status, 200, 'nothing deleted yet');
    await page.click('#delete-confirm >> text=Cancel');
    t.equal(await page.locator('#delete-confirm').count(), 0, 'Cancel goes back');
    await page.click('#delete button:has-text("Delete key")');
    await page.click('#delete-confirm button:has-text("Delete for good")');
    t.equal(new URL(page.url()).pathname, '/console/accounts/acme/keys', 'back to the list');
    t.match(await page.textContent('#notice'), /deleted/);
    t.equal(await page.locator(`#key-${k.id}`).count(), 0, 'gone from the list');
    t.equal((await a.admin(`/admin/keys/${k.id}`)).status, 404, 'and from the admin API');
    await waitFor(async () => (await status(b, k.key)) === 401, 1000, 'B to refuse the deleted key');
  });

  t.test('search by name or last four; sort by name, created, last used, status', async (t) => {
    await page.goto(`${a.url}/console/accounts/acme/keys`);
    const names = () =>
      page.locator('#key-rows tr input[name="name"]').evaluateAll((els) => els.map((e) => (e as unknown as { value: string }).value));
    const all = await names();
    t.ok(all.length >= 4, 'every key');
    await page.fill('input[name="q"]', 'BAT');
    await page.click('#key-table button:has-text("Search")');
    t.same(await names(), ['batch'], 'by name, any case');
    const ci = (await a.admin('/admin/keys?account=acme')).body.data.find((r: any) => r.name === 'ci');
    await page.fill('input[name="q"]', ci.last4);
    await page.click('#key-table button:has-text("Search")');
    t.ok((await names()).includes('ci'), 'by the last four');
    await page.goto(`${a.url}/console/accounts/acme/keys`);
    await page.click('#key-table th >> text=Name');
    t.same(
      await names(),
      [...all].sort((x, y) => x.localeCompare(y)),
      'by name, A→Z',
    );
    await page.click('#key-table th >> text=Name');
    t.same(
      await names(),
      [...all].sort((x, y) => y.localeCompare(x)),
      'a second click flips the order',
    );
    await page.click('#key-table th >> text=Status');
    const statuses = await page.locator('#key-rows tr').evaluateAll((rows) => rows.map((r) => r.getAttribute('data-status')));
    t.same(
      statuses,
      [...statuses].sort((x, y) => ['active', 'expired', 'disabled'].indexOf(x!) - ['active', 'expired', 'disabled'].indexOf(y!)),
    );
    await page.goto(`${a.url}/console/accounts/acme/keys`);
    t.equal(await page.getAttribute('#key-table th[aria-sort]', 'aria-sort'), 'descending', 'by default: created, newest first');
    t.equal((await names())[0], 'deploy', 'the rolled key is the newest');
    await page.click('#key-table th >> text=Created');
    t.same(await names(), [...all].reverse(), 'a click on Created: oldest first');
  });

  t.test('without JavaScript: budget, expiry, roll and a confirmed delete all work', async (t) => {
    const k = await a.createKey({ account: 'acme', env: 'test', name: 'plain' });
    const context = await browser.newContext({ javaScriptEnabled: false });
    const plain = await context.newPage();
    await plain.goto(await link({ account: 'acme' }));
    await plain.click(`#key-${k.id} >> text=Manage`);
    await plain.fill('#budget input[name="limit"]', '2');
    await plain.click('#budget button:has-text("Set budget")');
    t.equal(await plain.getAttribute('#budget-bar meter', 'max'), '2000000', 'the bar');
    await plain.click('#roll button:has-text("Roll key")');
    const key = (await plain.textContent('#new-key-value'))!.trim();
    t.match(key, KEY_FORMAT, 'the roll answer is the page, with the dialog open');
    await plain.click('text=I have saved it');
    t.notOk((await plain.content()).includes(key), 'and the link back never shows it again');
    await plain.goto(`${a.url}/console/accounts/acme/keys/${k.id}`);
    await plain.click('#expiry button:has-text("Expire now")');
    t.match(await plain.textContent('#expiry'), /Expired at/);
    // Rolled once already (and now expired): a second roll is refused beside the form.
    await plain.click('#roll button:has-text("Roll key")');
    t.match(await plain.textContent('#roll'), /already rolled|expired at/, 'a second roll is refused');
    await plain.click('#delete button:has-text("Delete key")');
    await plain.click('#delete-confirm button:has-text("Delete for good")');
    t.match(await plain.textContent('#notice'), /deleted/);
    t.equal((await a.admin(`/admin/keys/${k.id}`)).status, 404, 'deleted');
    await context.close();
  });

  t.test('an operator sets a budget and expiry on any account’s key; a member of another account gets 404', async (t) => {
    const k = await a.createKey({ account: 'globex', env: 'live', name: 'theirs' });
    const op = await newPage(browser, a.url);
    await op.goto(await link({ operator: true }));
    await op.goto(`${a.url}/console/accounts/globex/keys/${k.id}`);
    await op.fill('#budget input[name="limit"]', '5');
    await op.click('#budget button:has-text("Set budget")');
    t.same((await a.admin(`/admin/keys/${k.id}`)).body.budget.limit_micros, 5_000_000, 'the operator’s budget');
    const res = await page.goto(`${a.url}/console/accounts/globex/keys/${k.id}`);
    t.equal(res?.status(), 404, 'the acme member cannot open it');
    const wrong = await page.goto(`${a.url}/console/accounts/acme/keys/${k.id}`);
    t.equal(wrong?.status(), 404, 'nor under their own account');
    await op.context().close();
  });
}
