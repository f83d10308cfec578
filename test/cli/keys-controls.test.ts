// `tollgate keys` for the controls of SPEC §15: --expires-at and --budget-* on create, expire, budget,
// roll and delete, against a real gateway.
import t from 'tap';
import { ADMIN_TOKEN, startGateway } from '../helpers/gateway.ts';
import { parseFields, runCli } from './run-cli.ts';

const KEY = /^svc-(live|test)-[1-9A-HJ-NP-Za-km-z]{32}$/;

const gw = await startGateway(t);
const env = { TOLLGATE_ADMIN_TOKEN: ADMIN_TOKEN, TOLLGATE_ADMIN_URL: gw.adminUrl };
const cli = (...args: string[]) => runCli(args, env);
const status = (key: string) => fetch(`${gw.url}/v1/models`, { headers: gw.auth(key) }).then((r) => r.status);

t.test('create with --expires-at and a budget; expire and budget change them', async (t) => {
  const r = await cli(
    'keys',
    'create',
    '--account',
    'cli',
    '--env',
    'live',
    '--name',
    'ci',
    '--expires-at',
    '2999-01-01T00:00:00Z',
    '--budget-micros',
    '5000000',
    '--budget-period',
    'month',
  );
  t.equal(r.code, 0, r.stderr);
  const f = parseFields(r.stdout);
  t.match(f.key, KEY);
  t.equal(f.expires_at, '2999-01-01T00:00:00.000Z');
  t.equal(f.budget, '0 of 5000000 micro-credits per month (UTC)');

  const list = await cli('keys', 'list', '--account', 'cli');
  t.match(list.stdout, /^ID\s+ENV.*EXPIRES_AT\s+BUDGET\s+NAME/);
  t.match(list.stdout, /2999-01-01T00:00:00.000Z\s+0\/5000000 per month\s+ci/);

  const b = await cli('keys', 'budget', f.id!, '--limit-micros', '7', '--period', 'total', '--json');
  t.equal(b.code, 0, b.stderr);
  t.same(JSON.parse(b.stdout).budget, { limit_micros: 7, period: 'total', spent_micros: 0 });
  const cleared = await cli('keys', 'budget', f.id!, '--clear');
  t.equal(parseFields(cleared.stdout).budget, 'none');
  const usage = await cli('keys', 'budget', f.id!, '--limit-micros', '7', '--period', 'week');
  t.equal(usage.code, 2, 'a bad period is a usage error');

  t.equal(await status(f.key!), 200);
  const past = await cli('keys', 'expire', f.id!, '2020-01-01T00:00:00Z');
  t.equal(past.code, 0, past.stderr);
  t.equal(await status(f.key!), 401, 'expired at once');
  const never = await cli('keys', 'expire', f.id!, 'never');
  t.equal(parseFields(never.stdout).expires_at, 'never');
  t.equal(await status(f.key!), 200);
  const bad = await cli('keys', 'expire', f.id!, 'friday');
  t.not(bad.code, 0, 'an unparseable time is refused by the API');
});

t.test('roll prints the new key once; delete needs --yes', async (t) => {
  const made = parseFields((await cli('keys', 'create', '--account', 'cli', '--env', 'test', '--name', 'rolled')).stdout);
  const r = await cli('keys', 'roll', made.id!, '--grace', '3600');
  t.equal(r.code, 0, r.stderr);
  const f = parseFields(r.stdout);
  t.match(f.key, KEY);
  t.not(f.key, made.key);
  t.equal(f.name, 'rolled');
  t.match(f.previous, new RegExp(`^${made.id} expires \\d{4}-`));
  t.match(r.stderr, /only time the new key is shown/);
  t.equal(await status(made.key!), 200, 'the old key works during its grace period');
  t.equal(await status(f.key!), 200);

  const refused = await cli('keys', 'delete', f.id!);
  t.equal(refused.code, 2);
  t.match(refused.stderr, /--yes/);
  t.equal(await status(f.key!), 200, 'nothing deleted without --yes');
  const del = await cli('keys', 'delete', f.id!, '--yes');
  t.equal(del.code, 0, del.stderr);
  t.equal(del.stdout.trim(), `deleted ${f.id}`);
  await new Promise((r) => setTimeout(r, 100));
  t.equal(await status(f.key!), 401);
  const again = await cli('keys', 'delete', f.id!, '--yes');
  t.not(again.code, 0, 'a second delete fails (404)');
});
