// The request log of a real `node src/main.ts` (SPEC §7): lines are batched for speed, yet a single
// request on a quiet gateway is on stdout within the periodic flush (1 s), carries its request id and
// status, and never the presented key.
import t from 'tap';
import { startRedis } from '../helpers/redis.ts';
import { startSimulator } from '../../src/simulator/simulator.ts';
import { LOG_FLUSH_MS } from '../../src/obs/logger.ts';
import { spawnGateway } from './credit-support.ts';
import { waitFor } from '../helpers/wait.ts';

const redis = await startRedis(t);
if (redis) {
  const sim = await startSimulator();
  t.teardown(() => sim.close());

  t.test('one request on a quiet gateway is logged within the flush interval, without its key', async (t) => {
    const gw = await spawnGateway(t, { redisUrl: redis.url, upstreamUrl: sim.url });
    // A well-formed key that does not exist: 401, and the line must not carry it.
    const key = 'svc-live-' + 'Zq7'.repeat(14);
    const res = await fetch(`${gw.url}/v1/models`, { headers: { authorization: `Bearer ${key}` } });
    t.equal(res.status, 401);
    const requestId = res.headers.get('x-request-id')!;
    t.match(requestId, /^req_/);
    // Far below the 4 KiB batch: only the periodic flush can bring it out (waitUntil fails the test after
    // the flush interval plus scheduling slack).
    const line = await waitFor(
      () =>
        gw
          .output()
          .split('\n')
          .find((l) => l.includes(requestId)),
      LOG_FLUSH_MS * 3,
      'the request line on stdout',
    );
    const entry = JSON.parse(line) as Record<string, unknown>;
    t.match(entry, { msg: 'request', request_id: requestId, status: 401, route: '/v1/models', error_code: 'invalid_api_key' });
    t.notOk(gw.output().includes(key), 'the presented key is nowhere in the output');
    t.notOk(gw.output().includes(key.slice(9)), 'nor its secret part');
  });
}
