// The operator kit under deploy/ stays true to the gateway: every metric the Grafana dashboard and the
// alert rules query exists in a live gateway's /metrics; the rules pass promtool; the Kubernetes
// ConfigMap's config compiles with the real compiler, and probes, ports and the drain fit it; the
// compose file's listeners match Prometheus' targets.
import t from 'tap';
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { promisify } from 'node:util';
import { parseAllDocuments, parse } from 'yaml';
import { parseConfig } from '../../src/config/load.ts';
import { startGateway } from '../helpers/gateway.ts';
import { postChat, startSim } from '../e2e/chat-fixture.ts';

const root = new URL('../../deploy/', import.meta.url);
const read = (f: string) => readFileSync(new URL(f, root), 'utf8');
const run = promisify(execFile);

/** Metric names a PromQL text uses, histogram suffixes folded onto the histogram. */
function metricNames(text: string): Set<string> {
  return new Set([...text.matchAll(/\btollgate_[a-z0-9_]+/g)].map((m) => m[0].replace(/_(bucket|sum|count)$/, '')));
}

t.test('every metric the dashboard and the alerts query exists in a live gateway', async (t) => {
  const dashboard = JSON.parse(read('grafana/tollgate-dashboard.json')) as {
    panels: Array<{ title: string; targets: Array<{ expr: string }> }>;
  };
  const exprs = [...dashboard.panels.flatMap((p) => p.targets.map((x) => x.expr)), read('prometheus/alerts.yml')].join('\n');
  const used = metricNames(exprs);
  t.ok(used.size >= 15, `${used.size} metrics queried`);
  const sim = await startSim(t);
  const { createMetrics } = await import('../../src/obs/metrics.ts');
  const gw = await startGateway(t, { upstreamUrl: sim.url });
  const { key } = await gw.createKey({ account: 'dash', env: 'live' });
  await gw.grant('dash', 1_000_000);
  await (await postChat(gw, key, { model: 'sim-small', messages: [{ role: 'user', content: 'x' }] })).arrayBuffer();
  const exposed = new Set(
    [
      ...(await createMetrics().registry.metrics()).matchAll(/^# TYPE (\S+)/gm),
      ...(await (await fetch(`${gw.adminUrl}/metrics`)).text()).matchAll(/^# TYPE (\S+)/gm),
    ].map((m) => m[1]!),
  );
  for (const name of used) t.ok(exposed.has(name), `${name} is exposed`);
  const titles = dashboard.panels.map((p) => p.title.toLowerCase()).join(' | ');
  for (const topic of [
    'traffic',
    'error',
    'latency',
    'overhead',
    'tokens',
    'credit',
    'rate limited',
    'upstream',
    'in flight',
    'redis',
    'memory',
  ])
    t.match(titles, topic, `a panel on ${topic}`);
});

t.test('the alert rules pass promtool check rules', async (t) => {
  const promtool = await run('promtool', ['--version']).then(
    () => true,
    () => false,
  );
  if (!promtool) {
    if (process.env.CI === 'true') t.fail('promtool is missing (apt-get install -y prometheus)');
    else t.comment('SKIP: promtool not installed (Debian package prometheus)');
    return;
  }
  const { stdout } = await run('promtool', ['check', 'rules', new URL('prometheus/alerts.yml', root).pathname]);
  t.match(stdout, /SUCCESS: \d+ rules found/);
});

t.test('Kubernetes manifests: parse, config compiles, probes and ports match it, drain fits the grace period', async (t) => {
  const docs = parseAllDocuments(read('kubernetes/tollgate.yaml')).map((d) => d.toJS() as Record<string, any>);
  const kinds = docs.map((d) => d.kind);
  t.same(kinds, ['ConfigMap', 'Secret', 'Deployment', 'Service', 'PodDisruptionBudget', 'HorizontalPodAutoscaler', 'ServiceMonitor']);
  const [cm, secret, dep, svc] = docs as [any, any, any, any];
  const container = dep.spec.template.spec.containers[0];
  const env: Record<string, string> = { ...secret.stringData, TOLLGATE_ADMIN_TOKEN: 'X3I8tSxa72IlJ3Qdrh/SttlULQmRGyBK' };
  for (const e of container.env) env[e.name] = e.value;
  const config = parseConfig(cm.data['tollgate.yaml'], env);
  const ports = Object.fromEntries(container.ports.map((p: any) => [p.name, p.containerPort]));
  t.equal(ports.public, config.server.port);
  t.equal(ports.admin, config.server.adminPort);
  t.equal(ports.metrics, config.server.metricsPort);
  t.same(container.readinessProbe.httpGet, { path: '/readyz', port: config.server.adminPort });
  t.same(container.livenessProbe.httpGet, { path: '/healthz', port: config.server.adminPort });
  const preStop = Number(container.lifecycle.preStop.exec.command.at(-1));
  t.ok(
    preStop + config.server.drainSeconds < dep.spec.template.spec.terminationGracePeriodSeconds,
    'preStop + drain_seconds < terminationGracePeriodSeconds',
  );
  t.ok(env.TOLLGATE_ADMIN_TOKEN && 'REDIS_URL' in secret.stringData, 'secrets through the environment');
  for (const p of svc.spec.ports) t.ok(Object.values(ports).includes(p.targetPort), `service port ${p.name} targets a container port`);
  t.equal(docs[6]!.spec.endpoints[0].port, 'metrics');
});

t.test('compose: both gateways expose their metrics where Prometheus scrapes them', async (t) => {
  const compose = parse(read('compose.yaml')) as { services: Record<string, any> };
  const prom = parse(read('prometheus/prometheus.yml')) as { scrape_configs: Array<{ static_configs: Array<{ targets: string[] }> }> };
  const targets = prom.scrape_configs[0]!.static_configs[0]!.targets;
  for (const name of ['gateway-1', 'gateway-2']) {
    const g = compose.services[name]!;
    t.ok(targets.includes(`${name}:${g.environment.METRICS_PORT}`), `${name} scraped on its METRICS_PORT`);
    t.equal(g.environment.REDIS_URL, 'redis://redis:6379');
  }
  t.match(compose.services.redis.command.join(' '), /--appendonly yes.*--maxmemory-policy noeviction/);
  t.ok(
    compose.services.grafana.volumes.some((v: string) => v.includes('tollgate-dashboard.json')),
    'the dashboard is provisioned',
  );
});
