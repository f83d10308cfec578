/**
 * redis-server's instructions per rate-limiter counter call (`rlflxIncr`, every consume, reward and
 * penalty of a Redis-backed limit: ~4 per test-key chat request), counted by valgrind's callgrind:
 * rate-limiter-flexible's own script (`SET … EX … NX`, `INCRBY`, `PTTL`) against ours
 * (src/store/limiter-client.ts INCR_TTL_LUA: `INCRBY`, `PTTL`), each on a fresh redis-server, the calls sent
 * 4 per write as a test key's phases send them, on 6 counters (an existing counter: the common case).
 *   node bench/limiter-script.ts [--n 4000] [--out bench/results/limiter-script.md]
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { Redis } from 'ioredis';
import { RateLimiterRedis } from 'rate-limiter-flexible';
import { INCR_TTL_LUA } from '../src/store/limiter-client.ts';
import { freePort, startCallgrindRedis } from './procs.ts';

const { values } = parseArgs({ options: { n: { type: 'string', default: '4000' }, out: { type: 'string' } } });
const N = Number(values.n);
const PER_WRITE = 4;

let libraryLua = '';
new RateLimiterRedis({
  storeClient: { defineCommand: (_name: string, def: { lua: string }) => void (libraryLua = def.lua) },
  points: 10,
  duration: 60,
});

async function measure(lua: string): Promise<number> {
  const dir = mkdtempSync(join(tmpdir(), 'limiter-script-'));
  const port = await freePort();
  const server = await startCallgrindRedis(port, `${dir}/cg.%p`, `${dir}/valgrind.log`);
  const r = new Redis({ port, enableAutoPipelining: false });
  const sha = (await r.script('LOAD', lua)) as string;
  let seq = 0;
  const write = async () => {
    const p = r.pipeline();
    for (let i = 0; i < PER_WRITE; i++) p.evalsha(sha, 1, `rl:c${seq++ % 6}`, '1', '60', '1099511627776', '60');
    await p.exec();
  };
  for (let i = 0; i < 300; i++) await write();
  execFileSync('callgrind_control', ['-z', String(server.pid)]);
  const from = seq;
  while (seq - from < N) await write();
  execFileSync('callgrind_control', ['-d', String(server.pid)]);
  const calls = seq - from;
  r.disconnect();
  await server.stop();
  const dump = readdirSync(dir).find((f) => /^cg\.\d+\.1$/.test(f))!;
  const total = Number(/^(?:totals|summary): (\d+)/m.exec(readFileSync(join(dir, dump), 'utf8'))![1]);
  rmSync(dir, { recursive: true, force: true });
  return total / calls;
}

const lib = await measure(libraryLua);
const ours = await measure(INCR_TTL_LUA);
const report = `# redis-server instructions per rate-limiter counter call

\`node bench/limiter-script.ts --n ${N}\` · ${new Date().toISOString()} · ${execFileSync('redis-server', ['--version'], { encoding: 'utf8' }).split(' ').slice(0, 3).join(' ')}

Each counter call (\`rlflxIncr\`: a consume, reward or penalty of a Redis-backed limit; a test-key chat
request makes ~4) on an existing counter, ${PER_WRITE} calls per write, ${N} calls counted after a warm-up,
user-space instructions of redis-server by callgrind (serverCron left out).

| script | kIr / call |
|---|--:|
| rate-limiter-flexible's (\`SET … EX … NX\`, \`INCRBY\`, \`PTTL\`) | ${(lib / 1000).toFixed(1)} |
| ours (src/store/limiter-client.ts \`INCR_TTL_LUA\`: \`INCRBY\`, \`PTTL\`) | ${(ours / 1000).toFixed(1)} (${(ours / lib).toFixed(2)}×) |
`;
process.stdout.write(report);
if (values.out) writeFileSync(values.out, report);
