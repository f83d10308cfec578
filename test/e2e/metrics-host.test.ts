// server.metrics_host (issue 27): /metrics on an address of its own, so compose and Kubernetes can let
// Prometheus reach it without exposing /admin/ (METRICS_PORT used to bind on admin_host).
import t from 'tap';
import { compileConfig } from '../../src/config/schema.ts';
import { startGateway } from '../helpers/gateway.ts';

const doc = (server: Record<string, unknown>) => ({
  server,
  models: [{ name: 'm', price: { input: 1, output: 1 }, upstreams: [{ url: 'http://x/v1' }] }],
});

t.test('metrics_host defaults to the admin host; METRICS_HOST and the YAML field move it alone', async (t) => {
  t.equal(compileConfig(doc({ metrics_port: 9100 }), {}).server.metricsHost, '127.0.0.1');
  t.equal(compileConfig(doc({ metrics_port: 9100, admin_host: '10.0.0.1' }), {}).server.metricsHost, '10.0.0.1');
  t.equal(compileConfig(doc({ metrics_port: 9100 }), { ADMIN_HOST: '0.0.0.0' }).server.metricsHost, '0.0.0.0');
  const c = compileConfig(doc({ metrics_port: 9100, metrics_host: '0.0.0.0' }), {});
  t.same([c.server.adminHost, c.server.metricsHost], ['127.0.0.1', '0.0.0.0'], 'admin stays on loopback');
  t.equal(compileConfig(doc({ metrics_port: 9100 }), { METRICS_HOST: '::' }).server.metricsHost, '::');
});

t.test('the metrics listener binds metrics_host, the admin listener admin_host', async (t) => {
  const gw = await startGateway(t, { config: { server: { metrics_port: 0, metrics_host: '127.0.0.2', admin_host: '127.0.0.1' } } });
  t.match(gw.metricsUrl, /^http:\/\/127\.0\.0\.2:\d+$/);
  t.match(gw.adminUrl, /^http:\/\/127\.0\.0\.1:\d+$/);
  const m = await fetch(`${gw.metricsUrl}/metrics`);
  t.equal(m.status, 200);
  await m.arrayBuffer();
  const port = new URL(gw.adminUrl).port;
  await t.rejects(fetch(`http://127.0.0.2:${port}/healthz`), 'the admin listener is not on the metrics address');
});
