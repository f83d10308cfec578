import t from 'tap';
import { ADMIN_TOKEN, startGateway } from '../helpers/gateway.ts';
import { parseFields, runCli } from './run-cli.ts';

const KEY = /^svc-(live|test)-[1-9A-HJ-NP-Za-km-z]{32}$/;

const gw = await startGateway(t);
const env = { TOLLGATE_ADMIN_TOKEN: ADMIN_TOKEN, TOLLGATE_ADMIN_URL: gw.adminUrl };
const cli = (...args: string[]) => runCli(args, env);
const models = (key: string) =>
  fetch(`${gw.url}/v1/models`, { headers: gw.auth(key) }).then(async (r) => ({ status: r.status, body: (await r.json()) as any }));

t.test('keys create prints the full key once, warns on stderr, and the key works', async (t) => {
  const r = await cli('keys', 'create', '--account', 'acme', '--env', 'live', '--name', 'ci');
  t.equal(r.code, 0, 'exits 0', { stderr: r.stderr });
  const f = parseFields(r.stdout);
  t.match(f.key, KEY);
  t.match(f.key, /^svc-live-/);
  t.match(f.id, /^key_/);
  t.equal(f.account, 'acme');
  t.equal(f.name, 'ci');
  t.equal(f.active, 'yes');
  t.match(r.stderr, /only time the full key is shown/);
  t.notMatch(r.stderr, f.key!, 'the key itself goes to stdout only');
  t.equal((await models(f.key!)).status, 200);
});

t.test('keys create --json prints the raw body: pure JSON on stdout', async (t) => {
  const r = await cli(
    'keys',
    'create',
    '--account',
    'acme',
    '--env',
    'test',
    '--name',
    'json key',
    '--scopes',
    'models,chat',
    '--models',
    'sim-free',
    '--rpm',
    '7',
    '--tpm',
    '900',
    '--json',
  );
  t.equal(r.code, 0, 'exits 0', { stderr: r.stderr });
  const k = JSON.parse(r.stdout);
  t.match(k.key, KEY);
  t.match(k, {
    env: 'test',
    name: 'json key',
    active: true,
    scopes: ['models', 'chat'],
    models: ['sim-free'],
    rate_limits: { requests_per_minute: 7, tokens_per_minute: 900 },
  });
  t.equal(k.last4, k.key.slice(-4));
  t.match(r.stderr, /cannot be shown again/);
  const m = await models(k.key);
  t.same(
    m.body.data.map((x: { id: string }) => x.id),
    ['sim-free'],
    'the --models allow-list reached the gateway',
  );
});

t.test('keys list and show never print the full key', async (t) => {
  const created = JSON.parse((await cli('keys', 'create', '--account', 'listco', '--env', 'live', '--name', 'first', '--json')).stdout);
  await cli('keys', 'create', '--account', 'listco', '--env', 'test', '--name', 'second');
  const list = await cli('keys', 'list', '--account', 'listco');
  t.equal(list.code, 0, 'exits 0', { stderr: list.stderr });
  const lines = list.stdout.trim().split('\n');
  t.match(lines[0], /^ID\s+ENV\s+ACTIVE\s+KEY/);
  t.equal(lines.length, 3, 'header and two keys');
  t.match(list.stdout, created.id);
  t.match(list.stdout, `svc-live-...${created.last4}`);
  t.notMatch(list.stdout, created.key);
  t.match(list.stdout, /second/);

  const json = await cli('keys', 'list', '--account', 'listco', '--json');
  const body = JSON.parse(json.stdout);
  t.equal(body.data.length, 2);
  t.notOk(body.data.some((k: Record<string, unknown>) => 'key' in k));

  const show = await cli('keys', 'show', created.id);
  t.equal(show.code, 0, 'exits 0', { stderr: show.stderr });
  t.equal(parseFields(show.stdout).key, `svc-live-...${created.last4}`);
  t.notMatch(show.stdout, created.key);
});

t.test('a key name is user content: its control characters are shown escaped, never sent to the terminal', async (t) => {
  // Made through the admin API, as the console does for a member: a newline, an OSC title sequence, a
  // screen clear and a right-to-left override.
  const name = 'a,"b"\nforged row\u001b]0;pwned\u0007\u001b[2J\u202eevil';
  const made = await gw.admin('/admin/keys', { method: 'POST', body: { account: 'ctrlco', env: 'test', name } });
  t.equal(made.status, 201, 'the API takes the name as it is');
  const list = await cli('keys', 'list', '--account', 'ctrlco');
  t.equal(list.code, 0, 'exits 0', { stderr: list.stderr });
  t.notOk(/[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u202a-\u202e]/.test(list.stdout), 'no control character reaches the terminal');
  t.equal(list.stdout.trim().split('\n').length, 2, 'header and one row: the newline did not add a row');
  t.match(list.stdout, 'a,"b"\\nforged row\\u001b]0;pwned\\u0007\\u001b[2J\\u202eevil', 'the name, escaped');
  const show = await cli('keys', 'show', made.body.id);
  t.notOk(/[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u202a-\u202e]/.test(show.stdout), 'keys show escapes it too');
  const json = JSON.parse((await cli('keys', 'show', made.body.id, '--json')).stdout);
  t.equal(json.name, name, '--json gives the name back exactly');
});

t.test('disable makes the gateway refuse the key with 401; enable lets it back in', async (t) => {
  const k = JSON.parse((await cli('keys', 'create', '--account', 'acme', '--env', 'test', '--name', 'toggle', '--json')).stdout);
  t.equal((await models(k.key)).status, 200);

  const off = await cli('keys', 'disable', k.id);
  t.equal(off.code, 0, 'exits 0', { stderr: off.stderr });
  t.equal(parseFields(off.stdout).active, 'no (disabled)');
  // The embedded store delivers the invalidation before the admin call answers, so no wait is needed here.
  const denied = await models(k.key);
  t.equal(denied.status, 401);
  t.equal(denied.body.error.code, 'invalid_api_key');

  const on = await cli('keys', 'enable', k.id, '--json');
  t.equal(on.code, 0, 'exits 0', { stderr: on.stderr });
  t.equal(JSON.parse(on.stdout).active, true);
  t.equal((await models(k.key)).status, 200);
});

t.test('rename and limits patch the key', async (t) => {
  const k = JSON.parse((await cli('keys', 'create', '--account', 'acme', '--env', 'test', '--name', 'old', '--json')).stdout);
  const r = await cli('keys', 'rename', k.id, 'new name');
  t.equal(r.code, 0, 'exits 0', { stderr: r.stderr });
  t.equal(parseFields(r.stdout).name, 'new name');
  t.equal((await gw.admin(`/admin/keys/${k.id}`)).body.name, 'new name');

  const set = await cli('keys', 'limits', k.id, '--rpm', '30', '--tpm', '5000');
  t.equal(set.code, 0, 'exits 0', { stderr: set.stderr });
  t.equal(parseFields(set.stdout).rate_limits, '30 rpm, 5000 tpm');
  t.same((await gw.admin(`/admin/keys/${k.id}`)).body.rate_limits, { requests_per_minute: 30, tokens_per_minute: 5000 });

  const only = await cli('keys', 'limits', k.id, '--rpm', '12', '--json');
  t.same(JSON.parse(only.stdout).rate_limits, { requests_per_minute: 12 }, 'the override is replaced, not merged');

  const clear = await cli('keys', 'limits', k.id, '--clear');
  t.equal(clear.code, 0, 'exits 0', { stderr: clear.stderr });
  t.equal(parseFields(clear.stdout).rate_limits, 'config defaults');
  t.equal((await gw.admin(`/admin/keys/${k.id}`)).body.rate_limits, null);
});

t.test('keys scopes replaces the scopes: how a key made before a scope existed is granted it', async (t) => {
  const k = JSON.parse(
    (await cli('keys', 'create', '--account', 'acme', '--env', 'test', '--name', 's', '--scopes', 'chat', '--json')).stdout,
  );
  const r = await cli('keys', 'scopes', k.id, 'chat,models,embeddings');
  t.equal(r.code, 0, 'exits 0', { stderr: r.stderr });
  t.equal(parseFields(r.stdout).scopes, 'chat,models,embeddings');
  t.same((await gw.admin(`/admin/keys/${k.id}`)).body.scopes, ['chat', 'models', 'embeddings']);
  const bad = await cli('keys', 'scopes', k.id, 'chat,admin');
  t.equal(bad.code, 1, "a scope that does not exist is the API's 422");
});

t.test('usage errors exit 2 without calling the gateway', async (t) => {
  const cases: Array<[string[], RegExp]> = [
    [['keys', 'create', '--account', 'acme', '--name', 'x'], /--env is required/],
    [['keys', 'create', '--account', 'acme', '--env', 'prod', '--name', 'x'], /--env must be live or test/],
    [['keys', 'create', '--account', 'acme', '--env', 'live', '--name', 'x', '--rpm', '0'], /--rpm must be a positive integer/],
    [['keys', 'create', '--account', 'acme', '--env', 'live', '--name', 'x', '--bogus'], /Unknown option '--bogus'/],
    [['keys', 'list'], /--account is required/],
    [['keys', 'show'], /missing <id>/],
    [['keys', 'rename', 'key_x'], /missing <name>/],
    [['keys', 'disable', 'key_a', 'key_b'], /unexpected argument "key_b"/],
    [['keys', 'limits', 'key_x'], /give --rpm and\/or --tpm, or --clear/],
    [['keys', 'limits', 'key_x', '--clear', '--rpm', '5'], /--clear cannot be combined/],
    [['keys', 'frobnicate'], /unknown command "tollgate keys frobnicate"/],
    [['keys'], /missing command after "tollgate keys"/],
  ];
  const before = (await gw.store.listKeys('acme')).length;
  const results = await Promise.all(cases.map(([args]) => cli(...args)));
  for (const [i, [args, message]] of cases.entries()) {
    const r = results[i]!;
    t.equal(r.code, 2, args.join(' '));
    t.match(r.stderr, message, args.join(' '));
    t.match(r.stderr, /Usage:\n {2}tollgate keys create/, 'the usage follows the error');
    t.equal(r.stdout, '');
  }
  t.equal((await gw.store.listKeys('acme')).length, before, 'no key was created by a bad invocation');
});

t.test('a full key given where an id goes is refused before it is sent, and never printed back', async (t) => {
  const k = await gw.createKey({ account: 'leaky', env: 'live' });
  for (const args of [
    ['keys', 'disable', k.key],
    ['keys', 'show', k.key],
    ['keys', 'delete', k.key, '--yes'],
    ['keys', 'rename', k.key, 'x'],
  ]) {
    const r = await cli(...args);
    t.equal(r.code, 2, args.slice(0, 2).join(' '));
    t.match(r.stderr, new RegExp(`svc-…${k.key.slice(-4)} is an API key, not its id: give the id \\(key_…`));
    t.notOk(r.stderr.includes(k.key) || r.stdout.includes(k.key), 'the key is not printed');
  }
  t.same(await models(k.key).then((r) => r.status), 200, 'nothing was done to the key');
});

t.test('API errors exit 1 with the code and message from the body', async (t) => {
  const missing = await cli('keys', 'show', 'key_doesnotexist');
  t.equal(missing.code, 1);
  t.match(missing.stderr, /^error: not_found \(HTTP 404\): No key with id/);

  const bad = await cli('keys', 'create', '--account', 'acme', '--env', 'live', '--name', 'x', '--scopes', 'chat,admin');
  t.equal(bad.code, 1);
  t.match(bad.stderr, /^error: validation_error \(HTTP 422\)/);
  t.match(bad.stderr, /body\.scopes\.1: .*\[literal_error\]/, 'each 422 issue is printed with its location');

  const wrong = await runCli(['keys', 'list', '--account', 'acme'], { ...env, TOLLGATE_ADMIN_TOKEN: 'not-the-token' });
  t.equal(wrong.code, 1);
  t.match(wrong.stderr, /^error: invalid_admin_token \(HTTP 401\)/);
  t.equal(wrong.stdout, '');
});

t.test('keys create past limits.max_keys_per_account: exit 1 naming key_limit_exceeded and the way out', async (t) => {
  const capped = await startGateway(t, { config: { limits: { max_keys_per_account: 1 } } });
  const env = { TOLLGATE_ADMIN_TOKEN: ADMIN_TOKEN, TOLLGATE_ADMIN_URL: capped.adminUrl };
  await capped.createKey({ account: 'full', env: 'test' });
  const second = await runCli(['keys', 'create', '--account', 'full', '--env', 'test', '--name', 'one too many'], env);
  t.equal(second.code, 1);
  t.equal(second.stdout, '', 'no key printed');
  t.match(second.stderr, /^error: key_limit_exceeded \(HTTP 429\): Account "full" already has 1 key,/);
  t.match(second.stderr, /disabled keys count/);
  t.match(second.stderr, /limits\.max_keys_per_account/);
});
