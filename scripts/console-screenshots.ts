/**
 * Regenerates the console screenshots in docs/console/ (README, docs/console.md): a gateway on the
 * embedded store with the demo config, seeded with keys, grants, three weeks of billed requests (on a
 * clock moved back, so the usage page has history) and shares, photographed in Debian's Chromium
 * (CHROMIUM_PATH, default /usr/bin/chromium) at a fixed laptop viewport, plus the keys and usage pages
 * on a phone. Run: node scripts/console-screenshots.ts
 */
import { readFile } from 'node:fs/promises';
import { chromium, type Page } from 'playwright-core';
import { parseConfig } from '../src/config/load.ts';
import { createGateway } from '../src/gateway.ts';
import { createLogger } from '../src/obs/logger.ts';
import { createMemoryStore } from '../src/store/memory-store.ts';
import { startSimulator } from '../src/simulator/simulator.ts';

const OUT = new URL('../docs/console/', import.meta.url);
const adminToken = 'screenshots-admin-token-0123456789abcdef';
const sim = await startSimulator({ record: false });
const env = { SIM_URL: sim.url, PORT: '0', ADMIN_PORT: '0', TOLLGATE_ADMIN_TOKEN: adminToken };
const config = parseConfig(await readFile(new URL('../config/demo.yaml', import.meta.url), 'utf8'), env);
const DAY_MS = 86_400_000;
const HISTORY_DAYS = 20;
let clock = Date.now() - HISTORY_DAYS * DAY_MS;
const now = () => clock;
const store = createMemoryStore(now);
const gateway = createGateway({ config, store, logger: createLogger('error'), now });
const { publicUrl, adminUrl } = await gateway.listen();

async function admin(method: string, path: string, body?: unknown): Promise<any> {
  const res = await fetch(`${adminUrl}${path}`, {
    method,
    headers: { authorization: `Bearer ${adminToken}`, 'content-type': 'application/json' },
    ...(body !== undefined && { body: JSON.stringify(body) }),
  });
  if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${await res.text()}`);
  return res.status === 204 ? null : res.json();
}

// A believable account: three keys (one disabled; a budget, an allow-list, a rate limit and an expiry
// among them), credit, billed requests, shares (one revoked).
const prod = await admin('POST', '/admin/keys', {
  account: 'acme',
  env: 'live',
  name: 'production backend',
  budget: { limit_micros: 20_000, period: 'total' },
});
const staging = await admin('POST', '/admin/keys', {
  account: 'acme',
  env: 'test',
  name: 'staging',
  scopes: ['chat', 'models'],
  models: ['demo-llama'],
  rate_limits: { requests_per_minute: 30 },
  expires_at: new Date(Date.now() + 30 * DAY_MS).toISOString(),
});
const old = await admin('POST', '/admin/keys', { account: 'acme', env: 'live', name: 'old laptop' });
await admin('PATCH', `/admin/keys/${old.id}`, { active: false });
await admin('POST', '/admin/accounts/acme/credits', { amount_micros: 25_000_000, note: 'Welcome credit' });
async function chat(key: string, model: string, tokens: number): Promise<void> {
  const res = await fetch(`${publicUrl}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model, messages: [{ role: 'user', content: 'Summarise our Q3 numbers' }], max_tokens: tokens, sim: { tokens } }),
  });
  await res.arrayBuffer();
}
// A working week's rhythm: more on weekdays, a quiet weekend, the staging key now and then.
for (let d = HISTORY_DAYS - 1; d >= 1; d--) {
  clock = Date.now() - d * DAY_MS;
  const weekday = new Date(clock).getUTCDay() % 6 !== 0;
  const n = weekday ? 3 + ((d * 7) % 5) : 1;
  for (let i = 0; i < n; i++) await chat(prod.key, i % 3 === 2 ? 'demo-qwen' : 'demo-llama', 80 + ((d * 37 + i * 53) % 400));
  if (d % 4 === 0) await chat(staging.key, 'demo-llama', 60);
}
clock = Date.now();
for (const [model, tokens] of [
  ['demo-llama', 120],
  ['demo-qwen', 340],
  ['demo-llama', 60],
  ['demo-qwen', 900],
] as const) {
  await chat(prod.key, model, tokens);
}
await admin('POST', '/admin/accounts/acme/credits', { amount_micros: 10_000_000, note: 'Top-up, invoice 2026-11' });
for (const title of ['Onboarding checklist', 'Q3 summary for the board', 'Support reply draft']) {
  const s = await admin('POST', '/admin/shares', { account: 'acme', snapshot: { title, messages: [{ role: 'user', content: title }] } });
  if (title.startsWith('Support')) await admin('DELETE', `/admin/shares/${s.slug}`);
}
for (const account of ['globex', 'initech', 'umbrella-labs']) {
  await admin('POST', '/admin/keys', { account, env: 'live', name: 'backend' });
  await admin('POST', `/admin/accounts/${account}/credits`, { amount_micros: 5_000_000 });
}
await gateway.usage.flush();

const browser = await chromium.launch({ executablePath: process.env.CHROMIUM_PATH ?? '/usr/bin/chromium', args: ['--no-sandbox'] });
async function signedIn(body: unknown, viewport = { width: 1280, height: 800 }, isMobile = false): Promise<Page> {
  const context = await browser.newContext({ viewport, isMobile, hasTouch: isMobile, colorScheme: 'light', deviceScaleFactor: 1 });
  const page = await context.newPage();
  await page.goto((await admin('POST', '/admin/console/sessions', body)).url);
  return page;
}
const shot = (page: Page, name: string) => page.screenshot({ path: new URL(`${name}.png`, OUT).pathname, fullPage: false });

const member = await signedIn({ account: 'acme' });
await shot(member, 'keys');
await member.fill('input[name="name"]', 'analytics job');
await member.click('button:has-text("Create key")');
await member.locator('dialog#new-key').waitFor();
await shot(member, 'key-created');
await member.click('text=I have saved it');
await member.goto(`${publicUrl}/console/accounts/acme/credit`);
await shot(member, 'credit');
await member.goto(`${publicUrl}/console/accounts/acme/usage`);
await shot(member, 'usage');
await member.goto(`${publicUrl}/console/accounts/acme/shares`);
await shot(member, 'shares');
// Key controls (SPEC §15): one key's page with its budget bar, a delete asked first, a roll shown once.
await member.goto(`${publicUrl}/console/accounts/acme/keys/${prod.id}`);
await shot(member, 'key-controls');
await member.goto(`${publicUrl}/console/accounts/acme/keys/${old.id}`);
await member.click('#delete button');
await member.locator('#delete-confirm').waitFor();
await shot(member, 'key-delete-confirm');
await member.goto(`${publicUrl}/console/accounts/acme/keys/${staging.id}`);
await member.click('#roll button');
await member.locator('dialog#new-key').waitFor();
await shot(member, 'key-rolled');
await member.click('text=I have saved it');
await member.goto(`${publicUrl}/console/accounts/acme/keys?sort=status`);
await shot(member, 'keys-sorted');

const operator = await signedIn({ operator: true });
await shot(operator, 'accounts');
await operator.goto(`${publicUrl}/console/accounts/acme/credit`);
await shot(operator, 'operator-credit');
// A mistyped amount: the page comes back with the message beside the field, the note kept.
await operator.fill('input[name="amount"]', '12,5');
await operator.fill('input[name="note"]', 'Top-up, invoice 2026-12');
await operator.click('button:has-text("Grant")');
await operator.locator('#amount-error').waitFor();
await shot(operator, 'grant-error');
// A grant above console.confirm_grant_credits asks first.
await operator.fill('input[name="amount"]', '5000');
await operator.click('button:has-text("Grant")');
await operator.locator('#grant-confirm').waitFor();
await shot(operator, 'grant-confirm');
// An id typed wrong: the keys page says the account does not exist, and asks before creating it.
await operator.goto(`${publicUrl}/console/accounts?q=acmee`);
await operator.click('text=Open account');
await operator.locator('#unseen-account').waitFor();
await shot(operator, 'account-new');

const used = (await admin('POST', '/admin/console/sessions', { account: 'acme' })).url;
await fetch(used, { redirect: 'manual' });
const stranger = await (await browser.newContext({ viewport: { width: 1280, height: 800 }, colorScheme: 'light' })).newPage();
await stranger.goto(used);
await shot(stranger, 'link-used');

const phone = await signedIn({ account: 'acme' }, { width: 390, height: 844 }, true);
await phone.locator('#key-rows').scrollIntoViewIfNeeded();
await shot(phone, 'keys-phone');
await phone.goto(`${publicUrl}/console/accounts/acme/usage`);
await shot(phone, 'usage-phone');
await phone.goto(`${publicUrl}/console/accounts/acme/credit`);
await phone.locator('#ledger').scrollIntoViewIfNeeded();
await shot(phone, 'credit-phone');
const operatorPhone = await signedIn({ operator: true }, { width: 390, height: 844 }, true);
await shot(operatorPhone, 'accounts-phone');

await browser.close();
await gateway.close(1000);
await store.close();
await sim.close();
process.stdout.write(`screenshots written to ${OUT.pathname}\n`);
