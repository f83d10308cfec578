// `tollgate usage …` and `tollgate ledger export` on the embedded store (the export disabled: no bucket).
import t from 'tap';
import { ADMIN_TOKEN, startGateway } from '../helpers/gateway.ts';
import { waitFor } from '../helpers/wait.ts';
import { startSim } from '../e2e/chat-fixture.ts';
import { chat } from '../e2e/credit-support.ts';
import { runCli } from './run-cli.ts';

const sim = await startSim(t);
const gw = await startGateway(t, { upstreamUrl: sim.url, config: { usage: { flush_interval_ms: 50 } } });
const env = { TOLLGATE_ADMIN_TOKEN: ADMIN_TOKEN, TOLLGATE_ADMIN_URL: gw.adminUrl };
const cli = (...args: string[]) => runCli(args, env);

t.test('usage show: a table of the grouped columns, --json the API body', async (t) => {
  const empty = await cli('usage', 'show', '--account', 'cliusage');
  t.equal(empty.code, 0, 'exits 0', { stderr: empty.stderr });
  t.equal(empty.stdout.trim(), 'REQUESTS  PROMPT_TOKENS  COMPLETION_TOKENS  COST_MICROS  CACHED_TOKENS', 'no traffic: the header only');

  const { key, id } = await gw.createKey({ account: 'cliusage', env: 'test' });
  for (const tokens of [4, 9]) {
    const res = await chat(gw.url, key, { model: 'sim-small', messages: [{ role: 'user', content: 'hi' }], sim: { tokens } });
    t.equal(res.status, 200);
    await res.text();
  }
  const rows = await waitFor(
    async () => {
      const r = await cli('usage', 'show', '--account', 'cliusage', '--json');
      const body = JSON.parse(r.stdout);
      return body.rows.length === 1 && body.rows[0].requests === 2 && body.rows;
    },
    3000,
    'two requests aggregated',
  );
  t.match(rows[0], { key_id: id, model: 'sim-small', completion_tokens: 13, cost_micros: 0 }, 'a test key: tokens counted, cost 0');
  const table = await cli('usage', 'show', '--account', 'cliusage', '--group-by', 'key,model');
  t.match(table.stdout, new RegExp(`^KEY_ID\\s+MODEL\\s+REQUESTS.*\\n${id}\\s+sim-small\\s+2\\s`, 'm'));
});

t.test('usage and ledger usage errors exit 2; the export disabled is an API error (exit 1)', async (t) => {
  const noAccount = await cli('usage', 'show');
  t.equal(noAccount.code, 2);
  t.match(noAccount.stderr, /--account is required/);
  const noOnce = await cli('ledger', 'export');
  t.equal(noOnce.code, 2);
  t.match(noOnce.stderr, /--once is required/);
  const badDay = await cli('usage', 'show', '--account', 'a', '--from', '2026-02-30');
  t.equal(badDay.code, 1, 'a day that does not exist: the 422 as an API error');
  t.match(badDay.stderr, /query\.from/);
  const disabled = await cli('ledger', 'export', '--once');
  t.equal(disabled.code, 1);
  t.match(disabled.stderr, /not_found \(HTTP 404\): Ledger export is disabled/);
});
