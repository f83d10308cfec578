// A child gateway with server.workers: 2 on Redis, for the worker tests (workers*.test.ts). Beside
// spawnGateway (credit-support.ts), which it builds on; test/helpers has no child-process gateway.
import { request } from 'node:http';
import { waitFor } from '../helpers/wait.ts';
import { spawnGateway, type ChildGateway } from './credit-support.ts';

/** The pids of the workers that said they listen, in the order they did. */
export function workerPids(out: string): number[] {
  return out
    .split('\n')
    .filter((l) => l.includes('"msg":"worker listening"'))
    .map((l) => (JSON.parse(l) as { pid: number }).pid);
}

/** GET on a fresh connection (node:cluster hands it to the next worker); 'hung' if no answer in `ms`. */
export function getFresh(url: string, ms: number): Promise<{ status: number; text: string; ms: number } | 'hung'> {
  const start = Date.now();
  return new Promise((resolve) => {
    const req = request(url, { agent: false }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (text += c));
      res.on('end', () => resolve({ status: res.statusCode!, text, ms: Date.now() - start }));
    });
    req.setTimeout(ms, () => {
      req.destroy();
      resolve('hung');
    });
    req.on('error', () => resolve('hung'));
    req.end();
  });
}

/**
 * Two workers on Redis, both listening (/readyz 200 on a fresh connection, both logged as listening);
 * `config` is merged per section, `server.workers` is 2. At teardown the workers are continued and
 * killed even if the primary is gone (a test may have stopped one with SIGSTOP).
 */
export async function spawnWorkers(
  t: { teardown(fn: () => unknown): void },
  redisUrl: string,
  upstreamUrl: string,
  config: Record<string, Record<string, unknown>> = {},
): Promise<ChildGateway & { pids(): number[] }> {
  const gw = await spawnGateway(t, {
    redisUrl,
    upstreamUrl,
    config: { ...config, server: { workers: 2, ...config.server } },
    // Three processes booting on a busy 2-core box.
    readyTimeoutMs: 20_000,
  });
  t.teardown(() => {
    for (const pid of workerPids(gw.output())) {
      try {
        process.kill(pid, 'SIGCONT');
        process.kill(pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
  });
  const ready = async () => {
    const r = await getFresh(`${gw.adminUrl}/readyz`, 1_000);
    return r !== 'hung' && r.status === 200;
  };
  await waitFor(ready, 20_000, 'every worker to listen', 100);
  await waitFor(() => workerPids(gw.output()).length === 2, 20_000, 'both workers logged as listening', 100);
  return { ...gw, pids: () => workerPids(gw.output()) };
}

/**
 * Stops a worker and takes the one connection node:cluster then hands it (it stays busy with it, so
 * every later connection goes to the other worker): the next fresh request reaches the live worker.
 * Returns the stopped worker's pid.
 */
export async function stopOne(gw: ChildGateway): Promise<number> {
  const [stuck] = workerPids(gw.output());
  process.kill(stuck!, 'SIGSTOP');
  // Two connections at once: if the stopped worker was still on the primary's free list it takes one of
  // them (and is never free again); one at a time, the first may go to the live worker and leave the
  // stopped one first in line for the scrape (a flake seen under load).
  const healthz = () => getFresh(`${gw.adminUrl}/healthz`, 1_000);
  await Promise.all([healthz(), healthz()]);
  const answered = async () => {
    const r = await healthz();
    return r !== 'hung' && r.status === 200;
  };
  await waitFor(answered, 5_000, 'a connection the live worker answers', 10);
  return stuck!;
}
