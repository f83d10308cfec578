import t from 'tap';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import { ADMIN_TOKEN } from '../helpers/gateway.ts';
import { freePort } from '../helpers/ports.ts';
import { BIN, ROOT, parseFields, runCli } from './run-cli.ts';

/** Polls /healthz until the admin listener answers; false when the deadline passes or the child dies. */
async function ready(adminUrl: string, child: { exitCode: number | null }, deadlineMs: number): Promise<boolean> {
  const until = Date.now() + deadlineMs;
  while (Date.now() < until && child.exitCode === null) {
    const ok = await fetch(`${adminUrl}/healthz`).then(
      (r) => r.ok,
      () => false,
    );
    if (ok) return true;
    await sleep(50);
  }
  return false;
}

t.test('tollgate serve runs the gateway the CLI then drives, and stops on SIGTERM with exit 0', async (t) => {
  // The gateway's logs are buffered (pino, 4 KiB), so the test picks the ports and polls /healthz rather
  // than waiting for the "listening" line. Embedded store, the default config file.
  const [port, adminPort] = [await freePort(), await freePort()];
  const env = {
    PATH: process.env.PATH ?? '',
    PORT: String(port),
    ADMIN_PORT: String(adminPort),
    HOST: '127.0.0.1',
    ADMIN_HOST: '127.0.0.1',
    TOLLGATE_ADMIN_TOKEN: ADMIN_TOKEN,
  };
  const child = spawn(process.execPath, [BIN, 'serve'], { env, cwd: ROOT, stdio: ['ignore', 'ignore', 'pipe'] });
  const exited = once(child, 'exit');
  t.teardown(() => {
    if (child.exitCode === null) child.kill('SIGKILL');
  });
  let stderr = '';
  child.stderr.on('data', (c: Buffer) => (stderr += c));
  const adminUrl = `http://127.0.0.1:${adminPort}`;
  // 30 s: a cold start on a loaded 2-core CI machine; it normally takes well under a second.
  t.ok(await ready(adminUrl, child, 30_000), 'the admin listener came up', { stderr });

  const created = await runCli(['keys', 'create', '--account', 'served', '--env', 'test', '--name', 'via serve'], {
    TOLLGATE_ADMIN_TOKEN: ADMIN_TOKEN,
    ADMIN_PORT: String(adminPort),
  });
  t.equal(created.code, 0, 'keys create finds the served gateway through ADMIN_PORT alone', { stderr: created.stderr });
  const key = parseFields(created.stdout).key!;
  const models = await fetch(`http://127.0.0.1:${port}/v1/models`, { headers: { authorization: `Bearer ${key}` } });
  t.equal(models.status, 200);
  t.match(await models.json(), { object: 'list', data: [{ id: 'llama-3.1-8b' }] });

  child.kill('SIGTERM');
  const [code] = await exited;
  t.equal(code, 0, 'graceful stop', { stderr });
});
