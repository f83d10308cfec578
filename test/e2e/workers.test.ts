// server.workers (SPEC §11): node:cluster workers share the public and admin ports of one
// `node src/main.ts`; /metrics sums every worker, /readyz waits for every worker, a dead worker is
// replaced while the others serve, and SIGTERM drains the streams of every worker and settles them.
import t from 'tap';
import { request } from 'node:http';
import { startRedis } from '../helpers/redis.ts';
import { startGateway } from '../helpers/gateway.ts';
import { waitFor } from '../helpers/wait.ts';
import { startSimulator } from '../../src/simulator/simulator.ts';
import { compileConfig } from '../../src/config/schema.ts';
import { ConfigError } from '../../src/config/errors.ts';
import { accountOf, chat, checkLedger, ledgerOf, streamBody } from './credit-support.ts';
import { spawnWorkers, workerPids } from './workers-support.ts';
import { sample, sseData } from './chat-fixture.ts';

/** GET on a fresh connection (no keep-alive), so node:cluster hands each request to the next worker. */
function getFresh(url: string, key: string): Promise<number> {
  return new Promise((resolve, reject) => {
    request(url, { agent: false, timeout: 5_000, headers: { authorization: `Bearer ${key}` } }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode!));
    })
      .on('error', reject)
      .on('timeout', function (this: import('node:http').ClientRequest) {
        this.destroy(new Error('no answer in 5 s'));
      })
      .end();
  });
}

t.test('the embedded store refuses workers > 1, naming the field', async (t) => {
  const doc = { server: { workers: 2 }, models: [{ name: 'm', price: { input: 1, output: 1 }, upstreams: [{ url: 'http://x/v1' }] }] };
  const err = (() => {
    try {
      compileConfig(doc, {});
    } catch (e) {
      return e;
    }
  })();
  t.ok(err instanceof ConfigError, 'a config error');
  t.match((err as Error).message, /server\.workers: is 2, but the embedded store lives inside one process/);
  t.equal(compileConfig(doc, { REDIS_URL: 'redis://127.0.0.1:1' }).server.workers, 2);
  t.ok(
    compileConfig({ ...doc, server: { workers: 'auto' } }, { REDIS_URL: 'redis://x' }).server.workers >= 1,
    'auto = the cores available',
  );
  t.equal(
    compileConfig(doc, { REDIS_URL: 'redis://x', TOLLGATE_WORKERS: '3' }).server.workers,
    3,
    'TOLLGATE_WORKERS (tollgate serve --workers) wins',
  );
});

const redis = await startRedis(t);
if (redis) {
  const sim = await startSimulator();
  t.teardown(() => sim.close());
  const admin = await startGateway(t, { redisUrl: redis.url, upstreamUrl: sim.url });

  t.test('two workers serve one port; /metrics sums them; a killed worker is replaced while the other serves', async (t) => {
    const gw = await spawnWorkers(t, redis.url, sim.url);
    const ready = (await (await fetch(`${gw.adminUrl}/readyz`)).json()) as { workers: string };
    t.equal(ready.workers, 'all listening');

    // A live key: no rate limit by default, and a zero balance may still list models.
    const { key } = await admin.createKey({ account: 'workers', env: 'live' });
    const N = 40;
    const statuses = await Promise.all(Array.from({ length: N }, () => getFresh(`${gw.url}/v1/models`, key)));
    t.same([...new Set(statuses)], [200], 'every worker answers');
    // Pino batches request lines up to 1 s: wait until both workers logged some of them.
    const served = () =>
      new Set(
        gw
          .output()
          .split('\n')
          .filter((l) => l.includes('"route":"/v1/models"'))
          .map((l) => (JSON.parse(l) as { worker: number }).worker),
      );
    await waitFor(() => served().size === 2, 5_000, 'request lines from both workers');
    const text = await (await fetch(`${gw.adminUrl}/metrics`)).text();
    t.equal(
      sample(text, 'tollgate_requests_total', { route: '/v1/models', status: '200' }),
      N,
      'the counter equals the requests sent, summed over workers',
    );
    t.equal(
      text.split('\n').filter((l) => l.startsWith('# TYPE tollgate_request_duration_seconds ')).length,
      1,
      'one histogram, merged, not one per worker',
    );
    t.equal(sample(text, 'tollgate_request_duration_seconds_count', { route: '/v1/models' }), N, 'histogram counts merged');

    // The primary's lines are batched too (up to 1 s).
    await waitFor(() => workerPids(gw.output()).length === 2, 5_000, 'both workers to be logged as listening');
    const [first, second] = workerPids(gw.output());
    t.ok(first && second, 'two workers listened');
    process.kill(first!, 'SIGKILL');
    await waitFor(() => gw.output().includes('"msg":"worker died; starting a replacement"'), 5_000, 'the death to be logged');
    // The other worker keeps serving while the replacement boots.
    const during = await Promise.all(Array.from({ length: 10 }, () => getFresh(`${gw.url}/v1/models`, key)));
    t.same([...new Set(during)], [200], 'served throughout');
    await waitFor(() => workerPids(gw.output()).length === 3, 15_000, 'a replacement worker');
    await waitFor(async () => (await fetch(`${gw.adminUrl}/readyz`)).status === 200, 15_000, 'ready again');
    gw.child.kill('SIGTERM');
    t.same(await gw.exited, { code: 0, signal: null });
  });

  t.test('SIGTERM drains a stream on each worker, settles both, exits 0', async (t) => {
    const { key } = await admin.createKey({ account: 'wdrain', env: 'live' });
    await admin.grant('wdrain', 1_000_000);
    const gw = await spawnWorkers(t, redis.url, sim.url);
    // Streams of 40 × 25 ms on separate connections: round-robin puts them on both workers.
    const streams = await Promise.all(Array.from({ length: 4 }, () => chat(gw.url, key, streamBody({ tokens: 40, delay_ms: 25 }))));
    const bodies = streams.map((r) => r.text());
    await new Promise((r) => setTimeout(r, 200));
    gw.child.kill('SIGTERM');
    for (const b of await Promise.all(bodies)) {
      const data = sseData(b);
      t.equal(data.at(-1), '[DONE]', 'the stream finished');
      t.equal(data.filter((d) => d.includes('"content":"tok')).length, 40, 'every token arrived');
    }
    t.same(await gw.exited, { code: 0, signal: null });
    const draining = new Set(
      gw
        .output()
        .split('\n')
        .filter((l) => l.includes('"msg":"draining"'))
        .map((l) => (JSON.parse(l) as { worker: number }).worker),
    );
    t.equal(draining.size, 2, 'both workers drained');
    const entries = await ledgerOf(admin.admin, 'wdrain');
    t.equal(entries.filter((e) => e.kind === 'debit').length, 4, 'every stream settled once');
    checkLedger(t, entries, await accountOf(admin.admin, 'wdrain'));
  });
}
