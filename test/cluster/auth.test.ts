// Cluster node URLs with a password and TLS (audit-deploy #2): `redis://:pw@host:port` nodes kept only
// host and port (NOAUTH on a password-protected cluster; `rediss://` silently without TLS), and the
// unreachable-store warning logged the node strings, password included.
import t from 'tap';
import type { Cluster } from 'ioredis';
import { startRedisCluster } from '../helpers/redis-cluster.ts';
import { startGateway } from '../helpers/gateway.ts';
import { freePort } from '../helpers/ports.ts';
import { waitFor } from '../helpers/wait.ts';
import { postChat, startSim } from '../e2e/chat-fixture.ts';
import { compileConfig } from '../../src/config/schema.ts';
import { storeAddress } from '../../src/obs/boot-report.ts';
import { createRedisClient } from '../../src/store/redis-store.ts';

const PASSWORD = 'cl-S3cret-pw';
const doc = { models: [{ name: 'm', price: { input: 1, output: 1 }, upstreams: [{ url: 'http://x/v1' }] }] };
const body = { model: 'sim-small', messages: [{ role: 'user', content: 'hello' }], max_tokens: 16, sim: { tokens: 8 } };

t.test('a password-protected cluster works with redis://:pw@host:port nodes; no log line holds the password', async (t) => {
  const cluster = await startRedisCluster(t, { password: PASSWORD });
  if (!cluster) return;
  const sim = await startSim(t);
  const nodes = cluster.addresses.map((a) => `redis://:${PASSWORD}@${a}`);
  const gw = await startGateway(t, { upstreamUrl: sim.url, config: { store: { cluster_nodes: nodes, command_timeout_ms: 1000 } } });
  await waitFor(async () => (await fetch(`${gw.adminUrl}/readyz`)).status === 200, 10_000, '/readyz 200', 100);
  const { key } = await gw.createKey({ account: 'pw', env: 'live' });
  await gw.grant('pw', 1_000_000);
  const r = await postChat(gw, key, body);
  t.equal(r.status, 200, 'a live key is served: every node was authenticated');
  await r.arrayBuffer();
  t.notMatch(gw.logs.join('\n'), PASSWORD, 'no log line holds the password');
});

t.test('an unreachable cluster is logged and reported by host:port only', async (t) => {
  const ports = [await freePort(), await freePort()];
  const nodes = ports.map((p) => `redis://user1:${PASSWORD}@127.0.0.1:${p}`);
  const config = compileConfig(doc, { REDIS_CLUSTER_NODES: nodes.join(',') });
  t.equal(storeAddress(config), ports.map((p) => `127.0.0.1:${p}`).join(','));
  t.equal(storeAddress(compileConfig(doc, { REDIS_CLUSTER_NODES: `rediss://:${PASSWORD}@h:7000` })), 'rediss://h:7000');
  const gw = await startGateway(t, { config: { store: { cluster_nodes: nodes, command_timeout_ms: 300 } } });
  await waitFor(() => gw.logs.some((l) => l.includes('is unreachable')), 5000, 'the unreachable warning');
  const line = gw.logs.find((l) => l.includes('is unreachable'))!;
  t.match(line, `Redis at 127.0.0.1:${ports[0]},127.0.0.1:${ports[1]} is unreachable`);
  t.notMatch(gw.logs.join('\n'), PASSWORD, 'no log line holds the password');
  t.notMatch(gw.logs.join('\n'), 'user1:', 'nor the user:password pair');
});

t.test('the nodes must agree on user, password and TLS; the error never shows a password', async (t) => {
  for (const [list, why] of [
    [`redis://:${PASSWORD}@a:1,redis://:other-pw@b:2`, /node 2 has other credentials than node 1/],
    [`redis://:${PASSWORD}@a:1,b:2`, /node 2 has other credentials than node 1/],
    [`redis://u1:${PASSWORD}@a:1,redis://u2:${PASSWORD}@b:2`, /node 2 has other credentials than node 1/],
    [`rediss://:${PASSWORD}@a:1,redis://:${PASSWORD}@b:2`, /node 2 is not rediss:\/\/ \(TLS\) and node 1 is/],
    [`http://:${PASSWORD}@a:1`, /node 1 must be host:port, redis:\/\/… or rediss:\/\/… \(TLS\); got a value starting "http:"/],
  ] as const) {
    const err = t.throws(
      () => compileConfig(doc, { REDIS_CLUSTER_NODES: list }),
      /^config: REDIS_CLUSTER_NODES \(environment\): /,
    ) as Error;
    t.match(err?.message, why, list);
    t.notMatch(err?.message, PASSWORD, 'the message has no password');
    t.notMatch(err?.message, 'other-pw');
  }
  t.throws(
    () => compileConfig({ ...doc, store: { cluster_nodes: ['redis://:a@h:1', 'redis://:b@h:2'] } }, {}),
    /^config: store\.cluster_nodes: node 2 has other credentials/,
  );
  t.equal(compileConfig(doc, { REDIS_CLUSTER_NODES: `redis://:${PASSWORD}@a:1, redis://:${PASSWORD}@b:2` }).store.clusterNodes.length, 2);
});

t.test('rediss:// nodes connect with TLS, with their user and password', async (t) => {
  const c = createRedisClient({
    clusterNodes: [`rediss://ops:${PASSWORD}@10.0.0.1:7000`, `rediss://ops:${PASSWORD}@10.0.0.2:7001`],
    commandTimeoutMs: 500,
  }) as Cluster;
  t.teardown(() => c.disconnect());
  t.match(c.options.redisOptions, { username: 'ops', password: PASSWORD, tls: {} });
  t.same((c as unknown as { startupNodes: unknown[] }).startupNodes, [
    { host: '10.0.0.1', port: 7000 },
    { host: '10.0.0.2', port: 7001 },
  ]);
  const plain = createRedisClient({ clusterNodes: ['127.0.0.1:7000'], commandTimeoutMs: 500 }) as Cluster;
  t.teardown(() => plain.disconnect());
  t.notOk(plain.options.redisOptions?.tls, 'host:port: no TLS');
  t.notOk(plain.options.redisOptions?.password, 'and no password');
});
