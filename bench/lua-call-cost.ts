/**
 * What a Lua script's parts cost redis-server, in instructions (callgrind): a plain command, an empty
 * script, its keys and arguments, a reply table, and one `redis.call` of a few commands. The fixed costs
 * the credit scripts are built around (docs/ledger.md "Runs"): a script call, and each `redis.call`
 * inside it, whatever the command does.
 *   node bench/lua-call-cost.ts [--n 2000] [--out bench/results/lua-call-cost.md]
 * One redis-server under callgrind; per case a warm-up, `callgrind_control --zero`, N calls pipelined 16
 * per write, a dump. The write's networking is shared by its 16 calls.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { Redis, type ChainableCommander } from 'ioredis';
import { freePort, startCallgrindRedis } from './procs.ts';

const { values } = parseArgs({ options: { n: { type: 'string', default: '2000' }, out: { type: 'string' } } });
const N = Number(values.n);
const PER_WRITE = 16;
const ARGS = ['1000', '123456789', '1'];

interface Case {
  name: string;
  /** A plain command, or a script with 0 or 2 keys and 0 or 3 arguments. */
  cmd?: (p: ChainableCommander) => void;
  lua?: string;
  keys?: number;
}
const CASES: Case[] = [
  { name: '`PING`', cmd: (p) => p.ping() },
  { name: '`HGET` of a field', cmd: (p) => p.hget('a', 'balance') },
  { name: 'script `return 1`, no keys, no arguments', lua: 'return 1', keys: 0 },
  { name: 'script `return 1`, 2 keys, 3 arguments', lua: 'return 1', keys: 2 },
  { name: 'script `return {1, 2, 3}`, 2 keys, 3 arguments', lua: 'return {1, 2, 3}', keys: 2 },
  {
    name: "+ one `redis.call('HMGET', …)` of 3 fields",
    lua: "redis.call('HMGET', KEYS[1], 'balance', 'held', 'reaped') return 1",
    keys: 2,
  },
  { name: "+ one `redis.call('HINCRBY', …)`", lua: "redis.call('HINCRBY', KEYS[1], 'x', 1) return 1", keys: 2 },
];

const dir = mkdtempSync(join(tmpdir(), 'lua-call-cost-'));
const port = await freePort();
const server = await startCallgrindRedis(port, `${dir}/cg.%p`, `${dir}/valgrind.log`);
const r = new Redis({ port, enableAutoPipelining: false });
const rows: string[] = [];
try {
  await r.hset('a', 'balance', '100000000', 'held', '0');
  for (const [i, c] of CASES.entries()) {
    const sha = c.lua ? ((await r.script('LOAD', c.lua)) as string) : '';
    const write = async () => {
      const p = r.pipeline();
      for (let j = 0; j < PER_WRITE; j++) {
        if (c.cmd) c.cmd(p);
        else p.evalsha(sha, c.keys!, ...['a', 'b'].slice(0, c.keys), ...(c.keys ? ARGS : []));
      }
      await p.exec();
    };
    for (let j = 0; j < 50; j++) await write();
    execFileSync('callgrind_control', ['-z', String(server.pid)]);
    let n = 0;
    for (; n < N; n += PER_WRITE) await write();
    execFileSync('callgrind_control', ['-d', String(server.pid)]);
    const dump = readdirSync(dir).find((f) => new RegExp(`^cg\\.\\d+\\.${i + 1}$`).test(f))!;
    const total = Number(/^(?:totals|summary): (\d+)/m.exec(readFileSync(join(dir, dump), 'utf8'))![1]);
    rows.push(`| ${c.name} | ${Math.round(total / n).toLocaleString('en')} |`);
    console.error(rows.at(-1));
  }
} finally {
  r.disconnect();
  await server.stop();
  rmSync(dir, { recursive: true, force: true });
}
const report = `# What a script's parts cost redis-server

\`node bench/lua-call-cost.ts --n ${N}\` · ${new Date().toISOString()} · ${execFileSync('redis-server', ['--version'], { encoding: 'utf8' }).split(' ').slice(0, 3).join(' ')}

Instructions per call executed by redis-server (callgrind, user space), ${PER_WRITE} calls per write.

| call | instructions / call |
|---|--:|
${rows.join('\n')}
`;
if (values.out) writeFileSync(values.out, report);
process.stdout.write(report);
