// LOG_FORMAT=pretty: a readable line per event for a terminal; JSON stays the default (one object a line).
import t from 'tap';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const main = new URL('../../src/main.ts', import.meta.url).pathname;

/** Starts the real entry point, returns its stdout lines up to the boot line, then stops it. */
async function bootLines(t: { teardown(fn: () => unknown): void }, env: Record<string, string>): Promise<string[]> {
  const file = join(tmpdir(), `tollgate-logfmt-${process.pid}-${Math.random().toString(36).slice(2)}.yaml`);
  await writeFile(
    file,
    'server: { port: 0, admin_port: 0 }\nmodels: [{ name: m, price: { input: 1, output: 1 }, upstreams: [{ url: "http://127.0.0.1:9/v1" }] }]\n',
  );
  const child = spawn(process.execPath, [main], {
    env: { ...process.env, TOLLGATE_CONFIG: file, NODE_ENV: '', ...env },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  t.teardown(() => child.kill('SIGKILL'));
  let out = '';
  child.stdout.setEncoding('utf8');
  child.stdout.on('data', (c: string) => (out += c));
  const deadline = Date.now() + 15_000;
  while (!out.includes('tollgate listening') && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
  child.kill('SIGTERM');
  await once(child, 'exit');
  return out.split('\n').filter(Boolean);
}

t.test('LOG_FORMAT=pretty prints readable lines, not JSON', async (t) => {
  const lines = await bootLines(t, { LOG_FORMAT: 'pretty' });
  const boot = lines.find((l) => l.includes('tollgate listening'));
  t.ok(boot, lines.join('\n'));
  t.match(boot, /^\[\d\d:\d\d:\d\d\.\d{3}\] INFO: tollgate listening /);
  t.throws(() => JSON.parse(boot!), 'not a JSON line');
  t.ok(
    lines.some((l) => /^\[[\d:.]+\] WARN: no REDIS_URL/.test(l)),
    'warnings carry their level',
  );
});

t.test('the default stays one JSON object a line', async (t) => {
  const lines = await bootLines(t, {});
  const boot = lines.map((l) => JSON.parse(l) as { msg: string; level: number }).find((l) => l.msg === 'tollgate listening');
  t.equal(boot?.level, 30);
});
