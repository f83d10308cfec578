// `tollgate keys limits` and `keys create --rpm/--tpm` (SPEC §2) drive the per-key override end to end:
// the CLI process talks to the admin API, and the gateway enforces what it set.
import t from 'tap';
import { ADMIN_TOKEN, startGateway } from '../helpers/gateway.ts';
import { runCli } from '../cli/run-cli.ts';
import { metric, models, until } from './limits-fixture.ts';

const gw = await startGateway(t, {
  config: { rate_limits: { window_seconds: 30, test: { requests_per_minute: 4, tokens_per_minute: 5000 } } },
});
const cli = (...args: string[]) => runCli(args, { TOLLGATE_ADMIN_TOKEN: ADMIN_TOKEN, TOLLGATE_ADMIN_URL: gw.adminUrl });

t.test('keys create --rpm/--tpm sets an override the gateway enforces', async (t) => {
  const r = await cli('keys', 'create', '--account', 'acme', '--env', 'live', '--name', 'capped', '--rpm', '2', '--tpm', '700', '--json');
  t.equal(r.code, 0, 'exits 0', { stderr: r.stderr });
  const k = JSON.parse(r.stdout);
  t.same(k.rate_limits, { requests_per_minute: 2, tokens_per_minute: 700 });
  const a = await models(gw, k.key);
  t.equal(a.headers.get('x-ratelimit-limit-requests'), '2');
  t.equal(a.headers.get('x-ratelimit-limit-tokens'), '700');
  t.equal((await models(gw, k.key)).status, 200);
  t.equal((await models(gw, k.key)).status, 429);
  t.equal(await metric(gw, 'tollgate_rate_limiter_fallback'), 0, 'the embedded store limits in memory by design: not a fallback');
});

t.test('keys limits <id> --rpm replaces the override; --clear falls back to the config defaults', async (t) => {
  const { key, id } = await gw.createKey({ account: 'acme', env: 'test' });
  t.equal((await models(gw, key)).headers.get('x-ratelimit-limit-requests'), '4', 'test default');

  const set = await cli('keys', 'limits', id, '--rpm', '1', '--json');
  t.equal(set.code, 0, 'exits 0', { stderr: set.stderr });
  t.same(JSON.parse(set.stdout).rate_limits, { requests_per_minute: 1 });
  const refused = await until(
    'the override on the gateway',
    async () => {
      const r = await models(gw, key);
      return r.headers.get('x-ratelimit-limit-requests') === '1' ? r : undefined;
    },
    1000,
  );
  t.equal(refused.status, 429, 'already 2 requests in the window against a limit of 1');
  t.equal(refused.headers.get('x-ratelimit-limit-tokens'), '5000', '--tpm left out: tokens from the config');

  const cleared = await cli('keys', 'limits', id, '--clear', '--json');
  t.equal(cleared.code, 0, 'exits 0', { stderr: cleared.stderr });
  t.equal(JSON.parse(cleared.stdout).rate_limits, null);
  const r = await until(
    'the default again',
    async () => {
      const x = await models(gw, key);
      return x.headers.get('x-ratelimit-limit-requests') === '4' ? x : undefined;
    },
    1000,
  );
  t.equal(r.status, 200, '3 requests in the window, limit 4 again');
  t.equal(r.headers.get('x-ratelimit-remaining-requests'), '1');
});

t.test('keys limits refuses bad usage without calling the API', async (t) => {
  const { id } = await gw.createKey({ account: 'acme', env: 'test', rate_limits: { requests_per_minute: 9 } });
  for (const args of [[], ['--rpm', '1', '--clear'], ['--rpm', '0'], ['--tpm', 'lots']]) {
    const r = await cli('keys', 'limits', id, ...args);
    t.not(r.code, 0, `keys limits ${args.join(' ') || '(nothing)'} fails`);
    t.match(r.stderr, /rpm|tpm|clear|integer|positive/i, 'and says why');
  }
  t.same((await gw.admin(`/admin/keys/${id}`)).body.rate_limits, { requests_per_minute: 9 }, 'the override is unchanged');
});
