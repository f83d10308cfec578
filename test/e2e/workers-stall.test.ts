// server.workers: a worker whose event loop runs nothing (SIGSTOP here; an endless loop or sync work that
// never ends looks the same from outside) answers no ping from the primary: /readyz says so within a few
// seconds, the worker is killed and replaced within the stall bound, and the gateway is whole again.
// Meanwhile /metrics answers with the other worker's metrics and counts the stalled one missing, and a
// worker that dies mid-scrape does not fail the scrape.
import t from 'tap';
import { setTimeout as sleep } from 'node:timers/promises';
import { startRedis } from '../helpers/redis.ts';
import { waitFor } from '../helpers/wait.ts';
import { startSimulator } from '../../src/simulator/simulator.ts';
import { getFresh, spawnWorkers, stopOne, workerPids } from './workers-support.ts';
import { sample } from './chat-fixture.ts';

/** The status of a GET on a fresh connection (node:cluster hands it to the next worker); 'hung' if no answer in 1 s. */
async function statusOf(url: string): Promise<number | 'hung'> {
  const r = await getFresh(url, 1_000);
  return r === 'hung' ? r : r.status;
}

/** GET /metrics on a fresh connection, with its status, body and time; 'hung' if no answer in 9 s. */
function scrape(adminUrl: string): Promise<{ status: number; text: string; ms: number } | 'hung'> {
  return getFresh(`${adminUrl}/metrics`, 9_000);
}

const redis = await startRedis(t);
if (redis) {
  const sim = await startSimulator();
  t.teardown(() => sim.close());

  t.test('a stopped worker: /readyz says not ready, the worker is killed and replaced, all is well again', async (t) => {
    const gw = await spawnWorkers(t, redis.url, sim.url);
    const [stuck] = workerPids(gw.output());
    process.kill(stuck!, 'SIGSTOP');
    const stoppedAt = Date.now();

    // Asked on fresh connections: the stopped worker's hang; the other's must say not ready.
    await waitFor(async () => (await statusOf(`${gw.adminUrl}/readyz`)) === 503, 8_000, '/readyz to say 503', 100);
    t.pass(`/readyz not ready ${Date.now() - stoppedAt} ms after the stop`);

    await waitFor(() => gw.output().includes('"msg":"worker not answering: killing it"'), 20_000, 'the stalled worker to be killed', 100);
    const killedAfter = Date.now() - stoppedAt;
    t.ok(killedAfter >= 9_000, `not before the stall bound (${killedAfter} ms)`);
    await waitFor(() => workerPids(gw.output()).length === 3, 20_000, 'a replacement to listen', 100);
    await waitFor(async () => (await statusOf(`${gw.adminUrl}/readyz`)) === 200, 10_000, 'ready again', 100);
    const after = await Promise.all(Array.from({ length: 6 }, () => statusOf(`${gw.adminUrl}/healthz`)));
    t.same([...new Set(after)], [200], 'every connection answered again');
    const metrics = await fetch(`${gw.adminUrl}/metrics`, { signal: AbortSignal.timeout(3_000) });
    t.equal(metrics.status, 200, '/metrics answers again');
    await metrics.text();
    gw.child.kill('SIGTERM');
    t.same(await gw.exited, { code: 0, signal: null });
  });

  t.test('a stopped worker: /metrics answers 200 with the other worker and counts it missing', async (t) => {
    const gw = await spawnWorkers(t, redis.url, sim.url);
    const before = await scrape(gw.adminUrl);
    t.ok(before !== 'hung' && before.status === 200, 'both workers answer');
    if (before === 'hung') return;
    t.match(before.text, /^# TYPE tollgate_metrics_workers_missing gauge$/m, 'the gauge is exported');
    t.equal(sample(before.text, 'tollgate_metrics_workers_missing'), 0, 'no worker missing');

    const stuck = await stopOne(gw);
    const during = await scrape(gw.adminUrl);
    t.not(during, 'hung', 'the scrape is answered');
    if (during === 'hung') return;
    // A scrape that waits for every worker (prom-client's clusterMetrics()) fails here: 500 after 5 s.
    t.equal(during.status, 200, `answered 200 in ${during.ms} ms (the primary waits 3 s for a part)`);
    t.equal(sample(during.text, 'tollgate_metrics_workers_missing'), 1, 'the stopped worker is counted missing');
    t.match(during.text, /^tollgate_requests_total\{/m, "the live worker's counters are there");
    await waitFor(() => gw.output().includes('"msg":"metrics scrape without every worker"'), 5_000, 'the missing worker to be logged', 50);

    // Continued before the stall bound (or killed and replaced after it): the scrape is whole again.
    process.kill(stuck, 'SIGCONT');
    await waitFor(
      async () => {
        const r = await scrape(gw.adminUrl);
        return r !== 'hung' && r.status === 200 && r.text.includes('\ntollgate_metrics_workers_missing 0\n');
      },
      20_000,
      'a scrape with every worker',
      100,
    );
    gw.child.kill('SIGTERM');
    t.same(await gw.exited, { code: 0, signal: null });
  });

  t.test('a worker that dies mid-scrape: /metrics answers 200 without it', async (t) => {
    const gw = await spawnWorkers(t, redis.url, sim.url);
    const stuck = await stopOne(gw);
    const pending = scrape(gw.adminUrl);
    // Not an event to wait for: a point inside the scrape, which waits 3 s for the stopped worker's part.
    await sleep(1_000);
    process.kill(stuck, 'SIGKILL');
    const r = await pending;
    t.not(r, 'hung', 'the scrape is answered');
    if (r === 'hung') return;
    // A scrape that waits for the dead worker's part (prom-client's clusterMetrics()) fails: 500 after 5 s.
    t.equal(r.status, 200, `answered 200 in ${r.ms} ms`);
    t.equal(sample(r.text, 'tollgate_metrics_workers_missing'), 1, 'the dead worker is counted missing');
    await waitFor(() => gw.output().includes('"why":"exited"'), 5_000, "the scrape to log the worker's exit", 50);
    await waitFor(() => workerPids(gw.output()).length === 3, 20_000, 'a replacement to listen', 100);
    gw.child.kill('SIGTERM');
    t.same(await gw.exited, { code: 0, signal: null });
  });
}
