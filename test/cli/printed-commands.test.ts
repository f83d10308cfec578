// The CLI commands the demo prints work as printed, on the machine's own Node (issue 27: they said
// `node bin/tollgate.js …`, which fails on Node 20, and `npx tollgate` printed EBADENGINE warnings).
// Run through a shell with the system PATH first, as a person pastes them; npx finds the Node 26 that
// npm ci installed (node_modules/.bin) and package.json's engines no longer warn about the npm host's Node.
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { promisify } from 'node:util';
import t from 'tap';
import { ROOT, startDemo } from './run-cli.ts';

const run = promisify(execFile);
// The machine's own Node and npm (Node 20 here), ahead of node_modules/.bin.
const systemPath = ['/usr/local/bin', '/usr/bin', '/bin'].filter(existsSync).join(':');

t.test('the CLI commands the demo prints run as printed, without warnings', async (t) => {
  const out = await startDemo(t);
  const commands = out
    .split('\n')
    .map((l) => l.trim().replace(/^new links: /, ''))
    .filter((l) => /^TOLLGATE_ADMIN_TOKEN=\S+ TOLLGATE_ADMIN_URL=\S+ /.test(l));
  t.equal(commands.length, 2, 'a console-link and a credits command');
  t.notMatch(out, /node bin\/tollgate\.js/, 'no command that needs Node 24 on PATH');
  for (const cmd of commands) {
    t.match(cmd, / npx tollgate /);
    const { stdout, stderr } = await run('sh', ['-c', cmd], { cwd: ROOT, env: { PATH: systemPath, HOME: process.env.HOME ?? '/tmp' } });
    t.notMatch(stderr, /EBADENGINE|npm warn/, `${cmd.split(' npx ')[1]}: no npm warnings`);
    t.match(
      stdout,
      cmd.includes('credits show') ? /balance:\s+10 credits/ : /http:\/\/127\.0\.0\.1:\d+\/console\/login\?token=/,
      'its output',
    );
  }
});

t.test("package.json's engines accept the Node that runs npm (20), so npm and npx do not warn about the project itself", async (t) => {
  const { readFileSync } = await import('node:fs');
  const pkg = JSON.parse(readFileSync(`${ROOT}/package.json`, 'utf8')) as { engines: { node: string }; scripts: Record<string, string> };
  const min = Number(/^>=\s*(\d+)/.exec(pkg.engines.node)?.[1]);
  t.ok(
    min <= 20,
    `engines.node ${pkg.engines.node} accepts Node 20 (the runtime's ≥ 24 is installed by npm ci and checked by scripts/node-check.mjs)`,
  );
  t.equal(pkg.scripts.tollgate, 'node bin/tollgate.js', 'npm run -s tollgate -- … runs the CLI on the Node npm ci installed');
  const checkPath = '../../scripts/node-check.mjs';
  const { nodeMessage } = (await import(checkPath)) as { nodeMessage: (found: string, command?: string) => string };
  t.match(nodeMessage('20.20.2', 'npx tollgate credits show acme'), /after `npm ci` run `npx tollgate credits show acme`/);
});
