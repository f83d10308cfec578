// SPEC §9, the operator in a real browser against a gateway on Redis: the account list (balance, keys,
// sort), find an account by search, grant it credit (the ledger shows the grant; the same form submitted
// twice grants once; a mistyped amount comes back beside the field with the note kept; a large grant is
// confirmed first), a mistyped account that asks before a key creates it, mint a member link (24 h) that
// signs a member in, end that member's sessions (a link minted before and not opened stops working, one
// minted after works), and sign out. And the favicon.
import t from 'tap';
import { startGateway } from '../helpers/gateway.ts';
import { startRedis } from '../helpers/redis.ts';
import { startBrowser, newPage } from '../helpers/browser.ts';

const redis = await startRedis(t);
const browser = redis && (await startBrowser(t));
if (redis && browser) {
  await redis.client.flushdb();
  const gw = await startGateway(t, { redisUrl: redis.url });
  await gw.createKey({ account: 'globex', env: 'test', name: 'k' });
  await gw.grant('acme', 1_000_000);
  const page = await newPage(browser, gw.url);
  const operatorLink = (await gw.admin('/admin/console/sessions', { body: { operator: true } })).body.url as string;

  t.test('search an account, grant credit, the ledger shows it; a double submit grants once', async (t) => {
    await page.goto(operatorLink);
    t.equal(new URL(page.url()).pathname, '/console/accounts', 'an operator lands on the account list');
    t.same(await page.locator('#accounts tbody a[href$="/keys"]').allTextContents(), ['acme', 'Keys', 'globex', 'Keys'], 'every account');

    await page.fill('input[name="q"]', 'GLOB');
    await page.click('button:has-text("Search")');
    t.same(await page.locator('#accounts tbody td:first-child a').allTextContents(), ['globex'], 'search narrows the list');
    await page.goto(`${gw.url}/console/accounts`);
    const column = (n: number) => page.locator(`#accounts tbody tr td:nth-child(${n})`).allInnerTexts();
    t.same(await column(2), ['1', '0'], 'balance in credits (acme 1, globex 0)');
    t.same(await column(3), ['0', '1'], 'keys');
    t.same(await column(4), ['never', 'never'], 'last used');
    await page.click('#accounts th >> text=Keys');
    t.same(await column(1), ['globex', 'acme'], 'sorted by keys, most first');
    t.equal(await page.getAttribute('#accounts th[aria-sort]', 'aria-sort'), 'descending');
    await page.click('#accounts th >> text=Keys');
    t.same(await column(1), ['acme', 'globex'], 'a second click flips the order');
    await page.selectOption('select[name="sort"]', 'balance');
    await page.click('button:has-text("Search")');
    t.same(await column(1), ['acme', 'globex'], 'the sort menu: balance, largest first');
    await page.fill('input[name="q"]', 'GLOB');
    await page.click('button:has-text("Search")');
    await page.click('#accounts >> text=globex');
    t.equal(new URL(page.url()).pathname, '/console/accounts/globex/keys');
    await page.click('nav >> text=Credit');

    await page.fill('input[name="amount"]', '2.5');
    await page.fill('input[name="note"]', 'welcome, "team", =1+1');
    await page.click('button:has-text("Grant")');
    await page.locator('.flash.ok').waitFor();
    t.match(await page.textContent('.flash.ok'), /Credit granted/);
    t.equal((await page.textContent('#balance'))!.trim(), '2.5', 'balance');
    const first = page.locator('#ledger tbody tr').first();
    t.match(await first.textContent(), /grant[\s\S]*\+2\.5[\s\S]*welcome, "team", =1\+1/, 'the newest ledger row is the grant');

    // The same form (one idempotency key) posted twice, as a double click or a resubmit would.
    await page.fill('input[name="amount"]', '1');
    await page.fill('input[name="note"]', 'double');
    // Evaluated in the browser (DOM types are not in this project's lib, hence `any`).
    const statuses = await page.locator('form[action$="/credit"]').evaluate(async (form: any) => {
      const body = new URLSearchParams(new (globalThis as any).FormData(form));
      const post = () => fetch(form.action, { method: 'POST', body, redirect: 'manual' }).then((r) => r.type);
      return Promise.all([post(), post()]);
    });
    t.same(statuses, ['opaqueredirect', 'opaqueredirect'], 'both posts answered with the redirect');
    await page.reload();
    t.equal(await page.locator('#ledger tbody tr:has-text("double")').count(), 1, 'one ledger entry');
    t.equal((await page.textContent('#balance'))!.trim(), '3.5', 'credited once');
    const api = await gw.admin('/admin/accounts/globex');
    t.equal(api.body.balance_micros, 3_500_000, 'the admin API agrees');

    // A mistyped amount: the page comes back whole, the message beside the field, what was typed kept.
    await page.fill('input[name="amount"]', '12,5');
    await page.fill('input[name="note"]', 'invoice 7');
    await page.click('button:has-text("Grant")');
    t.equal(await page.textContent('#amount-error'), 'not a decimal number of credits: "12,5"');
    t.equal(await page.inputValue('input[name="note"]'), 'invoice 7', 'the note is kept');
    t.equal(await page.inputValue('input[name="amount"]'), '12,5', 'the amount too, to correct it');
    t.equal(await page.getAttribute('input[name="amount"]', 'aria-invalid'), 'true');
    t.equal(await page.locator('nav >> text=Usage').count(), 1, 'the navigation is there');
    // Corrected to a large amount: confirmed first, then booked once.
    await page.fill('input[name="amount"]', '2500');
    await page.click('#grant button:has-text("Grant")');
    await page.locator('#grant-confirm').waitFor();
    t.match(await page.textContent('#grant-confirm'), /Grant\s+2500 credits\s+to\s+account globex \(note “invoice 7”\)/);
    t.equal((await gw.admin('/admin/accounts/globex')).body.balance_micros, 3_500_000, 'nothing booked yet');
    await page.click('button:has-text("Yes, grant 2500 credits")');
    await page.locator('.flash.ok').waitFor();
    t.equal((await page.textContent('#balance'))!.trim(), '2503.5', 'booked once confirmed');

    const csv = await page.evaluate(async () => (await fetch('/console/accounts/globex/ledger.csv')).text());
    t.match(csv, /^id,ts,kind,amount_micros,/, 'CSV header');
    t.match(csv, /,2500000,.*,"welcome, ""team"", =1\+1",[^\r]*\r\n/, 'CSV quotes a note with commas and quotes');
  });

  t.test('a mistyped account says so; a key is created in it only once confirmed', async (t) => {
    await page.goto(`${gw.url}/console/accounts?q=globx`);
    await page.click('text=Open account “globx”');
    t.equal(new URL(page.url()).pathname, '/console/accounts/globx/keys');
    t.match(await page.textContent('#unseen-account'), /Account “globx” does not exist yet/);
    await page.fill('input[name="name"]', 'oops');
    await page.click('button:has-text("Create key")');
    await page.waitForTimeout(300);
    t.equal(await page.locator('dialog#new-key').count(), 0, 'the browser asks for the confirmation first');
    t.same((await gw.admin('/admin/keys?account=globx')).body.data, [], 'no key, no account');
    await page.check('input[name="new_account"]');
    await page.click('button:has-text("Create key")');
    await page.locator('dialog#new-key').waitFor();
    t.equal((await gw.admin('/admin/keys?account=globx')).body.data.length, 1, 'confirmed: created');
  });

  t.test('mint a member link, the member signs in with it; end their sessions; sign out', async (t) => {
    await page.goto(`${gw.url}/console/accounts/globex/keys`);
    await page.selectOption('select[name="ttl_seconds"]', '86400');
    const before = Date.now();
    await page.click('button:has-text("Create a member sign-in link")');
    const until = new Date(before + 86_400_000).toISOString();
    t.match(await page.textContent('main'), `until ${until.slice(0, 10)} ${until.slice(11, 14)}`, 'valid for 24 h');
    const link = (await page.textContent('#member-link'))!.trim();
    t.match(link, new RegExp(`^${gw.url}/console/login\\?token=[A-Za-z0-9_-]{43}$`));

    const member = await newPage(browser, gw.url);
    await member.goto(link);
    t.equal(new URL(member.url()).pathname, '/console/accounts/globex/keys', 'the member is in globex');
    t.equal(await member.locator('nav >> text=Accounts').count(), 0, 'without the operator pages');
    t.equal((await member.goto(`${gw.url}/console/accounts`))?.status(), 404, 'the account list is not a member page');

    // A second link, sent but not opened yet when the operator signs the members out.
    const mintLink = async () => {
      await page.goto(`${gw.url}/console/accounts/globex/keys`);
      await page.click('button:has-text("Create a member sign-in link")');
      return (await page.textContent('#member-link'))!.trim();
    };
    const unopened = await mintLink();

    await page.goto(`${gw.url}/console/accounts/globex/keys`);
    let question = '';
    page.once('dialog', (d) => {
      question = d.message();
      void d.accept();
    });
    await page.click('button:has-text("Sign all members out")');
    await page.locator('#flash .flash.ok').waitFor();
    t.match(question, /links not yet opened stop working too/, 'the confirmation says links go too');
    t.match(await page.textContent('#flash'), /1 member session of globex ended; member sign-in links made before now no longer work/);
    const after = await member.goto(`${gw.url}/console/accounts/globex/keys`);
    t.equal(after?.status(), 401, "the member's session has ended");
    t.match(await member.textContent('h1'), /signed out/);

    const late = await newPage(browser, gw.url);
    const refused = await late.goto(unopened);
    t.equal(refused?.status(), 401, 'the link minted before the sign-out no longer signs in');
    t.match(await late.textContent('h1'), /This sign-in link does not work/);
    t.equal((await late.context().cookies()).length, 0, 'no session cookie');
    await late.goto(await mintLink());
    t.equal(new URL(late.url()).pathname, '/console/accounts/globex/keys', 'a link minted after it signs the member in');
    await late.context().close();

    await page.click('button:has-text("Sign out")');
    t.match(await page.textContent('h1'), /Signed out/);
    t.equal((await page.goto(`${gw.url}/console/accounts`))?.status(), 401, 'the operator session has ended too');
    await member.context().close();
  });

  t.test('a favicon: the linked icon and /favicon.ico load, no 404', async (t) => {
    const icons: number[] = [];
    page.on('response', (r) => {
      if (/favicon/.test(r.url())) icons.push(r.status());
    });
    const href = await page.getAttribute('link[rel="icon"]', 'href');
    t.match(href, /^\/console\/assets\/favicon\.[0-9a-f]{12}\.ico$/);
    t.equal((await page.goto(`${gw.url}${href}`))?.status(), 200);
    t.equal((await page.goto(`${gw.url}/favicon.ico`))?.status(), 200);
    t.notOk(icons.includes(404), 'no favicon request failed');
  });
}
