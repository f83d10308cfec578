// Usage aggregates and the ledger export on a real 3-master + 3-replica Redis Cluster (SPEC §10, §11):
// accounts whose slots are on different masters; the usage flush (single-key commands, autopipelined
// per node) and the export's scripts (one account slot each) must work on every master, and the
// account index is a key of its own.
import t from 'tap';
import { startRedisCluster } from '../helpers/redis-cluster.ts';
import { startGateway } from '../helpers/gateway.ts';
import { sharesS3Config, startS3 } from '../helpers/s3.ts';
import { waitFor } from '../helpers/wait.ts';
import { ledger, postChat, startSim } from '../e2e/chat-fixture.ts';
import { checkExactlyOnce, sinkFor } from '../ledger/support.ts';
import type { LedgerEntry } from '../../src/store/types.ts';

const cluster = await startRedisCluster(t);
if (cluster) {
  const sim = await startSim(t);
  const s3 = await startS3(t, 'cluster-ledger');
  const gw = await startGateway(t, {
    upstreamUrl: sim.url,
    config: {
      store: { cluster_nodes: cluster.addresses, command_timeout_ms: 1000 },
      shares: { s3: sharesS3Config(s3) },
      ledger: { retention_days: 0, export: { interval_seconds: 3600 } },
      usage: { flush_interval_ms: 100 },
    },
  });

  t.test('accounts on every master: usage equals the ledger; the export writes each entry once and trims', async (t) => {
    const byMaster = new Map<number, string>();
    for (let i = 0; byMaster.size < 3 && i < 200; i++) {
      const m = await cluster.masterOf(`{acct:usage${i}}`);
      if (!byMaster.has(m)) byMaster.set(m, `usage${i}`);
    }
    const accounts = [...byMaster.values()];
    t.equal(accounts.length, 3, 'one account per master');
    const body = { model: 'sim-small', messages: [{ role: 'user', content: 'hello' }], max_tokens: 16, sim: { tokens: 8 } };
    for (const acct of accounts) {
      const { key } = await gw.createKey({ account: acct, env: 'live' });
      await gw.grant(acct, 1_000_000);
      for (let i = 0; i < 3; i++) {
        const r = await postChat(gw, key, body);
        t.equal(r.status, 200);
        await r.arrayBuffer();
      }
    }
    const ledgers = new Map<string, LedgerEntry[]>();
    for (const acct of accounts) {
      const entries = await waitFor(
        async () => {
          const e = await ledger(gw, acct);
          return e.filter((x) => x.kind === 'debit').length === 3 && e;
        },
        3000,
        `${acct}: three debits`,
      );
      ledgers.set(acct, entries);
      const debits = entries.filter((e) => e.kind === 'debit');
      const want = {
        requests: 3,
        prompt_tokens: debits.reduce((n, e) => n + e.prompt_tokens!, 0),
        completion_tokens: debits.reduce((n, e) => n + e.completion_tokens!, 0),
        cost_micros: debits.reduce((n, e) => n - e.amount_micros, 0),
        cached_tokens: debits.reduce((n, e) => n + (e.cached_tokens ?? 0), 0),
      };
      await waitFor(
        async () =>
          JSON.stringify((await gw.admin(`/admin/accounts/${acct}/usage?group_by=model`)).body.rows) ===
          JSON.stringify([{ model: 'sim-small', ...want }]),
        3000,
        `${acct}: usage equal to its ledger`,
      );
    }
    const r = await gw.admin('/admin/ledger/export', { method: 'POST' });
    t.equal(r.status, 200);
    t.equal(r.body.failed, 0);
    t.equal(r.body.entries, 12, 'a grant and three debits per account');
    t.equal(r.body.trimmed, 12);
    for (const acct of accounts) t.same(await ledger(gw, acct), [], `${acct}: trimmed from Redis`);
    await checkExactlyOnce(t, sinkFor(s3), ledgers);
  });
}
