// Redis stopped (SPEC §5, issue 3): live keys fail closed with 503 `store_unavailable` quickly — and
// nothing reaches the upstream, so nothing is served unbilled — while cached test keys keep working;
// when Redis comes back the same gateway serves and bills again, without a restart.
// The restarted redis-server is empty (--save '' --appendonly no): keys and credit are re-created
// through the admin API after the restart.
import t from 'tap';
import { startRedis } from '../helpers/redis.ts';
import { startGateway } from '../helpers/gateway.ts';
import { startSimulator } from '../../src/simulator/simulator.ts';
import { accountOf, chat, checkLedger, ledgerOf, streamBody } from './credit-support.ts';
import { sseData } from './chat-fixture.ts';
import { waitFor } from '../helpers/wait.ts';

// "Quickly" is the store's command timeout (300 ms in the test config) plus ioredis' one retry; 3 s is
// a no-hang bound, not a speed target.
const NO_HANG_MS = 3000;

const redis = await startRedis(t, { restartable: true });
if (redis) {
  t.test('Redis down: live 503 store_unavailable, no upstream call; test keys work; recovery without restart', async (t) => {
    const sim = await startSimulator();
    t.teardown(() => sim.close());
    const gw = await startGateway(t, { redisUrl: redis.url, upstreamUrl: sim.url, config: { store: { command_timeout_ms: 300 } } }); // outage: fail fast
    const live = await gw.createKey({ account: 'acme', env: 'live' });
    const unseen = await gw.createKey({ account: 'acme', env: 'live', name: 'never used before the outage' });
    const test = await gw.createKey({ account: 'acme', env: 'test' });
    await gw.grant('acme', 10_000_000);
    // One request each, so both keys sit in the in-process key cache (TTL 10 s) before the outage.
    for (const k of [live.key, test.key]) {
      const res = await chat(gw.url, k, streamBody({ tokens: 3 }));
      t.equal(res.status, 200, 'served before the outage');
      await res.text();
    }

    await redis.stop();
    const upstreamCalls = sim.requests.length;

    const started = Date.now();
    const outcomes = await Promise.all(
      [
        chat(gw.url, live.key, streamBody({ tokens: 3 })),
        chat(gw.url, live.key, { model: 'sim-small', messages: [{ role: 'user', content: 'hi' }] }),
        chat(gw.url, unseen.key, streamBody({ tokens: 3 })),
        ...Array.from({ length: 10 }, () => chat(gw.url, live.key, streamBody({ tokens: 3 }))),
      ].map(async (p) => {
        const res = await p;
        return {
          status: res.status,
          type: res.headers.get('content-type'),
          id: res.headers.get('x-request-id'),
          body: (await res.json()) as { error?: { code?: string } },
        };
      }),
    );
    const took = Date.now() - started;
    t.same(
      outcomes.map((o) => o.status),
      outcomes.map(() => 503),
      'every live request answers 503 (cached key, uncached key, stream or not)',
    );
    t.ok(
      outcomes.every((o) => o.body.error?.code === 'store_unavailable' && o.type === 'application/json' && /^req_/.test(o.id ?? '')),
      'as a JSON store_unavailable error with a request id',
    );
    t.ok(took < NO_HANG_MS, `13 concurrent live requests all answered within ${took} ms`);
    t.equal(sim.requests.length, upstreamCalls, 'no live request reached the upstream: nothing served unbilled');

    const viaTest = await chat(gw.url, test.key, streamBody({ tokens: 3 }));
    t.equal(viaTest.status, 200, 'a cached test key is still served (test keys never touch credit)');
    t.equal(sseData(await viaTest.text()).at(-1), '[DONE]', 'its stream completes');
    t.equal(sim.requests.length, upstreamCalls + 1, 'only the test key reached the upstream');

    const down = await fetch(`${gw.adminUrl}/readyz`);
    t.equal(down.status, 503, '/readyz reports the store unreachable');
    await down.text();

    await redis.start();
    const restartedAt = Date.now();
    await waitFor(async () => (await fetch(`${gw.adminUrl}/readyz`).then((r) => r.status)) === 200, 10_000, 'the gateway to reconnect', 50);
    t.comment(`gateway ready again ${Date.now() - restartedAt} ms after redis-server restarted`);

    // The restarted server is empty: a new key and a new grant, through the same running gateway.
    const again = await gw.createKey({ account: 'after', env: 'live' });
    await gw.grant('after', 1_000_000);
    const res = await chat(gw.url, again.key, streamBody({ tokens: 5 }));
    t.equal(res.status, 200, 'a live request is served again');
    t.equal(sseData(await res.text()).at(-1), '[DONE]');
    const id = res.headers.get('x-request-id')!;
    const entries = await waitFor(
      async () => {
        const all = await ledgerOf(gw.admin, 'after');
        return all.some((e) => e.kind === 'debit') && all;
      },
      1000,
      'the debit after the restart',
    );
    const acct = await accountOf(gw.admin, 'after');
    t.equal(acct.held_micros, 0);
    checkLedger(t, entries, acct, new Set([id]));
  });
}
