// Redis Cluster replicates asynchronously: a master acknowledges a settle before its replica has it, and
// a replica promoted after the master's death comes up without it — a served request never debited, its
// hold left for the reaper. Here the replica of a live account's master is cut off from it (its link
// killed, and its `masterauth` made wrong so it cannot come back: a SIGSTOP would not do, the kernel keeps
// what the master sent for it), ten live requests are served and settled on the master, which keeps
// acknowledging, then the master is SIGKILLed and the replica promoted without any of those settles. The gateway sends the
// settles that landed in the last `store.resend_settles_ms` again when the master's connection ends
// (docs/ledger.md "Failover"): every served request is debited exactly once on the new master and no hold
// is left. With `resend_settles_ms: 0` the same run times out waiting for the ten debits (run by hand
// when this test was written; test/credit/resend-after-loss.test.ts checks the 0 case on every run).
import t from 'tap';
import { startRedisCluster } from '../helpers/redis-cluster.ts';
import { startGateway } from '../helpers/gateway.ts';
import { waitFor } from '../helpers/wait.ts';
import { accountVsLedger, ledger, metricsText, postChat, sample, startSim } from '../e2e/chat-fixture.ts';

const PASSWORD = 'failover-loss-pw';
const cluster = await startRedisCluster(t, { password: PASSWORD });
if (cluster) {
  const sim = await startSim(t);
  const gw = await startGateway(t, {
    upstreamUrl: sim.url,
    config: { store: { cluster_nodes: cluster.addresses.map((a) => `redis://:${PASSWORD}@${a}`), command_timeout_ms: 1000 } },
  });
  const body = { model: 'sim-small', messages: [{ role: 'user', content: 'hello' }], max_tokens: 16, sim: { tokens: 8 } };

  t.test('settles the dead master acknowledged but never replicated are sent again: each debited once', async (t) => {
    const acct = 'lagging';
    const { key } = await gw.createKey({ account: acct, env: 'live' });
    await gw.grant(acct, 100_000_000);
    const master = await cluster.masterOf(`{acct:${acct}}`);
    const info = await cluster.cli(master, 'info', 'replication');
    const replicaPort = Number(/slave0:[^\r\n]*port=(\d+)/.exec(info)![1]);
    const replica = cluster.nodes.find((n) => n.port === replicaPort)!;
    // The grant is on the replica before it stops: only the settles below are missing from it.
    const offset = Number(/master_repl_offset:(\d+)/.exec(info)![1]);
    await waitFor(
      async () => Number(/slave_repl_offset:(\d+)/.exec(await cluster.cli(replicaPort, 'info', 'replication'))?.[1] ?? -1) >= offset,
      10_000,
      'the replica in sync',
      20,
    );
    await cluster.cli(replicaPort, 'config', 'set', 'masterauth', 'wrong');
    await cluster.cli(replicaPort, 'client', 'kill', 'type', 'master');
    await waitFor(
      async () => /master_link_status:down/.test(await cluster.cli(replicaPort, 'info', 'replication')),
      10_000,
      'the replica cut off',
      20,
    );

    const served: string[] = [];
    for (let i = 0; i < 10; i++) {
      const r = await postChat(gw, key, body);
      await r.arrayBuffer();
      t.equal(r.status, 200, `request ${i} served`);
      served.push(r.headers.get('x-request-id')!);
    }
    const debitedIds = async () => new Set((await ledger(gw, acct)).filter((e) => e.kind === 'debit').map((e) => e.request_id));
    await waitFor(
      async () => {
        const s = await debitedIds();
        return served.every((id) => s.has(id));
      },
      10_000,
      'every served request debited on the master',
    );
    // The usage flush of those requests lands on the master too (and is lost with it).
    const day = new Date().toISOString().slice(0, 10);
    const requests = async () => {
      const r = await gw.admin(`/admin/accounts/${acct}/usage?from=${day}&to=${day}&group_by=day`);
      return (r.body as { rows: { requests: number }[] } | undefined)?.rows?.[0]?.requests ?? 0;
    };
    await waitFor(async () => (await requests()) === served.length, 10_000, 'the usage flush on the master', 50);
    const onMaster = await cluster.cli(master, 'info', 'replication');
    t.ok(Number(/master_repl_offset:(\d+)/.exec(onMaster)![1]) > offset, 'the master acknowledged writes its replica does not have');

    const dead = cluster.nodes.find((n) => n.port === master)!;
    dead.child.kill('SIGKILL');
    await waitFor(
      async () => /role:master/.test(await cluster.cli(replicaPort, 'info', 'replication')),
      30_000,
      'the replica promoted',
      100,
    );
    await cluster.waitOk(replicaPort, 30_000);

    await waitFor(
      async () => {
        const s = await debitedIds().catch(() => new Set());
        return served.every((id) => s.has(id));
      },
      30_000,
      'every served request debited on the promoted replica',
      200,
    );
    const { balance, held, sum, entries } = await accountVsLedger(gw, acct);
    const debits = entries.filter((e) => e.kind === 'debit').map((e) => e.request_id!);
    t.same([...debits].sort(), [...served].sort(), 'each served request debited exactly once');
    t.equal(balance, sum, 'balance = Σ ledger');
    t.equal(held, 0, 'no hold left');
    // The usage aggregates agree with the ledger (SPEC §10): the flush the dead master took is sent again too.
    await waitFor(async () => (await requests()) >= served.length, 10_000, 'the usage aggregates', 200);
    t.equal(await requests(), served.length, 'usage counts each served request once');
    // Counted for the operator: ten settles found lost and debited again.
    const m = await metricsText(gw);
    t.equal(
      sample(m, 'tollgate_settle_resends_total', { outcome: 'debited' }),
      served.length,
      'tollgate_settle_resends_total{outcome="debited"}',
    );
  });
}
