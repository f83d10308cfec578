import t from 'tap';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';

const cli = fileURLToPath(new URL('../../src/simulator/cli.ts', import.meta.url));

t.test('cli prints its URL, serves, and exits 0 on SIGTERM', async (t) => {
  const child = spawn(process.execPath, [cli, '--port', '0', '--models', 'a,b'], { stdio: ['ignore', 'pipe', 'inherit'] });
  t.teardown(() => {
    if (child.exitCode === null) child.kill('SIGKILL');
  });
  const [line] = (await once(child.stdout, 'data')) as [Buffer];
  const url = line.toString().trim();
  t.match(url, /^http:\/\/127\.0\.0\.1:\d+\/v1$/);
  const models: any = await (await fetch(`${url}/models`)).json();
  t.same(
    models.data.map((m: { id: string }) => m.id),
    ['a', 'b'],
  );
  child.kill('SIGTERM');
  const [code] = await once(child, 'exit');
  t.equal(code, 0);
});
