// `tollgate console link` (SPEC §9): mints a working single-use link for a member or an operator.
import t from 'tap';
import { ADMIN_TOKEN, startGateway } from '../helpers/gateway.ts';
import { parseFields, runCli } from './run-cli.ts';

const gw = await startGateway(t);
const env = { TOLLGATE_ADMIN_TOKEN: ADMIN_TOKEN, TOLLGATE_ADMIN_URL: gw.adminUrl };
const cli = (...args: string[]) => runCli(args, env);

t.test('a member link signs in to that account, once', async (t) => {
  const r = await cli('console', 'link', '--account', 'acme');
  t.equal(r.code, 0, 'exits 0', { stderr: r.stderr });
  const f = parseFields(r.stdout);
  t.match(f.url, new RegExp(`^${gw.url}/console/login\\?token=[A-Za-z0-9_-]{43}$`));
  t.equal(f.for, 'a member of acme');
  const first = await fetch(f.url!, { redirect: 'manual' });
  t.equal(first.status, 303);
  const cookie = first.headers.get('set-cookie')!.split(';')[0]!;
  const home = await fetch(`${gw.url}/console/`, { headers: { cookie }, redirect: 'manual' });
  t.equal(home.headers.get('location'), '/console/accounts/acme/keys');
  t.equal((await fetch(f.url!, { redirect: 'manual' })).status, 401, 'used once');
});

t.test('--operator, --ttl and --json', async (t) => {
  const r = await cli('console', 'link', '--operator', '--ttl', '600', '--json');
  t.equal(r.code, 0, 'exits 0', { stderr: r.stderr });
  const body = JSON.parse(r.stdout);
  t.ok(Date.parse(body.expires_at) - Date.now() > 590_000, 'lives --ttl seconds');
  const cookie = (await fetch(body.url, { redirect: 'manual' })).headers.get('set-cookie')!.split(';')[0]!;
  const home = await fetch(`${gw.url}/console/`, { headers: { cookie }, redirect: 'manual' });
  t.equal(home.headers.get('location'), '/console/accounts');
});

t.test('usage errors exit 2; API errors exit 1', async (t) => {
  for (const args of [[], ['--account', 'a', '--operator'], ['--ttl', '600'], ['extra', '--operator']]) {
    const r = await cli('console', 'link', ...args);
    t.equal(r.code, 2, JSON.stringify(args));
  }
  t.match((await cli('console', 'link')).stderr, /exactly one of --account <id> and --operator/);
  const bad = await cli('console', 'link', '--operator', '--ttl', '5');
  t.equal(bad.code, 1);
  t.match(bad.stderr, /ttl_seconds: Input should be greater than or equal to 60/);
});
