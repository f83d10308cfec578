// Two gateways on a real 3-master + 3-replica Redis Cluster (SPEC §11, issue 17), one of them a
// `node src/main.ts` with two workers: exact debits on
// accounts in different slots, key disables and share revocations across instances within 1 s, the
// reaper finding holds on every master, shared test-key limits, console sign-in links and sessions
// across instances, and a master failover under live load.
import t from 'tap';
import http from 'node:http';
import { startRedisCluster } from '../helpers/redis-cluster.ts';
import { startGateway, type TestGateway } from '../helpers/gateway.ts';
import { waitFor } from '../helpers/wait.ts';
import { sharesS3Config, startS3 } from '../helpers/s3.ts';
import { accountVsLedger, ledger, postChat, startSim } from '../e2e/chat-fixture.ts';
import { spawnGateway } from '../e2e/credit-support.ts';

const cluster = await startRedisCluster(t);
if (cluster) {
  const sim = await startSim(t);
  // Share snapshots are S3 objects (SPEC §13): every instance on one bucket.
  const s3 = await startS3(t);
  const config = { store: { cluster_nodes: cluster.addresses, command_timeout_ms: 1000 }, shares: { s3: sharesS3Config(s3) } };
  const a = await startGateway(t, { upstreamUrl: sim.url, config });
  // Instance B is `node src/main.ts` with server.workers: 2, as production runs it on a multi-core box:
  // every check below that goes through B goes through its node:cluster workers.
  const child = await spawnGateway(t, { upstreamUrl: sim.url, config: { ...config, server: { workers: 2 } } });
  t.teardown(() => {
    for (const line of child.output().split('\n')) {
      const pid = /"msg":"worker listening"/.test(line) ? (JSON.parse(line) as { pid: number }).pid : 0;
      if (pid) {
        try {
          process.kill(pid, 'SIGKILL');
        } catch {
          // gone already
        }
      }
    }
  });
  await waitFor(async () => (await fetch(`${child.adminUrl}/readyz`).catch(() => null))?.status === 200, 20_000, 'both workers of B', 100);
  const b = { url: child.url, auth: (key: string) => ({ authorization: `Bearer ${key}` }) };
  /**
   * The statuses of four GETs to B, each on a connection of its own: B's primary hands connections to its
   * workers in turn (node:cluster's round robin), so both workers answer two of them. A check through a
   * kept-alive fetch reaches one worker only, which need not be the one whose cache is tested.
   */
  const onBothWorkers = async (path: string, headers: Record<string, string> = {}): Promise<number[]> => {
    const statuses: number[] = [];
    for (let i = 0; i < 4; i++) {
      statuses.push(
        await new Promise<number>((resolve, reject) => {
          http
            .get(`${b.url}${path}`, { headers, agent: false }, (res) => {
              res.resume();
              res.on('end', () => resolve(res.statusCode!));
            })
            .on('error', reject);
        }),
      );
    }
    return statuses;
  };
  const body = { model: 'sim-small', messages: [{ role: 'user', content: 'hello' }], max_tokens: 16, sim: { tokens: 8 } };

  /** Accounts whose slots are owned by different masters: one per master. */
  async function spreadAccounts(prefix: string): Promise<string[]> {
    const byMaster = new Map<number, string>();
    for (let i = 0; byMaster.size < 3 && i < 200; i++) {
      const acct = `${prefix}${i}`;
      const m = await cluster!.masterOf(`{acct:${acct}}`);
      if (!byMaster.has(m)) byMaster.set(m, acct);
    }
    return [...byMaster.values()];
  }

  async function chatOk(gw: Pick<TestGateway, 'url' | 'auth'>, key: string): Promise<string> {
    const r = await postChat(gw, key, body);
    if (r.status !== 200) throw new Error(`chat: ${r.status} ${await r.text()}`);
    await r.arrayBuffer();
    return r.headers.get('x-request-id')!;
  }

  t.test('accounts on every master: exact debits through both instances', async (t) => {
    const accounts = await spreadAccounts('spread');
    t.equal(accounts.length, 3, 'one account per master');
    for (const acct of accounts) {
      const { key } = await a.createKey({ account: acct, env: 'live' });
      await a.grant(acct, 1_000_000);
      const ids = [await chatOk(a, key), await chatOk(b, key), await chatOk(a, key)];
      await waitFor(async () => (await ledger(a, acct)).filter((e) => e.kind === 'debit').length === 3, 3000, `${acct}: three debits`);
      const { balance, held, sum, entries } = await accountVsLedger(a, acct);
      t.equal(balance, sum, `${acct}: balance = Σ ledger`);
      t.equal(held, 0, `${acct}: no hold left`);
      t.same(
        entries
          .filter((e) => e.kind === 'debit')
          .map((e) => e.request_id)
          .sort(),
        [...ids].sort(),
        `${acct}: one debit per request`,
      );
    }
  });

  t.test('a key disabled on one instance is refused by the other within 1 s', async (t) => {
    const { key, id } = await a.createKey({ account: 'inval', env: 'test' });
    t.same(await onBothWorkers('/v1/models', b.auth(key)), [200, 200, 200, 200], 'cached by both of B’s workers');
    t.equal((await a.admin(`/admin/keys/${id}`, { method: 'PATCH', body: { active: false } })).status, 200);
    const t0 = Date.now();
    await waitFor(
      async () => (await onBothWorkers('/v1/models', b.auth(key))).every((s) => s === 401),
      1000,
      'both of B’s workers to refuse the key',
    );
    t.pass(`refused on B after ${Date.now() - t0} ms`);
  });

  t.test('the reaper releases expired holds on every master', async (t) => {
    const accounts = await spreadAccounts('reap');
    for (const acct of accounts) {
      await a.grant(acct, 10_000);
      const r = await a.store.hold(acct, `req_orphan_${acct}`, 5_000, Date.now() + 100);
      t.ok(r, `${acct}: held`);
    }
    for (const acct of accounts) {
      await waitFor(
        async () => (await ledger(a, acct)).some((e) => e.kind === 'hold_expired' && e.request_id === `req_orphan_${acct}`),
        5000,
        `${acct}: hold_expired`,
      );
      const { held, balance, sum } = await accountVsLedger(a, acct);
      t.equal(held, 0, `${acct}: released`);
      t.equal(balance, sum);
    }
  });

  t.test('a test key limit is shared by both instances', async (t) => {
    const { key } = await a.createKey({ account: 'shared-rl', env: 'test', rate_limits: { requests_per_minute: 3 } });
    const statuses = [];
    for (const gw of [a, b, a, b]) {
      const r = await fetch(`${gw.url}/v1/models`, { headers: gw.auth(key) });
      statuses.push(r.status);
      await r.arrayBuffer();
    }
    t.same(statuses, [200, 200, 200, 429]);
  });

  t.test('a share revoked on one instance answers 410 on the other within 1 s', async (t) => {
    const { key } = await a.createKey({ account: 'sharer', env: 'live' });
    const created = await fetch(`${a.url}/v1/shares`, {
      method: 'POST',
      headers: { ...a.auth(key), 'content-type': 'application/json' },
      body: JSON.stringify({ snapshot: { messages: [{ role: 'user', content: 'x' }] } }),
    });
    const { slug } = (await created.json()) as { slug: string };
    t.same(await onBothWorkers(`/v1/shares/${slug}`), [200, 200, 200, 200], 'read (and cached) by both of B’s workers');
    t.equal((await fetch(`${a.url}/v1/shares/${slug}`, { method: 'DELETE', headers: a.auth(key) })).status, 204);
    await waitFor(
      async () => (await onBothWorkers(`/v1/shares/${slug}`)).every((s) => s === 410),
      1000,
      'both of B’s workers to answer 410',
    );
  });

  t.test('console sessions across instances: a link minted on A signs in on B once; ended on A, refused on B', async (t) => {
    const acct = 'console-x';
    const link = new URL((await a.admin('/admin/console/sessions', { body: { account: acct } })).body.url);
    const signIn = await fetch(`${b.url}/console/login${link.search}`, { redirect: 'manual' });
    t.equal(signIn.status, 303, 'the token stored through A is taken on B');
    const cookie = signIn.headers.get('set-cookie')!.split(';')[0]!;
    const keysPage = async (gw: { url: string }) =>
      (await fetch(`${gw.url}/console/accounts/${acct}/keys`, { headers: { cookie }, redirect: 'manual' })).status;
    t.same([await keysPage(b), await keysPage(a)], [200, 200], 'the session reads on both instances');
    t.equal((await fetch(`${a.url}/console/login${link.search}`, { redirect: 'manual' })).status, 401, 'the link is spent on A too');
    const ended = await a.admin(`/admin/console/sessions?account=${acct}`, { method: 'DELETE' });
    t.same([ended.status, ended.body.ended], [200, 1], 'one session ended');
    t.equal(await keysPage(b), 401, 'ended on A: B refuses the session at once (no session cache)');
  });

  t.test(
    "failover: the master of an account's slot dies under live load; the gateway recovers without restart, nothing double-billed or lost",
    async (t) => {
      const acct = 'failover';
      const { key } = await a.createKey({ account: acct, env: 'live' });
      await a.grant(acct, 100_000_000);
      const master = await cluster.masterOf(`{acct:${acct}}`);
      const other = cluster.nodes.find((n) => n.port !== master)!.port;
      const served: string[] = [];
      const statuses: Record<number, number> = {};
      let killedAt = 0;
      let recoveredAt = 0;
      const t0 = Date.now();
      while (Date.now() - t0 < 40_000) {
        const r = await postChat(a, key, body);
        statuses[r.status] = (statuses[r.status] ?? 0) + 1;
        await r.arrayBuffer();
        if (r.status === 200) served.push(r.headers.get('x-request-id')!);
        if (!killedAt && served.length >= 20) {
          // Request 20's settle may still be on its way: it waits in the pause and dies unanswered.
          await cluster.killMasterReplicated(master);
          killedAt = Date.now();
        }
        if (killedAt && !recoveredAt && r.status === 200 && Date.now() > killedAt) recoveredAt = Date.now();
        if (recoveredAt && served.length >= 60) break;
        if (r.status !== 200) await new Promise((res) => setTimeout(res, 50));
      }
      t.ok(killedAt > 0, 'the master was killed');
      t.ok(recoveredAt > 0, `served again ${recoveredAt - killedAt} ms after the kill`);
      t.same(
        Object.keys(statuses).filter((s) => s !== '200' && s !== '503'),
        [],
        `only 200 and 503: ${JSON.stringify(statuses)}`,
      );
      t.comment(`failover: ${statuses[503] ?? 0} requests answered 503, ${served.length} served, recovery in ${recoveredAt - killedAt} ms`);
      await cluster.waitOk(other);
      // Settles owed during the outage are retried until they land.
      // (A hold that timed out is settled at 0, so a 503 can have a debit too: count the served ones.)
      await waitFor(
        async () => {
          const debited = new Set((await ledger(a, acct)).filter((e) => e.kind === 'debit').map((e) => e.request_id));
          return served.every((id) => debited.has(id));
        },
        20_000,
        'every served request debited',
        200,
      );
      const { balance, held, sum, entries } = await accountVsLedger(a, acct);
      const debits = entries.filter((e) => e.kind === 'debit').map((e) => e.request_id!);
      t.equal(new Set(debits).size, debits.length, 'no request debited twice');
      for (const id of served) t.ok(debits.includes(id), `${id} debited`);
      t.equal(balance, sum, 'balance = Σ ledger');
      t.ok(held >= 0);
    },
  );
}
