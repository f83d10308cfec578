// SPEC §9 in a real browser (Chromium via playwright-core) against two gateways on one Redis: a member
// signs in by link, creates a key that is shown once, copies it, closes the dialog and never sees it
// again; the key works; disabling it in the console gets it refused by the OTHER instance within 1 s.
// Then what a member must not do: another account's key (404), an expired or reused link (error
// page), and a cross-origin form post (403).
import { createHash, randomBytes } from 'node:crypto';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import t from 'tap';
import OpenAI from 'openai';
import { KEY_FORMAT } from '../../src/auth/keys.ts';
import { startGateway, type TestGateway } from '../helpers/gateway.ts';
import { startRedis } from '../helpers/redis.ts';
import { sharesS3Config, startS3 } from '../helpers/s3.ts';
import { startBrowser, newPage } from '../helpers/browser.ts';
import { waitFor } from '../helpers/wait.ts';
import { startSim } from '../e2e/chat-fixture.ts';

const redis = await startRedis(t);
const browser = redis && (await startBrowser(t));
if (redis && browser) {
  await redis.client.flushdb();
  const sim = await startSim(t);
  // Share snapshots are objects (SPEC §13): both instances use one bucket.
  const s3 = await startS3(t);
  const config = { shares: { s3: sharesS3Config(s3) } };
  const a = await startGateway(t, { redisUrl: redis.url, upstreamUrl: sim.url, config });
  const b = await startGateway(t, { redisUrl: redis.url, upstreamUrl: sim.url, config });
  await a.grant('acme', 10_000_000);
  const memberLink = async (gw: TestGateway, account: string) => {
    const r = await gw.admin('/admin/console/sessions', { body: { account } });
    if (r.status !== 201) throw new Error(`mint: ${r.status}`);
    return r.body.url as string;
  };
  const modelsStatus = async (gw: TestGateway, key: string) => (await fetch(`${gw.url}/v1/models`, { headers: gw.auth(key) })).status;

  const page = await newPage(browser, a.url);

  t.test('the member journey: link → keys → create → shown once → copy → close → works → disable → refused on B', async (t) => {
    const link = await memberLink(a, 'acme');
    await page.goto(link);
    t.equal(new URL(page.url()).pathname, '/console/accounts/acme/keys', 'the link lands on the keys page, token gone from the URL');
    t.notOk(page.url().includes('token'), 'no token in the address bar');

    await page.fill('input[name="name"]', 'journey key');
    await page.selectOption('select[name="env"]', 'live');
    await page.click('button:has-text("Create key")');
    const value = page.locator('#new-key-value');
    await value.waitFor();
    const key = (await value.textContent())!.trim();
    t.match(key, KEY_FORMAT, 'the dialog shows the full key');
    t.ok(await page.locator('dialog#new-key').evaluate((d) => d.matches(':modal')), 'as a modal dialog');
    t.match(await page.locator('dialog#new-key').textContent(), /environment variable or a secret store/, 'with the handling advice');
    t.equal(await page.locator('#key-rows tr').count(), 1, 'the table behind it already lists the key');

    await page.click('button[data-copy="new-key-value"]');
    t.equal(await page.evaluate(() => (navigator as any).clipboard.readText()), key, 'the copy button put the key on the clipboard');
    t.equal((await page.textContent('button[data-copy]'))!.trim(), 'Copied');

    await page.click('text=I have saved it');
    await page.locator('dialog#new-key').waitFor({ state: 'detached' });
    t.notOk((await page.content()).includes(key), 'closed: the key has left the page');
    const storage = await page.evaluate(() => JSON.stringify({ ...localStorage }) + JSON.stringify({ ...sessionStorage }));
    t.notOk(storage.includes(key), 'and was never stored by the page (no htmx history snapshot)');

    await page.reload();
    t.notOk((await page.content()).includes(key), 'reload: only the last four characters');
    t.match(await page.locator('#key-rows tr').first().textContent(), new RegExp(`svc-live-…${key.slice(-4)}`));
    await page.goBack();
    await page.goForward();
    t.notOk((await page.content()).includes(key), 'back and forward: nothing either');

    const client = new OpenAI({ apiKey: key, baseURL: `${a.url}/v1`, maxRetries: 0 });
    const chat = await client.chat.completions.create({ model: 'sim-small', messages: [{ role: 'user', content: 'hi' }], max_tokens: 5 });
    t.ok(chat.choices[0]?.message.content, 'the key works on /v1/chat/completions');
    t.equal(await modelsStatus(b, key), 200, 'and on instance B, which now caches it');

    page.once('dialog', (d) => void d.accept());
    await page.click('#key-rows tr >> text=Disable');
    await page.locator('#key-rows tr .badge.disabled').waitFor();
    // SPEC §1.1's bound, from the moment the console shows the key disabled: waitFor throws past 1 s.
    await waitFor(async () => (await modelsStatus(b, key)) === 401, 1000, 'instance B to refuse the disabled key');
    t.equal(await modelsStatus(a, key), 401, 'and on A');

    await page.fill('#key-rows input[name="name"]', 'renamed in place');
    await page.click('#key-rows button:has-text("Rename")');
    await waitFor(async () => (await a.admin(`/admin/keys?account=acme`)).body.data[0].name === 'renamed in place', 2000, 'the rename');
    page.once('dialog', (d) => void d.accept());
    await page.click('#key-rows tr >> text=Enable');
    await page.locator('#key-rows tr .badge.active').waitFor();
    await waitFor(async () => (await modelsStatus(b, key)) === 200, 1000, 'B to accept the re-enabled key');
    t.notOk(
      a.logs.concat(b.logs).some((l) => l.includes(key)),
      'the full key is in no log line',
    );
  });

  t.test('without JavaScript: every page reads, and a key can still be created and shown once', async (t) => {
    const context = await browser.newContext({ javaScriptEnabled: false });
    const plain = await context.newPage();
    await plain.goto(await memberLink(a, 'acme'));
    t.equal(await plain.locator('#key-rows tr').count(), 1, 'keys');
    await plain.click('nav >> text=Credit');
    t.match(await plain.textContent('#balance'), /\d/, 'credit');
    t.ok((await plain.locator('#ledger tbody tr').count()) >= 2, 'the ledger: the grant and the debit');
    await plain.click('nav >> text=Shares');
    t.match(await plain.textContent('#shares'), /No shares yet/, 'shares');
    await plain.click('nav >> text=API keys');
    await plain.fill('input[name="name"]', 'no-js key');
    await plain.click('button:has-text("Create key")');
    const key = (await plain.textContent('#new-key-value'))!.trim();
    t.match(key, KEY_FORMAT, 'the creation answer is the page, with the dialog open');
    await plain.click('text=I have saved it');
    t.equal(new URL(plain.url()).pathname, '/console/accounts/acme/keys', '"I have saved it" is a link back to the keys');
    t.notOk((await plain.content()).includes(key), 'which never shows the key again');
    t.equal(await plain.locator('#key-rows tr').count(), 2);
    await context.close();
  });

  t.test('shares: listed with slug, title, created and state; revoked in the console, gone on B within 1 s', async (t) => {
    const share = await a.admin('/admin/shares', {
      body: { account: 'acme', snapshot: { title: 'Quarterly <summary>', messages: [{ role: 'user', content: 'hi' }] } },
    });
    t.equal(share.status, 201, 'published through the admin API');
    const slug = share.body.slug as string;
    const read = async () => (await fetch(`${b.url}/v1/shares/${slug}`)).status;
    t.equal(await read(), 200, 'readable (and cached) on B');
    await page.goto(`${a.url}/console/accounts/acme/shares`);
    const row = page.locator(`#share-${slug}`);
    t.match(await row.textContent(), /Quarterly <summary>[\s\S]*UTC[\s\S]*live/, 'title (as text), created, state');
    page.once('dialog', (d) => void d.accept());
    await row.locator('button:has-text("Revoke")').click();
    await page.locator(`#share-${slug} .badge.revoked`).waitFor();
    await waitFor(async () => (await read()) === 410, 1000, 'B to answer 410 for the revoked share');
    await page.reload();
    t.match(await page.locator(`#share-${slug}`).textContent(), /revoked/, 'still revoked after a reload');
  });

  t.test("a member's attempt on another account's key or pages → 404, nothing changed", async (t) => {
    const other = await a.createKey({ account: 'globex', env: 'test', name: 'not yours' });
    const status = await page.evaluate(
      async ([id, origin]) => {
        const res = await fetch(`${origin}/console/accounts/acme/keys/${id}`, {
          method: 'POST',
          headers: { 'content-type': 'application/x-www-form-urlencoded' },
          body: 'action=disable',
        });
        return res.status;
      },
      [other.id, a.url],
    );
    t.equal(status, 404, "another account's key id under the member's own account");
    const res = await page.goto(`${a.url}/console/accounts/globex/keys`);
    t.equal(res?.status(), 404, "another account's pages");
    t.match(await page.textContent('h1'), /Not found/);
    t.equal((await a.admin(`/admin/keys/${other.id}`)).body.active, true, 'the other key is untouched');
  });

  t.test('an expired and a reused sign-in link answer a clear error page', async (t) => {
    const fresh = await newPage(browser, a.url);
    const link = await memberLink(a, 'acme');
    await fresh.goto(link);
    t.equal(new URL(fresh.url()).pathname, '/console/accounts/acme/keys', 'first use signs in');
    const again = await newPage(browser, a.url);
    const reused = await again.goto(link);
    t.equal(reused?.status(), 401, 'second use → 401');
    t.match(await again.textContent('main'), /already used, has expired/);

    // An expired token: stored as the service stores it (hashed), for one second.
    const token = randomBytes(32).toString('base64url');
    await a.store.putLoginToken(createHash('sha256').update(token).digest('hex'), { account: 'acme' }, 1);
    await sleep(1100);
    const expired = await again.goto(`${a.url}/console/login?token=${token}`);
    t.equal(expired?.status(), 401, 'expired → 401');
    t.match(await again.textContent('h1'), /This sign-in link does not work/);
    t.equal((await again.context().cookies()).length, 0, 'and no session cookie');
    await fresh.context().close();
    await again.context().close();
  });

  t.test('a cross-origin form post → 403, nothing created', async (t) => {
    // Another origin (same host, other port: same-site, so the Strict cookie IS sent; only the Origin check stops it).
    const evil = createServer((_req, res) => {
      res.setHeader('content-type', 'text/html');
      res.end(`<form method="post" action="${a.url}/console/accounts/acme/keys">
        <input name="name" value="planted"><input name="env" value="live"><input name="scopes" value="chat">
        <button id="go">go</button></form>`);
    });
    await new Promise<void>((r) => evil.listen(0, '127.0.0.1', r));
    t.teardown(() => evil.close());
    const before = (await a.admin('/admin/keys?account=acme')).body.data.length;
    await page.goto(`http://127.0.0.1:${(evil.address() as AddressInfo).port}/`);
    const [response] = await Promise.all([page.waitForNavigation(), page.click('#go')]);
    t.equal(response?.status(), 403, 'refused');
    t.match(await page.textContent('main'), /another site/);
    t.equal((await a.admin('/admin/keys?account=acme')).body.data.length, before, 'no key was created');
  });
}
