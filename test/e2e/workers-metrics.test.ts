// server.workers: the primary's summed /metrics stays monotonic when a worker stalls or dies. A stalled
// worker is summed with its last answered part, a dead one's counters and histograms stay in the sum
// (its gauges do not), so a summed counter never goes down: Prometheus' rate() and increase() would read
// the dip as a counter reset and count every total again. With server.metrics_port the primary itself
// listens on the metrics port, so no scrape is handed to a stalled worker (one that was hung).
import t from 'tap';
import { startRedis } from '../helpers/redis.ts';
import { waitFor } from '../helpers/wait.ts';
import { startSimulator } from '../../src/simulator/simulator.ts';
import { getFresh, spawnWorkers, stopOne, workerPids } from './workers-support.ts';
import { sample } from './chat-fixture.ts';
import { freePort } from '../helpers/ports.ts';

/** A scrape that must be answered 200 (9 s: the primary waits at most 3 s for a part). */
async function scrape(adminUrl: string): Promise<string> {
  const r = await getFresh(`${adminUrl}/metrics`, 9_000);
  if (r === 'hung' || r.status !== 200) throw new Error(`scrape: ${r === 'hung' ? 'hung' : r.status}`);
  return r.text;
}

/** The first scrape (one every 100 ms, for up to 10 s) in which no worker is missing. */
async function wholeScrape(adminUrl: string, what: string): Promise<string> {
  let text = '';
  await waitFor(async () => sample((text = await scrape(adminUrl)), 'tollgate_metrics_workers_missing') === 0, 10_000, what, 100);
  return text;
}

const redis = await startRedis(t);
if (redis) {
  const sim = await startSimulator();
  t.teardown(() => sim.close());

  t.test('a stalled worker, then its death and replacement: summed counters never go down', async (t) => {
    const gw = await spawnWorkers(t, redis.url, sim.url);
    // Requests on fresh connections: node:cluster deals them round robin, so each worker counts ~20.
    for (let i = 0; i < 40; i++) await getFresh(`${gw.adminUrl}/healthz`, 2_000);
    await wholeScrape(gw.adminUrl, 'a scrape with both workers');
    const whole = await scrape(gw.adminUrl);
    t.equal(sample(whole, 'tollgate_metrics_workers_missing'), 0, 'both workers answer');
    const total = (text: string) => sample(text, 'tollgate_requests_total');
    const maxFds = sample(whole, 'tollgate_process_max_fds');
    t.ok(total(whole) >= 40, `requests counted: ${total(whole)}`);

    // Stopped: every later connection goes to the live worker (the stopped one keeps the one it was handed).
    const stuck = await stopOne(gw);
    const stalled = await scrape(gw.adminUrl);
    t.equal(sample(stalled, 'tollgate_metrics_workers_missing'), 1, 'the stopped worker did not answer');
    // Without its last part the sum lost its ~20 requests: a dip rate() reads as a reset.
    t.ok(total(stalled) >= total(whole), `the sum does not go down while it is stalled: ${total(whole)} → ${total(stalled)}`);

    // Dead and replaced: the replacement starts from 0, the dead worker's counters stay in the sum.
    process.kill(stuck, 'SIGKILL');
    await waitFor(() => workerPids(gw.output()).length === 3, 20_000, 'a replacement to listen', 100);
    const replaced = await wholeScrape(gw.adminUrl, 'a scrape with both live workers');
    t.ok(total(replaced) >= total(stalled), `the sum does not go down after the replacement: ${total(stalled)} → ${total(replaced)}`);
    t.ok(
      sample(replaced, 'tollgate_process_cpu_seconds_total') >= sample(whole, 'tollgate_process_cpu_seconds_total'),
      "the dead worker's CPU seconds stay in the sum",
    );
    // A gauge (summed over the live workers, the same in each process): the dead worker's is not kept.
    t.equal(sample(replaced, 'tollgate_process_max_fds'), maxFds, "the dead worker's gauges are dropped");
    gw.child.kill('SIGTERM');
    t.same(await gw.exited, { code: 0, signal: null });
  });

  t.test('a worker killed between scrapes and replaced: summed counters never go down', async (t) => {
    const gw = await spawnWorkers(t, redis.url, sim.url);
    for (let i = 0; i < 40; i++) await getFresh(`${gw.adminUrl}/healthz`, 2_000);
    const whole = await wholeScrape(gw.adminUrl, 'a scrape with both workers');
    const total = (text: string) => sample(text, 'tollgate_requests_total');
    process.kill(workerPids(gw.output())[0]!, 'SIGKILL');
    await waitFor(() => workerPids(gw.output()).length === 3, 20_000, 'a replacement to listen', 100);
    const replaced = await wholeScrape(gw.adminUrl, 'a scrape with both live workers');
    // Without the dead worker's last part the sum lost its ~20 requests: a dip rate() reads as a reset.
    t.ok(total(replaced) >= total(whole), `the sum does not go down: ${total(whole)} → ${total(replaced)}`);
    t.equal(
      sample(replaced, 'tollgate_process_max_fds'),
      sample(whole, 'tollgate_process_max_fds'),
      "the dead worker's gauges are dropped",
    );
    gw.child.kill('SIGTERM');
    t.same(await gw.exited, { code: 0, signal: null });
  });

  t.test('metrics_port with workers: the primary answers it, a stalled worker hangs no scrape', async (t) => {
    const port = await freePort();
    const gw = await spawnWorkers(t, redis.url, sim.url, { server: { metrics_port: port } });
    const metricsUrl = `http://127.0.0.1:${port}`;
    await waitFor(async () => (await getFresh(`${metricsUrl}/metrics`, 5_000)) !== 'hung', 10_000, 'the metrics listener', 100);
    const ok = await fetch(`${metricsUrl}/metrics`, { signal: AbortSignal.timeout(5_000) });
    t.equal(ok.status, 200);
    t.equal(ok.headers.get('content-type'), 'text/plain; version=0.0.4; charset=utf-8');
    t.match(ok.headers.get('x-request-id'), /^req_/);
    const text = await ok.text();
    t.equal(sample(text, 'tollgate_metrics_workers_missing'), 0, "every worker's part");
    t.ok(sample(text, 'tollgate_requests_total', { route: '/metrics' }) >= 1, 'scrapes of the metrics port are counted');
    const other = await fetch(`${metricsUrl}/healthz`, { signal: AbortSignal.timeout(5_000) });
    t.equal(other.status, 404, 'nothing but /metrics on the metrics port');
    t.match(await other.json(), { error: { code: 'not_found' } });

    // Stopped, not handed anything first: a connection node:cluster gave it would hang until it is killed.
    const stuck = workerPids(gw.output())[0]!;
    process.kill(stuck, 'SIGSTOP');
    const scrapes = await Promise.all(Array.from({ length: 6 }, () => getFresh(`${metricsUrl}/metrics`, 8_000)));
    for (const r of scrapes) {
      t.not(r, 'hung', 'answered');
      if (r === 'hung') continue;
      t.equal(r.status, 200);
      t.ok(r.ms < 6_000, `in ${r.ms} ms (the primary waits 3 s for the stopped worker's part)`);
      t.equal(sample(r.text, 'tollgate_metrics_workers_missing'), 1, 'the stopped worker is missing');
    }
    process.kill(stuck, 'SIGCONT');
    gw.child.kill('SIGTERM');
    t.same(await gw.exited, { code: 0, signal: null });
  });
}
