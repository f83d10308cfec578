// server.workers: a worker whose event loop runs nothing (SIGSTOP here; an endless loop or sync work that
// never ends looks the same from outside) answers no ping from the primary: /readyz says so within a few
// seconds, the worker is killed and replaced within the stall bound, and the gateway is whole again.
import t from 'tap';
import { request } from 'node:http';
import { startRedis } from '../helpers/redis.ts';
import { waitFor } from '../helpers/wait.ts';
import { startSimulator } from '../../src/simulator/simulator.ts';
import { spawnGateway } from './credit-support.ts';

/** GET on a fresh connection (node:cluster hands it to the next worker); 'hung' if no answer in 1 s. */
function getFresh(url: string): Promise<number | 'hung'> {
  return new Promise((resolve) => {
    const req = request(url, { agent: false }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode!));
    });
    req.setTimeout(1_000, () => {
      req.destroy();
      resolve('hung');
    });
    req.on('error', () => resolve('hung'));
    req.end();
  });
}

function workerPids(out: string): number[] {
  return out
    .split('\n')
    .filter((l) => l.includes('"msg":"worker listening"'))
    .map((l) => (JSON.parse(l) as { pid: number }).pid);
}

const redis = await startRedis(t);
if (redis) {
  const sim = await startSimulator();
  t.teardown(() => sim.close());

  t.test('a stopped worker: /readyz says not ready, the worker is killed and replaced, all is well again', async (t) => {
    const gw = await spawnGateway(t, {
      redisUrl: redis.url,
      upstreamUrl: sim.url,
      config: { server: { workers: 2 } },
      readyTimeoutMs: 20_000,
    });
    t.teardown(() => {
      for (const pid of workerPids(gw.output())) {
        try {
          process.kill(pid, 'SIGKILL');
        } catch {
          // already gone
        }
      }
    });
    await waitFor(async () => (await getFresh(`${gw.adminUrl}/readyz`)) === 200, 20_000, 'every worker to listen', 100);
    await waitFor(() => workerPids(gw.output()).length === 2, 5_000, 'both workers logged as listening');
    const [stuck] = workerPids(gw.output());
    process.kill(stuck!, 'SIGSTOP');
    const stoppedAt = Date.now();

    // Asked on fresh connections: the stopped worker's hang; the other's must say not ready.
    await waitFor(async () => (await getFresh(`${gw.adminUrl}/readyz`)) === 503, 8_000, '/readyz to say 503', 100);
    t.pass(`/readyz not ready ${Date.now() - stoppedAt} ms after the stop`);

    await waitFor(() => gw.output().includes('"msg":"worker not answering: killing it"'), 20_000, 'the stalled worker to be killed', 100);
    const killedAfter = Date.now() - stoppedAt;
    t.ok(killedAfter >= 9_000, `not before the stall bound (${killedAfter} ms)`);
    await waitFor(() => workerPids(gw.output()).length === 3, 20_000, 'a replacement to listen', 100);
    await waitFor(async () => (await getFresh(`${gw.adminUrl}/readyz`)) === 200, 10_000, 'ready again', 100);
    const after = await Promise.all(Array.from({ length: 6 }, () => getFresh(`${gw.adminUrl}/healthz`)));
    t.same([...new Set(after)], [200], 'every connection answered again');
    const metrics = await fetch(`${gw.adminUrl}/metrics`, { signal: AbortSignal.timeout(3_000) });
    t.equal(metrics.status, 200, '/metrics answers again');
    await metrics.text();
    gw.child.kill('SIGTERM');
    t.same(await gw.exited, { code: 0, signal: null });
  });
}
