// SPEC §8 lifecycle, with the real entry point as a child process: SIGTERM lets an in-flight request
// finish and exits 0; NODE_ENV=production without REDIS_URL and a bad config refuse to start.
import t from 'tap';
import type { Test } from 'tap';
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, writeFile } from 'node:fs/promises';
import { request, Agent } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { freePort } from '../helpers/ports.ts';

const TOKEN = 'shutdown-test-admin-token-0123456789';
const CONFIG = `
server: { host: 127.0.0.1, admin_host: 127.0.0.1, drain_seconds: 20 }
models:
  - name: m1
    price: { input: 1, output: 1 }
    upstreams: [{ url: "http://127.0.0.1:9/v1" }]
`;

interface Proc {
  child: ChildProcess;
  url: string;
  adminUrl: string;
  stdout: () => string;
  stderr: () => string;
  exit: Promise<number | null>;
}

/** The process environment minus anything that would change which store or config the child picks. */
function baseEnv(): NodeJS.ProcessEnv {
  const env = { ...process.env };
  for (const k of [
    'REDIS_URL',
    'REDIS_CLUSTER_NODES',
    'NODE_ENV',
    'TOLLGATE_CONFIG',
    'PORT',
    'ADMIN_PORT',
    'HOST',
    'ADMIN_HOST',
    'TOLLGATE_ADMIN_TOKEN',
    'LOG_LEVEL',
    'NODE_OPTIONS',
  ])
    delete env[k];
  return env;
}

async function spawnGateway(t: Test, configText: string, env: NodeJS.ProcessEnv = {}): Promise<Proc> {
  const dir = await mkdtemp(join(tmpdir(), 'tollgate-shutdown-'));
  const file = join(dir, 'tollgate.yaml');
  await writeFile(file, configText);
  const port = await freePort();
  const adminPort = await freePort();
  const child = spawn(process.execPath, ['src/main.ts'], {
    cwd: process.cwd(),
    env: {
      ...baseEnv(),
      TOLLGATE_CONFIG: file,
      PORT: String(port),
      ADMIN_PORT: String(adminPort),
      TOLLGATE_ADMIN_TOKEN: TOKEN,
      LOG_LEVEL: 'info',
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stdout!.setEncoding('utf8').on('data', (c) => (out += c));
  child.stderr!.setEncoding('utf8').on('data', (c) => (err += c));
  const exit = once(child, 'exit').then(([code]) => code as number | null);
  t.teardown(() => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  });
  return { child, url: `http://127.0.0.1:${port}`, adminUrl: `http://127.0.0.1:${adminPort}`, stdout: () => out, stderr: () => err, exit };
}

/** Resolves once /healthz answers (the child is listening), or fails after 15 s. */
async function ready(p: Proc): Promise<void> {
  const deadline = Date.now() + 15_000;
  while (Date.now() < deadline) {
    if (p.child.exitCode !== null) throw new Error(`gateway exited ${p.child.exitCode}: ${p.stderr()}`);
    try {
      const res = await fetch(`${p.adminUrl}/healthz`);
      await res.arrayBuffer();
      if (res.status === 200) return;
    } catch {
      // not listening yet
    }
    await sleep(50);
  }
  throw new Error(`gateway not ready: ${p.stderr()}`);
}

/** Resolves with the exit code, or null if the process is still running after `ms`. */
async function exitWithin(p: Proc, ms: number): Promise<number | null | 'running'> {
  // An unref'd timer: a pending race timer must not keep the test process alive after the child exited.
  return Promise.race([p.exit, sleep(ms, undefined, { ref: false }).then(() => 'running' as const)]);
}

t.test('SIGTERM while a request is in flight: the request completes, then the process exits 0', async (t) => {
  const p = await spawnGateway(t, CONFIG);
  await ready(p);

  // A slow upload: headers and half the body now, the rest after SIGTERM.
  const body = Buffer.from(JSON.stringify({ account: 'acme', env: 'live', name: 'uploaded during shutdown' }));
  const half = Math.floor(body.length / 2);
  let finishUpload = () => {};
  const response = new Promise<{ status: number; text: string }>((resolve, reject) => {
    const req = request(
      `${p.adminUrl}/admin/keys`,
      {
        method: 'POST',
        agent: false,
        headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json', 'content-length': body.length },
      },
      (res) => {
        let text = '';
        res
          .setEncoding('utf8')
          .on('data', (c) => (text += c))
          .on('end', () => resolve({ status: res.statusCode!, text }));
      },
    );
    req.on('error', reject);
    req.write(body.subarray(0, half));
    finishUpload = () => req.end(body.subarray(half));
  });
  await sleep(300); // the server has the headers and is waiting for the rest of the body

  p.child.kill('SIGTERM');
  await sleep(300);
  t.equal(p.child.exitCode, null, 'still running while the request is in flight');
  await t.rejects(fetch(`${p.url}/v1/models`), 'no longer accepting new connections (public)');
  await t.rejects(fetch(`${p.adminUrl}/healthz`), 'no longer accepting new connections (admin)');

  finishUpload();
  const res = await response;
  t.equal(res.status, 201, `the in-flight request got its normal answer: ${res.text}`);
  t.match(JSON.parse(res.text).key, /^svc-live-[1-9A-HJ-NP-Za-km-z]{32}$/);

  const code = await exitWithin(p, 10_000);
  t.equal(code, 0, `exit code (stderr: ${p.stderr()})`);
  const lines = p
    .stdout()
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as { msg: string; status?: number });
  t.ok(
    lines.some((l) => l.msg === 'draining'),
    'logged the drain',
  );
  t.ok(
    lines.some((l) => l.msg === 'request' && l.status === 201),
    'logged the in-flight request',
  );
  t.ok(
    lines.some((l) => l.msg === 'stopped'),
    'logged the stop',
  );
  t.notOk(p.stdout().includes(JSON.parse(res.text).key.slice(9)), 'the created key is not in the process output');
});

t.test('SIGINT with only idle keep-alive connections exits 0 without waiting for the drain deadline', async (t) => {
  const p = await spawnGateway(t, CONFIG);
  await ready(p);
  const agent = new Agent({ keepAlive: true });
  t.teardown(() => agent.destroy());
  const status = await new Promise<number>((resolve, reject) => {
    request(`${p.adminUrl}/healthz`, { agent }, (res) => {
      res.resume().on('end', () => resolve(res.statusCode!));
    })
      .on('error', reject)
      .end();
  });
  t.equal(status, 200);
  p.child.kill('SIGINT');
  // drain_seconds is 20: an idle socket that held the process would show as 'running' here.
  t.equal(await exitWithin(p, 8_000), 0);
});

t.test('NODE_ENV=production without REDIS_URL refuses to start, naming REDIS_URL', async (t) => {
  const p = await spawnGateway(t, CONFIG, { NODE_ENV: 'production' });
  const code = await exitWithin(p, 15_000);
  t.not(code, 0);
  t.not(code, 'running');
  t.match(p.stderr(), /REDIS_URL/);
});

t.test('a bad config file refuses to start with a message naming the field', async (t) => {
  const p = await spawnGateway(t, CONFIG.replace('upstreams: [{ url: "http://127.0.0.1:9/v1" }]', 'upstreams: []'));
  const code = await exitWithin(p, 15_000);
  t.not(code, 0);
  t.not(code, 'running');
  t.match(p.stderr(), 'models[0].upstreams');
  const q = await spawnGateway(t, CONFIG, { PORT: 'eighty' });
  t.not(await exitWithin(q, 15_000), 0);
  t.match(q.stderr(), 'PORT');
});
