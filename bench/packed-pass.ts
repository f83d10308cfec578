/**
 * What a lease pass costs redis-server per settle, in instructions (callgrind), by layout (docs/ledger.md
 * "Packed passes"): lease-settle.lua's common case (an entry per debit: each request's id, debit, data and
 * draw as arguments, its XADD and its entry id back, its field), lease-pass.lua (`store.debit_entries:
 * packed`: one entry for the pass, each request's id as an argument and its field), and a probe of the next
 * step, not built: one entry and one idempotency record per pass (no field per request; a retry would have
 * to carry the pass's id, docs/ledger.md). Passes of 1, 8, 32 and 64 settles into a bucket of 20,000
 * fields (a hot account's), each kind on the same server.
 *   node bench/packed-pass.ts [--calls 200] [--out bench/results/packed-pass.md]
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { PACKED_DEBITS_MAX } from '../src/store/debit-layout.ts';
import { freePort, startCallgrindRedis } from './procs.ts';

const { values } = parseArgs({ options: { calls: { type: 'string', default: '200' }, out: { type: 'string' } } });
const CALLS = Number(values.calls);
const SIZES = [1, 8, 32, 64];
const lua = (name: string) => readFileSync(new URL(`../src/store/lua/${name}.lua`, import.meta.url), 'utf8');
/** The probe: one entry and one record per pass (`P<pass>` = `=<entry id>`), no field per request. */
const PASS_RECORD = `
local call = redis.call
local have = call('HMGET', KEYS[2], ARGV[1], ARGV[2])
if have[2] then return {0, have[2]} end
local left = tonumber(string.sub(have[1], 2))
local rel = tonumber(ARGV[5])
if left < rel then return {-1} end
local x = call('XADD', KEYS[3], '*', 'p', ARGV[6], 'h', ARGV[7])
call('HSET', KEYS[2], ARGV[2], '=' .. x, ARGV[1], 'o' .. string.format('%d', left - rel))
local held = call('HINCRBY', KEYS[1], 'held', '-' .. ARGV[5])
local bal = call('HINCRBY', KEYS[1], 'balance', ARGV[4])
return {bal, held, 1, x}
`;
type Kind = 'entry per debit' | 'packed (lease-pass.lua)' | 'packed, a record per pass (probe)';
const KINDS: Kind[] = ['entry per debit', 'packed (lease-pass.lua)', 'packed, a record per pass (probe)'];
/** A debit's `d` as debit-layout.ts makes it. */
const dataOf = (i: number) =>
  JSON.stringify([
    -1234,
    '2026-12-03T07:00:00.000Z',
    `req_${String(i).padStart(22, '0')}`,
    'key_abc1234567890123',
    'model-x',
    12,
    64,
    'upstream',
  ]);

const dir = mkdtempSync(join(tmpdir(), 'packed-pass-'));
const out = join(dir, 'cg.out');
const port = await freePort();
const server = await startCallgrindRedis(port, out, `${out}.log`);
const r = new Redis({ port, host: '127.0.0.1', lazyConnect: true });
await r.connect();
const ctl = (...x: string[]) => execFileSync('callgrind_control', [...x, String(server.pid)], { timeout: 300_000 });
const sha = {
  'entry per debit': (await r.script('LOAD', lua('lease-settle'))) as string,
  'packed (lease-pass.lua)': (await r.script('LOAD', lua('lease-pass'))) as string,
  'packed, a record per pass (probe)': (await r.script('LOAD', PASS_RECORD)) as string,
};
const keys = ['{acct:a}:bal', '{acct:a}:hb:1', '{acct:a}:ledger'];
await r.hset(keys[0]!, 'balance', '1000000000000000', 'held', '0');
const fill: string[] = [];
for (let i = 0; i < 20_000; i++) fill.push(`fill_${i}`, '=1-1');
// A bucket of its own per kind, each starting at 20,000 fields: sharing one, a kind's passes grew the
// bucket (and the Lua heap) under the next kind, which moved a kind's slope by ~1k per settle with its
// place in the order.
for (let k = 0; k < KINDS.length; k++) await r.hset(`{acct:a}:hb:${k}`, ...fill);
let seq = 0;
let lease = 0;
let dumps = 0;

/** Instructions per pass of `n` settles of one kind: CALLS passes, each with a lease of its own. */
async function run(kind: Kind, n: number): Promise<number> {
  keys[1] = `{acct:a}:hb:${KINDS.indexOf(kind)}`;
  const passes: (string | number)[][] = [];
  for (let c = 0; c < CALLS; c++) {
    const lf = `Lbench.${lease++}`;
    await r.hset(keys[1]!, lf, `o${100 * n}`);
    await r.hincrby(keys[0]!, 'held', 100 * n);
    const ids: string[] = [];
    const datas: string[] = [];
    for (let i = 0; i < n; i++) {
      ids.push(`req_${String(seq).padStart(22, '0')}`);
      datas.push(dataOf(seq++));
    }
    const debit = String(-1234 * n);
    const drawn = String(100 * n);
    const draws = ids.map(() => '100');
    if (kind === 'entry per debit') passes.push([lf, '0', n, debit, drawn, ...ids, ...ids.map(() => '-1234'), ...datas, ...draws]);
    else if (kind === 'packed (lease-pass.lua)') {
      // As redis-credit.ts leasePass: entries of up to PACKED_DEBITS_MAX, an entry of one plain.
      const entries: (string | number)[] = [];
      for (let from = 0; from < n; from += PACKED_DEBITS_MAX) {
        const ds = datas.slice(from, from + PACKED_DEBITS_MAX);
        const hs = draws.slice(from, from + PACKED_DEBITS_MAX);
        entries.push(ds.length, ds.length === 1 ? ds[0]! : `[${ds.join(',')}]`, hs.length === 1 ? hs[0]! : `[${hs.join(',')}]`);
      }
      passes.push([lf, n, debit, drawn, entries.length / 3, ...entries, ...ids]);
    } else passes.push([lf, `P${lf}`, n, debit, drawn, `[${datas.join(',')}]`, `[${draws.join(',')}]`]);
  }
  ctl('--zero');
  for (const args of passes) await r.evalsha(sha[kind], 3, ...keys, ...args);
  const file = `${out}.${++dumps}`;
  ctl('--dump=passes');
  for (let i = 0; i < 600 && !/^totals:/m.test(safeRead(file)); i++) await sleep(100);
  return Number(/^totals:\s*(\d+)/m.exec(safeRead(file))![1]) / CALLS;
}
function safeRead(f: string): string {
  try {
    return readFileSync(f, 'utf8');
  } catch {
    return '';
  }
}

const rows: string[] = [];
const perPass = new Map<string, number>();
for (const n of SIZES)
  for (const kind of KINDS) {
    const ir = await run(kind, n);
    perPass.set(`${kind} ${n}`, ir);
    console.error(`${kind}, ${n} settles: ${Math.round(ir)} Ir/pass`);
  }
for (const n of SIZES) {
  const base = perPass.get(`${KINDS[0]} ${n}`)!;
  rows.push(
    `| ${n} | ${KINDS.map((k) => {
      const ir = perPass.get(`${k} ${n}`)!;
      return `${(ir / 1000).toFixed(1)}k / ${(ir / n / 1000).toFixed(1)}k${k === KINDS[0] ? '' : ` (${(ir / base).toFixed(2)}×)`}`;
    }).join(' | ')} |`,
  );
}
/** Per settle beyond a pass's fixed part: the slope between the passes of 8 and 64. */
const slope = (k: Kind) => (perPass.get(`${k} 64`)! - perPass.get(`${k} 8`)!) / 56;
const fixed = (k: Kind) => perPass.get(`${k} 8`)! - 8 * slope(k);
const report = [
  `# A lease pass per settle, by debit layout`,
  '',
  `\`node bench/packed-pass.ts --calls ${CALLS}\` · ${new Date().toISOString()} · ${execFileSync('redis-server', ['--version']).toString().trim().split(' ').slice(0, 3).join(' ')}`,
  '',
  `redis-server instructions (callgrind, user space) per pass / per settle, each pass a call of its own into a hold bucket of 20,000 fields; lease-pass.lua writes an entry per ${PACKED_DEBITS_MAX} debits.`,
  '',
  `| settles per pass | ${KINDS.join(' | ')} |`,
  `|--:|${KINDS.map(() => '--:').join('|')}|`,
  ...rows,
  '',
  `Fixed part per pass and slope per settle (passes of 8 → 64): ${KINDS.map((k) => `${k}: ${(fixed(k) / 1000).toFixed(1)}k + ${(slope(k) / 1000).toFixed(1)}k per settle`).join('; ')}.`,
  '',
].join('\n');
console.log(report);
if (values.out) writeFileSync(values.out, report);
r.disconnect();
await server.stop();
rmSync(dir, { recursive: true, force: true });
