// A gateway booted while no Redis Cluster node is reachable (audit-deploy #1): it used to wait for ever on
// the invalidation SUBSCRIBE in ioredis' offline queue and never listened. It must boot as on a single
// node (SPEC §5): /healthz 200, /readyz not ready, keys answered 503 store_unavailable; and once a cluster
// comes up on those addresses it is used, invalidations from another instance included.
import t from 'tap';
import { startRedisCluster } from '../helpers/redis-cluster.ts';
import { startGateway, type TestGateway } from '../helpers/gateway.ts';
import { freePort } from '../helpers/ports.ts';
import { waitFor } from '../helpers/wait.ts';
import { postChat, startSim } from '../e2e/chat-fixture.ts';
import { generateKey } from '../../src/auth/keys.ts';

const ports: number[] = [];
for (let i = 0; i < 6; i++) ports.push(await freePort());
const sim = await startSim(t);
const config = { store: { cluster_nodes: ports.map((p) => `127.0.0.1:${p}`), command_timeout_ms: 1000 } };
const body = { model: 'sim-small', messages: [{ role: 'user', content: 'hello' }], max_tokens: 16, sim: { tokens: 8 } };

// Started in the first test and kept for the second: its teardown is the file's.
let a: TestGateway | undefined;
t.test('with every cluster node down, the gateway boots and answers per SPEC §5', async (st) => {
  const t0 = Date.now();
  // Bounded: before the fix this never resolved.
  a = await Promise.race([
    startGateway(t, { upstreamUrl: sim.url, config }),
    new Promise<never>((_, reject) => setTimeout(() => reject(new Error('the gateway did not boot within 10 s')), 10_000).unref()),
  ]);
  st.pass(`booted in ${Date.now() - t0} ms`);
  st.equal((await fetch(`${a.adminUrl}/healthz`)).status, 200, '/healthz 200: alive');
  const ready = await fetch(`${a.adminUrl}/readyz`);
  st.equal(ready.status, 503, '/readyz: not ready');
  await ready.arrayBuffer();
  for (const env of ['live', 'test'] as const) {
    const r = await postChat(a, generateKey(env), body);
    st.equal(r.status, 503, `${env} key: 503`);
    st.match(await r.json(), { error: { code: 'store_unavailable' } }, `${env} key: store_unavailable`);
  }
});

t.test('a cluster started later on those addresses is picked up, pub/sub included', async (st) => {
  if (!a) return st.fail('no gateway');
  const gw = a;
  const cluster = await startRedisCluster(t, { ports });
  if (!cluster) return;
  await waitFor(async () => (await fetch(`${gw.adminUrl}/readyz`)).status === 200, 30_000, '/readyz 200 on the late cluster', 200);
  st.pass('ready once the cluster is up');
  const { key } = await gw.createKey({ account: 'late', env: 'live' });
  await gw.grant('late', 1_000_000);
  const r = await postChat(gw, key, body);
  st.equal(r.status, 200, 'a live key is served');
  await r.arrayBuffer();
  // The subscription was made when the cluster became ready: a disable on another instance reaches A.
  const b = await startGateway(st, { upstreamUrl: sim.url, config });
  const { key: k2, id } = await b.createKey({ account: 'late', env: 'test' });
  st.equal((await fetch(`${gw.url}/v1/models`, { headers: gw.auth(k2) })).status, 200, 'cached by A');
  st.equal((await b.admin(`/admin/keys/${id}`, { method: 'PATCH', body: { active: false } })).status, 200);
  await waitFor(
    async () => (await fetch(`${gw.url}/v1/models`, { headers: gw.auth(k2) })).status === 401,
    2000,
    'A to refuse the key disabled on B (invalidation, well before the 10 s cache TTL)',
  );
  st.pass('A heard the invalidation');
});
