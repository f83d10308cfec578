// The console behind a real origin (issue 27): CONSOLE_PUBLIC_URL sets console.public_url in the baked
// config; a change posted from another origin gets a 403 page and a log line that name the origin
// expected and the one received, and what to set.
import t from 'tap';
import { readFileSync } from 'node:fs';
import type { IncomingMessage } from 'node:http';
import { parseConfig } from '../../src/config/load.ts';
import { createCsrfGuard } from '../../src/console/security.ts';
import { ADMIN_TOKEN, startGateway } from '../helpers/gateway.ts';

const baked = readFileSync(new URL('../../config/tollgate.yaml', import.meta.url), 'utf8');

t.test('CONSOLE_PUBLIC_URL sets console.public_url in the baked config; unset keeps the loopback default', async (t) => {
  const env = { TOLLGATE_ADMIN_TOKEN: ADMIN_TOKEN };
  t.equal(parseConfig(baked, { ...env, CONSOLE_PUBLIC_URL: 'https://api.example.com' }).console.publicUrl, 'https://api.example.com');
  t.equal(parseConfig(baked, env).console.publicUrl, undefined);
  t.throws(
    () => parseConfig(baked, { ...env, CONSOLE_PUBLIC_URL: 'https://api.example.com/console' }),
    /console\.public_url: must be an origin only/,
  );
});

t.test('the 403 page names the expected and the received origin and CONSOLE_PUBLIC_URL', async (t) => {
  const gw = await startGateway(t);
  const { body: link } = await gw.admin('/admin/console/sessions', { body: { account: 'acme' } });
  const login = await fetch(link.url, { redirect: 'manual' });
  const cookie = login.headers.get('set-cookie')!.split(';')[0]!;
  const from = gw.url.replace('127.0.0.1', 'localhost');
  const res = await fetch(`${gw.url}/console/accounts/acme/keys`, {
    method: 'POST',
    redirect: 'manual',
    headers: { cookie, origin: from, 'content-type': 'application/x-www-form-urlencoded' },
    body: 'name=x&env=test&scopes=chat',
  });
  t.equal(res.status, 403);
  const page = await res.text();
  t.match(page, `This request comes from another site, ${from}, but the console&#39;s origin is ${gw.url}`);
  t.match(page, /set console\.public_url \(CONSOLE_PUBLIC_URL\) to it/);
  const evil = await fetch(`${gw.url}/console/accounts/acme/keys`, {
    method: 'POST',
    headers: { cookie, origin: `https://e${'x'.repeat(5000)}.example`, 'content-type': 'application/x-www-form-urlencoded' },
    body: 'name=x',
  });
  t.equal(evil.status, 403);
  t.ok((await evil.text()).length < 5000, 'a huge Origin is not echoed in full');
});

t.test('each refusal is reported with both origins, bounded', async (t) => {
  const seen: unknown[] = [];
  const guard = createCsrfGuard(
    () => 'https://api.example.com',
    (r) => seen.push(r),
  );
  const req = (headers: Record<string, string>) => ({ method: 'POST', headers }) as unknown as IncomingMessage;
  t.throws(
    () => guard(req({ origin: 'http://127.0.0.1:8080' })),
    /comes from another site, http:\/\/127\.0\.0\.1:8080, but the console's origin is https:\/\/api\.example\.com/,
  );
  t.throws(() => guard(req({})), /no Origin header/);
  t.throws(
    () => guard(req({ origin: 'https://api.example.com', 'sec-fetch-site': 'cross-site' })),
    /another site \(Sec-Fetch-Site: cross-site\)/,
  );
  guard(req({ origin: 'https://api.example.com', 'sec-fetch-site': 'same-origin' }));
  guard({ method: 'GET', headers: { origin: 'https://evil.example' } } as unknown as IncomingMessage);
  t.same(seen, [
    { expected: 'https://api.example.com', received: 'http://127.0.0.1:8080', sec_fetch_site: undefined },
    { expected: 'https://api.example.com', received: undefined, sec_fetch_site: undefined },
    { expected: 'https://api.example.com', received: 'https://api.example.com', sec_fetch_site: 'cross-site' },
  ]);
});
