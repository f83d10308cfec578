// Admin calls that run a job on the gateway get more than the CLI's 30 s: `usage rebuild` waits up to
// 30 s for an export holding the account's lease before the gateway answers 503 `overloaded` ("retry in
// a minute"). With the CLI's 30 s for every call, the operator got `timeout` at that very moment instead
// (and the gateway logged the request as aborted). Takes ~30 s: the gateway's lease wait is fixed.
import t from 'tap';
import { ADMIN_TOKEN, startGateway } from '../helpers/gateway.ts';
import { runCli } from './run-cli.ts';

const gw = await startGateway(t);
const env = { TOLLGATE_ADMIN_TOKEN: ADMIN_TOKEN, TOLLGATE_ADMIN_URL: gw.adminUrl };

t.test('usage rebuild while an export holds the lease: the gateway’s 503 reaches the operator, not a timeout', async (t) => {
  await gw.grant('leased', 1000);
  t.ok(await gw.store.acquireExportLease('leased', 'another-instance', 10 * 60_000), 'an export of the account holds its lease');
  const r = await runCli(['usage', 'rebuild', '--account', 'leased'], env);
  t.equal(r.code, 1, 'an API error');
  t.match(r.stderr, /error: overloaded \(HTTP 503\): The ledger export of this account is running; retry the rebuild in a minute/);
  t.notMatch(r.stderr, /timeout/);
});
