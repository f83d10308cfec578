// Every Redis Cluster node down after boot (SPEC §5 / §14): once ioredis knows the slot table, a command
// issued while the cluster client reconnects waits in its offline queue, where ioredis' commandTimeout does
// not run. Live requests (their group-commit hold batches among them), a key admin call and a key patch
// (its invalidation PUBLISH) and a grant must still answer 503 store_unavailable within about
// command_timeout_ms (they hung until the nodes came back), a grant refused so must not run later, test
// keys keep working from the cache, and the gateway recovers by itself when the nodes come back, every
// served request debited once.
import t from 'tap';
import { startRedisCluster } from '../helpers/redis-cluster.ts';
import { ADMIN_TOKEN as ADMIN, startGateway } from '../helpers/gateway.ts';
import { waitFor } from '../helpers/wait.ts';
import { accountVsLedger, postChat, startSim, waitForDebit } from '../e2e/chat-fixture.ts';
import { chat, streamBody } from '../e2e/credit-support.ts';

const TIMEOUT_MS = 500;
// Up to two Redis calls in sequence (a group-commit turn waits for the slot's previous one: 1.05 s measured)
// plus scheduling slack on a shared two-core box; before the fix every call waited for the nodes (10 s cap).
const BOUND_MS = TIMEOUT_MS * 4;

const cluster = await startRedisCluster(t);
if (cluster) {
  const sim = await startSim(t);
  const config = { store: { cluster_nodes: cluster.addresses, command_timeout_ms: TIMEOUT_MS } };
  const gw = await startGateway(t, { upstreamUrl: sim.url, config });
  const body = { model: 'sim-small', messages: [{ role: 'user', content: 'hello' }], max_tokens: 16, sim: { tokens: 8 } };

  /** status, error code and duration of a call, or 'hung' when it did not answer within `hangMs`. */
  async function timed(go: () => Promise<Response>, hangMs = 10_000): Promise<{ status: number | 'hung'; code?: string; ms: number }> {
    const t0 = performance.now();
    const r = await Promise.race([go(), new Promise<'hung'>((resolve) => setTimeout(() => resolve('hung'), hangMs).unref())]);
    const ms = Math.round(performance.now() - t0);
    if (r === 'hung') return { status: 'hung', ms };
    const text = await r.text();
    let code: string | undefined;
    try {
      code = (JSON.parse(text) as { error?: { code?: string } }).error?.code;
    } catch {
      // a body that is not JSON: a served stream, say
    }
    return { status: r.status, ...(code !== undefined && { code }), ms };
  }

  t.test('a whole-cluster outage: 503 within about command_timeout_ms, then recovery', async (t) => {
    // Six accounts, their slots spread over the masters.
    const keys: string[] = [];
    const ids: string[] = [];
    for (let i = 0; i < 6; i++) {
      const { key, id } = await gw.createKey({ account: `out${i}`, env: 'live' });
      ids.push(id);
      await gw.grant(`out${i}`, 10_000_000);
      keys.push(key);
    }
    // Cached for config's key cache TTL (10 s): the whole outage below fits in it.
    const { key: testKey } = await gw.createKey({ account: 'out0', env: 'test' });
    for (const key of [...keys, testKey]) {
      const r = await postChat(gw, key, body);
      t.equal(r.status, 200, 'served before the outage');
      await r.arrayBuffer();
    }

    // An account no request draws on: its balance moves only by a grant.
    await gw.grant('outg', 5_000);
    const before = (await gw.admin('/admin/accounts/outg')).body;
    // A stream held before the outage and finished during it: its settle meets the outage, is retried, and
    // lands once the nodes are back.
    const streaming = await chat(gw.url, keys[3]!, streamBody({ tokens: 20, delay_ms: 100 }));
    t.equal(streaming.status, 200, 'a stream held before the outage');
    const streamId = streaming.headers.get('x-request-id')!;
    const streamed = streaming.text();
    await cluster.stopAll();
    const down = performance.now();
    // Two rounds: one at once (the client may still think it is connected), one after it noticed; both
    // well inside the key cache TTL (10 s) of the test key served above.
    for (const round of ['right after the kill', 'a while into the outage']) {
      if (round !== 'right after the kill') await new Promise((r) => setTimeout(r, 2500));
      const admin = (method: string, path: string, body: unknown) => () =>
        fetch(`${gw.adminUrl}${path}`, {
          method,
          headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' },
          body: JSON.stringify(body),
        });
      // All at once: live requests of several accounts and several of one account (single holds and
      // group-commit batches), key admin calls (the patch PUBLISHes an invalidation), a grant.
      const calls: [string, () => Promise<Response>][] = [
        ...keys.map((k, i): [string, () => Promise<Response>] => [`live key ${i}`, () => postChat(gw, k, body)]),
        ...keys.map((_, i): [string, () => Promise<Response>] => [`live key 0, request ${i}`, () => postChat(gw, keys[0]!, body)]),
        ['key creation', admin('POST', '/admin/keys', { name: 'n', account: 'out1', env: 'live' })],
        ['key patch', admin('PATCH', `/admin/keys/${ids[5]}`, { name: 'renamed' })],
        ['grant', admin('POST', '/admin/accounts/outg/credits', { amount_micros: 1000, idempotency_key: `g-${round}` })],
      ];
      const [test, ...answers] = await Promise.all([timed(() => postChat(gw, testKey, body)), ...calls.map(([, go]) => timed(go))]);
      calls.forEach(([name], i) => {
        const r = answers[i]!;
        t.same([r.status, r.code], [503, 'store_unavailable'], `${round}: ${name}: 503 store_unavailable`);
        t.ok(r.ms < BOUND_MS, `${round}: ${name}: answered in ${r.ms} ms (< ${BOUND_MS})`);
      });
      t.equal(test!.status, 200, `${round}: a cached test key is still served (${test!.ms} ms)`);
      t.ok(test!.ms < BOUND_MS, `${round}: test key answered in ${test!.ms} ms`);
    }
    t.match(await streamed, /\[DONE\]/, 'the stream held before the outage finished during it');
    t.comment(`outage lasted ${Math.round(performance.now() - down)} ms before the restart`);

    await cluster.restartAll();
    await waitFor(
      async () => (await postChat(gw, keys[1]!, body).then(async (r) => (await r.arrayBuffer(), r.status))) === 200,
      30_000,
      'a live key served again after the restart',
      200,
    );
    for (const key of keys) {
      const r = await postChat(gw, key, body);
      t.equal(r.status, 200, 'every live key served again');
      await r.arrayBuffer();
    }
    await waitFor(async () => (await fetch(`${gw.adminUrl}/readyz`)).status === 200, 10_000, '/readyz 200 again', 100);
    // Served requests debited once each (the stream's settle retried through the outage), the outage's
    // holds given back, balance = Σ ledger.
    const debit = await waitForDebit(gw, 'out3', streamId, 20_000);
    t.ok(debit.amount_micros < 0, 'the stream held before the outage is debited once');
    for (let i = 0; i < keys.length; i++) {
      await waitFor(async () => (await accountVsLedger(gw, `out${i}`)).held === 0, 20_000, `out${i}: nothing held`, 200);
      const { balance, sum } = await accountVsLedger(gw, `out${i}`);
      t.equal(balance, sum, `out${i}: balance = Σ ledger`);
    }
    // The grants answered 503 timed out in the client's queue: dropped there, not run once the nodes were
    // back (a 503 must not have moved money later).
    t.same((await gw.admin('/admin/accounts/outg')).body, before, 'the grants refused in the outage never ran');
  });
}
