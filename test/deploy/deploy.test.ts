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
    'lease',
  ])
    t.match(titles, topic, `a panel on ${topic}`);
});

t.test('the alert rules pass promtool check rules and their unit tests; prometheus.yml passes check config as shipped', async (t) => {
  const promtool = await run('promtool', ['--version']).then(
    () => true,
    () => false,
  );
  if (!promtool) {
    if (process.env.CI === 'true') t.fail('promtool is missing (apt-get install -y prometheus)');
    else t.comment('SKIP: promtool not installed (Debian package prometheus)');
    return;
  }
  const path = (f: string) => new URL(f, root).pathname;
  const rules = await run('promtool', ['check', 'rules', path('prometheus/alerts.yml')]);
  t.match(rules.stdout, /SUCCESS: \d+ rules found/);
  // Fixtures in which TollgateStoreDown, TollgateGatewayDown and TollgateHighErrorRate fire, and stay
  // quiet on what they must ignore (5xx on /readyz and /metrics).
  const tests = await run('promtool', ['test', 'rules', path('prometheus/alerts.test.yml')]);
  t.match(tests.stdout, /SUCCESS/);
  // As shipped, from any working directory (rule_files is relative to the file).
  const config = await run('promtool', ['check', 'config', path('prometheus/prometheus.yml')], { cwd: '/' });
  t.match(config.stdout, /SUCCESS: 1 rule files found/);
});

t.test('every alert has a runbook_url into a section of docs/operations.md, and a unit test', async (t) => {
  const rules = (
    parse(read('prometheus/alerts.yml')) as { groups: Array<{ rules: Array<{ alert: string; annotations: Record<string, string> }> }> }
  ).groups.flatMap((g) => g.rules);
  const ops = readFileSync(new URL('../../docs/operations.md', import.meta.url), 'utf8');
  const anchors = new Set(
    [...ops.matchAll(/^#+ (.+)$/gm)].map((m) =>
      m[1]!
        .toLowerCase()
        .replace(/[^a-z0-9 -]/g, '')
        .replace(/ /g, '-'),
    ),
  );
  for (const r of rules) {
    const url = r.annotations.runbook_url ?? '';
    t.equal(url, `docs/operations.md#${r.alert.toLowerCase()}`, `${r.alert}: runbook_url`);
    t.ok(anchors.has(r.alert.toLowerCase()), `${r.alert}: docs/operations.md has its section`);
  }
  const fixtures = read('prometheus/alerts.test.yml');
  for (const a of ['TollgateStoreDown', 'TollgateGatewayDown', 'TollgateHighErrorRate', 'TollgateWorkersMissing'])
    t.match(fixtures, `alertname: ${a}`, `${a} is unit-tested`);
  t.notMatch(read('prometheus/alerts.yml'), /tollgate_rate_limiter_fallback/, 'the store alert no longer watches the limiter fallback');
});

/** A Kubernetes CPU quantity ("2", "1500m") in CPUs; a memory quantity ("1Gi", "512Mi") in MiB. */
const cpus = (q: string) => (String(q).endsWith('m') ? Number(String(q).slice(0, -1)) / 1000 : Number(q));
const mib = (q: string) => {
  const m = /^(\d+)(Mi|Gi)$/.exec(String(q));
  if (!m) throw new Error(`unexpected memory quantity ${q}`);
  return Number(m[1]) * (m[2] === 'Gi' ? 1024 : 1);
};
/** Memory a worker needs (NODE_OPTIONS caps its heap at 256 MB: ~300 MB RSS at 1,000 streams) and the primary's. */
const WORKER_MIB = 384;
const PRIMARY_MIB = 256;

t.test('Kubernetes manifests: parse, config compiles, probes and ports match it, drain fits the grace period', async (t) => {
  const docs = parseAllDocuments(read('kubernetes/tollgate.yaml')).map((d) => d.toJS() as Record<string, any>);
  const byKind = (k: string) => docs.filter((d) => d.kind === k);
  for (const k of [
    'ConfigMap',
    'Deployment',
    'Service',
    'NetworkPolicy',
    'PodDisruptionBudget',
    'HorizontalPodAutoscaler',
    'ServiceMonitor',
    'PersistentVolumeClaim',
  ])
    t.equal(byKind(k).length, 1, `one ${k}`);
  const [cm] = byKind('ConfigMap') as [any];
  const [dep] = byKind('Deployment') as [any];
  const [svc] = byKind('Service') as [any];
  const pod = dep.spec.template.spec;
  const container = pod.containers[0];
  const env: Record<string, string> = { REDIS_URL: 'redis://redis:6379', TOLLGATE_ADMIN_TOKEN: 'X3I8tSxa72IlJ3Qdrh/SttlULQmRGyBK' };
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
    preStop + config.server.drainSeconds + 5 < pod.terminationGracePeriodSeconds,
    'preStop + drain_seconds + 5 s (SPEC §14 bound) < terminationGracePeriodSeconds',
  );
  t.equal(config.console.publicUrl, env.CONSOLE_PUBLIC_URL, 'CONSOLE_PUBLIC_URL sets console.public_url');
  // The settle spool (SPEC §14) is on the shared volume, not in the container's own filesystem.
  const spoolMount = container.volumeMounts.find((m: any) => m.name === 'spool');
  t.equal(spoolMount?.mountPath, config.server.spoolDir, 'server.spool_dir is the spool volume');
  t.equal(
    pod.volumes.find((v: any) => v.name === 'spool')?.persistentVolumeClaim?.claimName,
    byKind('PersistentVolumeClaim')[0]!.metadata.name,
  );
  for (const p of svc.spec.ports) t.ok(Object.values(ports).includes(p.targetPort), `service port ${p.name} targets a container port`);
  t.equal(byKind('ServiceMonitor')[0]!.spec.endpoints[0].port, 'metrics');
  t.notMatch(container.image, /:latest$|^[^:]+$/, 'the image tag is pinned');
  t.equal(pod.securityContext.runAsNonRoot, true, 'runs as non-root');
});

t.test('Kubernetes: no secret value in any manifest; the Secret is created with kubectl and referenced', async (t) => {
  const text = read('kubernetes/tollgate.yaml');
  const docs = parseAllDocuments(text).map((d) => d.toJS() as Record<string, any>);
  t.same(
    docs.filter((d) => d.kind === 'Secret'),
    [],
    'no Secret object (its value would be public in the repository)',
  );
  t.notMatch(text, /replace-with|changeme/i, 'no placeholder token');
  const dep = docs.find((d) => d.kind === 'Deployment')!;
  const container = dep.spec.template.spec.containers[0];
  t.same(container.envFrom, [{ secretRef: { name: 'tollgate-secrets' } }]);
  for (const e of container.env) t.notMatch(e.name, /TOKEN|SECRET|PASSWORD|API_KEY/, `${e.name} is not a secret set inline`);
  t.match(text, /kubectl create secret generic tollgate-secrets[\s\S]*TOLLGATE_ADMIN_TOKEN="\$\(openssl rand -base64 32\)"/);
  t.match(readFileSync(new URL('../../docs/operations.md', import.meta.url), 'utf8'), /kubectl create secret generic tollgate-secrets/);
});

t.test('Kubernetes: the NetworkPolicy admits the admin port only from named namespaces', async (t) => {
  const docs = parseAllDocuments(read('kubernetes/tollgate.yaml')).map((d) => d.toJS() as Record<string, any>);
  const np = docs.find((d) => d.kind === 'NetworkPolicy')!;
  const dep = docs.find((d) => d.kind === 'Deployment')!;
  t.same(np.spec.podSelector.matchLabels, dep.spec.template.metadata.labels, 'selects the gateway pods');
  t.ok(np.spec.policyTypes.includes('Ingress'));
  const adminPort = dep.spec.template.spec.containers[0].ports.find((p: any) => p.name === 'admin').containerPort;
  const rules: any[] = np.spec.ingress;
  for (const r of rules) t.ok(Array.isArray(r.ports) && r.ports.length > 0, 'every rule names its ports (a rule without ports admits all)');
  const adminRules = rules.filter((r) => r.ports.some((p: any) => p.port === adminPort || p.port === 'admin'));
  t.ok(adminRules.length >= 1, 'a rule for the admin port');
  for (const r of adminRules) {
    t.ok(Array.isArray(r.from) && r.from.length > 0, 'the admin rule has sources');
    for (const f of r.from) {
      t.notOk(f.ipBlock, 'no address blocks');
      t.notOk(f.podSelector, 'no pod selector (it would widen to any pod of a namespace selector, or all pods here)');
      t.type(f.namespaceSelector?.matchLabels?.['kubernetes.io/metadata.name'], 'string', 'a namespace named by name');
    }
  }
});

t.test('Kubernetes: workers follow the CPU limit, memory is sized per worker, a PDB that lets a node drain', async (t) => {
  const docs = parseAllDocuments(read('kubernetes/tollgate.yaml')).map((d) => d.toJS() as Record<string, any>);
  const cm = docs.find((d) => d.kind === 'ConfigMap')!;
  const dep = docs.find((d) => d.kind === 'Deployment')!;
  const res = dep.spec.template.spec.containers[0].resources;
  const workersSetting = (parse(cm.data['tollgate.yaml']) as any).server.workers;
  t.ok(res.limits?.cpu, 'a CPU limit: what workers: auto reads');
  const cpuLimit = cpus(res.limits.cpu);
  // What `auto` computes inside the pod: the cgroup quota the kubelet sets from limits.cpu, on a 64-core node.
  const { autoWorkers } = await import('../../src/config/cpus.ts');
  const quota = `${Math.round(cpuLimit * 100_000)} 100000`;
  const workers =
    workersSetting === 'auto' ? autoWorkers((p) => (p === '/sys/fs/cgroup/cpu.max' ? quota : undefined), 64) : Number(workersSetting);
  t.ok(workers >= 1 && workers <= Math.max(1, Math.floor(cpuLimit)), `${workers} worker(s) for ${cpuLimit} CPU(s)`);
  t.ok(
    mib(res.limits.memory) >= workers * WORKER_MIB + (workers > 1 ? PRIMARY_MIB : 0),
    `memory limit ${res.limits.memory} holds ${workers} × ${WORKER_MIB}Mi${workers > 1 ? ` + ${PRIMARY_MIB}Mi` : ''}`,
  );
  t.ok(mib(res.requests.memory) >= mib(res.limits.memory), 'memory request = limit (no overcommit-driven OOM kill)');
  const pdb = docs.find((d) => d.kind === 'PodDisruptionBudget')!;
  t.same(pdb.spec.selector.matchLabels, dep.spec.selector.matchLabels, 'the PDB covers the gateway pods');
  const minAvailable = pdb.spec.minAvailable ?? dep.spec.replicas - pdb.spec.maxUnavailable;
  t.ok(minAvailable >= 1 && minAvailable < dep.spec.replicas, 'keeps one up, yet a node can drain');
  const hpa = docs.find((d) => d.kind === 'HorizontalPodAutoscaler')!;
  t.ok(hpa.spec.minReplicas > minAvailable, 'the autoscaler never goes below what the PDB lets drain');
});

t.test('compose: both gateways expose their metrics where Prometheus scrapes them', async (t) => {
  const compose = parse(read('compose.yaml'), { merge: true }) as { services: Record<string, any> };
  const prom = parse(read('prometheus/prometheus.yml')) as { scrape_configs: Array<{ static_configs: Array<{ targets: string[] }> }> };
  const targets = prom.scrape_configs[0]!.static_configs[0]!.targets;
  for (const name of ['gateway-1', 'gateway-2']) {
    const g = compose.services[name]!;
    t.ok(targets.includes(`${name}:${g.environment.METRICS_PORT}`), `${name} scraped on its METRICS_PORT`);
    t.equal(g.environment.REDIS_URL, 'redis://redis:6379');
  }
  t.match(compose.services.redis.command.join(' '), /--appendonly yes.*--maxmemory-policy noeviction.*--hash-max-listpack-entries 64/);
  t.ok(
    compose.services.grafana.volumes.some((v: string) => v.includes('tollgate-dashboard.json')),
    'the dashboard is provisioned',
  );
});

t.test('compose works on the first up: admin private, bucket created, drain kept, pinned, healthy, restarted', async (t) => {
  const compose = parse(read('compose.yaml'), { merge: true }) as { services: Record<string, any>; volumes: Record<string, unknown> };
  const svc = compose.services;
  const cm = (parse(read('../config/tollgate.yaml')) as any).server;
  const drain = Number(cm.drain_seconds);
  const adminPort = Number(cm.admin_port);
  for (const name of ['gateway-1', 'gateway-2']) {
    const g = svc[name]!;
    const env = g.environment as Record<string, string>;
    // The admin listener stays on the container's loopback, and nothing publishes it on the host.
    t.ok(env.ADMIN_HOST === undefined || env.ADMIN_HOST === '127.0.0.1', `${name}: admin on 127.0.0.1 only`);
    for (const p of g.ports as string[]) {
      const parts = p.split(':');
      const container = Number(parts.at(-1));
      t.not(container, adminPort, `${name}: the admin port is not published (${p})`);
      t.not(container, Number(env.METRICS_PORT), `${name}: metrics stay on the compose network (${p})`);
    }
    t.ok(env.METRICS_HOST && env.METRICS_HOST !== env.ADMIN_HOST, `${name}: metrics on a host of their own`);
    t.ok(env.CONSOLE_PUBLIC_URL, `${name}: CONSOLE_PUBLIC_URL set`);
    t.ok(g.extra_hosts.includes('host.docker.internal:host-gateway'), `${name}: host.docker.internal resolves on Linux`);
    t.ok(
      /^\d+s$/.test(g.stop_grace_period) && parseInt(g.stop_grace_period, 10) > drain,
      `${name}: stop_grace_period > drain_seconds (${drain})`,
    );
    t.equal(g.depends_on.redis.condition, 'service_healthy', `${name} waits for a healthy Redis`);
    t.equal(g.depends_on['s3-init'].condition, 'service_completed_successfully', `${name} waits for the bucket`);
  }
  t.match(svc['s3-init'].entrypoint.join(' '), /mc mb --ignore-existing local\/shares/, 'the init step creates the bucket');
  t.equal(svc['gateway-1'].environment.S3_BUCKET, 'shares', 'the bucket the gateways use is the one created');
  for (const [name, s] of Object.entries(svc)) {
    t.match(s.image, /:[^:]+$/, `${name}: image tagged`);
    t.notMatch(s.image, /:latest$/, `${name}: not :latest`);
    t.ok(s.restart, `${name}: a restart policy`);
    for (const p of (s.ports ?? []) as string[])
      if (!name.startsWith('gateway')) t.match(p, /^127\.0\.0\.1:/, `${name}: published on loopback only (${p})`);
    for (const v of (s.volumes ?? []) as string[]) {
      const src = v.split(':')[0]!;
      if (!src.startsWith('.')) t.ok(src in compose.volumes, `${name}: ${src} is a named volume`);
    }
  }
  for (const name of ['redis', 's3']) t.ok(svc[name].healthcheck?.test, `${name}: a health check`);
  for (const name of ['redis', 's3', 'prometheus', 'grafana'])
    t.ok(
      (svc[name].volumes ?? []).some((v: string) => !v.startsWith('.')),
      `${name}: its data on a named volume`,
    );
});
