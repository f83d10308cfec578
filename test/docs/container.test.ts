// The container is configured entirely through documented variables, and its health check follows the
// admin port the config resolves to (issue "first ten minutes", item 7).
import t from 'tap';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../helpers/ports.ts';
import { healthUrl } from '../../scripts/healthcheck.ts';

const root = new URL('../../', import.meta.url).pathname;
const read = (f: string) => readFileSync(join(root, f), 'utf8');

t.test('every ${VAR} of the baked config is in the README table and the Dockerfile example', async (t) => {
  const vars = [
    ...new Set(
      [
        ...read('config/tollgate.yaml')
          .replace(/#.*$/gm, '')
          .matchAll(/\$\{([A-Z0-9_]+)/g),
      ].map((m) => m[1]!),
    ),
  ];
  t.ok(vars.length >= 6, `found ${vars.join(', ')}`);
  const readme = read('docs/reference.md');
  const section = readme.slice(readme.indexOf('## Running it in a container'), readme.indexOf('## Benchmarks'));
  const docker = read('Dockerfile');
  for (const v of vars) {
    t.ok(section.includes(`\`${v}\``), `${v} is in the README's container table`);
    // REDIS_URL and the admin token are in the example; every other variable of the YAML too.
    t.ok(docker.includes(`${v}=`), `${v} is in the Dockerfile's docker run example`);
  }
});

t.test('healthUrl reaches a wildcard-bound admin listener on loopback', async (t) => {
  t.equal(healthUrl('0.0.0.0', 9090), 'http://127.0.0.1:9090/healthz');
  t.equal(healthUrl('::', 9), 'http://127.0.0.1:9/healthz');
  t.equal(healthUrl('::1', 9), 'http://[::1]:9/healthz');
  t.equal(healthUrl('10.1.2.3', 9), 'http://10.1.2.3:9/healthz');
});

t.test('the health check follows an admin_port set in YAML, not only ADMIN_PORT', async (t) => {
  const adminPort = await freePort();
  const file = join(tmpdir(), `tollgate-hc-${process.pid}.yaml`);
  await writeFile(
    file,
    `server: { host: 127.0.0.1, port: 0, admin_port: ${adminPort} }\nmodels: [{ name: m, price: { input: 1, output: 1 }, upstreams: [{ url: "http://127.0.0.1:9/v1" }] }]\n`,
  );
  const env = { ...process.env, TOLLGATE_CONFIG: file, NODE_ENV: '', ADMIN_PORT: '' };
  const check = async () => {
    const c = spawn(process.execPath, [join(root, 'scripts/healthcheck.ts')], { env, stdio: 'ignore' });
    return (await once(c, 'exit'))[0] as number;
  };
  t.equal(await check(), 1, 'unhealthy while nothing listens');
  const gw = spawn(process.execPath, [join(root, 'src/main.ts')], { env, stdio: ['ignore', 'pipe', 'inherit'] });
  t.teardown(() => gw.kill('SIGKILL'));
  let out = '';
  gw.stdout.setEncoding('utf8').on('data', (c: string) => (out += c));
  const deadline = Date.now() + 15_000;
  while (!out.includes('tollgate listening') && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
  t.equal(await check(), 0, 'healthy on the YAML admin port');
  gw.kill('SIGTERM');
  await once(gw, 'exit');
});
