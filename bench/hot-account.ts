/**
 * The hot account (issue 29): one account, one live key, a gateway with `server.workers: 4` on one
 * redis-server, wrk non-streaming at c=64 and c=256 (and c=1 for the latency of a lone request). What a
 * single Redis shard spends per live request is what limits the biggest customer of a fleet: reported
 * from `INFO commandstats` (time inside the gateway's commands) and from /proc (redis-server's whole CPU,
 * network and syscalls included), with the script calls per request (2 = a hold and a settle call each;
 * fewer = turns batched), beside req/s and the gateway's CPU per request.
 *   node bench/hot-account.ts [--ref <before>] [--rounds 3] [--seconds 3] [--conns 1,64,256] [--workers 4]
 *     [--leases [--packed] [--linger <ms>]] [--ref-leases [--ref-packed] [--ref-linger <ms>]] [--out file.md]
 * With --ref, the gateway at that ref is measured too, its stack up only while it runs; rounds alternate
 * (before, after, after, before, …) so drift hits both alike. Medians over rounds. `--leases`: the working
 * tree's gateway with `credit.leases: true` (docs/ledger.md "Leases"); the ref's as configured by default.
 * `--packed` (with --leases): the working tree's also with `store.debit_entries: packed` (a lease's settles
 * of one turn in one ledger entry, docs/ledger.md "Packed passes"); `--ref . --leases --packed` measures
 * packed passes against plain lease passes of the same tree with `--ref-leases` (the ref's side with
 * `credit.leases: true` as well, so the sides differ in the layout alone). `--linger` / `--ref-linger` set a
 * side's `credit.lease_linger_ms` (docs/ledger.md "Lingering passes"), `--ref-packed` the ref's layout:
 * `--ref . --ref-leases --ref-packed --ref-linger 0 --leases --packed` measures the linger alone.
 * `--rate N`: an open loop at N requests a second (bench/paced.ts, latency from each request's scheduled
 * time) instead of wrk's closed loop; `--conns` is then the client's connection pool.
 */
import { writeFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { parseArgs } from 'node:util';
import { describeRef } from './git.ts';
import { measure, type Measurement } from './measure.ts';
import { SCENARIOS, type Scenario } from './scenarios.ts';
import { startStack, type Stack } from './stack.ts';

const { values } = parseArgs({
  options: {
    ref: { type: 'string' },
    rounds: { type: 'string', default: '3' },
    seconds: { type: 'string', default: '3' },
    conns: { type: 'string', default: '1,64,256' },
    workers: { type: 'string', default: '4' },
    out: { type: 'string' },
    leases: { type: 'boolean', default: false },
    packed: { type: 'boolean', default: false },
    'ref-leases': { type: 'boolean', default: false },
    'ref-packed': { type: 'boolean', default: false },
    linger: { type: 'string' },
    'ref-linger': { type: 'string' },
    rate: { type: 'string' },
  },
});
const rounds = Number(values.rounds);
/** The gateway measured: with `server.workers` set, or the single process for --workers 1. */
const TARGET = Number(values.workers) > 1 ? `tollgate/live-w${values.workers}` : 'tollgate/live';
const workers = Number(values.workers);
const conns = values.conns.split(',').map(Number);
const rate = values.rate ? Number(values.rate) : undefined;
// Closed loop (wrk, c connections), or with --rate an open loop at that many requests a second (bench/paced.ts).
const base = SCENARIOS.find((s) => s.id === (rate ? 'rate2000' : 'nonstream'))!;
const scenario = (c: number): Scenario => ({
  ...base,
  title: rate ? `non-streaming, ${rate} req/s, ${c} connections` : `non-streaming, 64 tokens, c=${c}`,
  spec: (t, q) => ({ ...base.spec(t, q), connections: c, warmupS: 1, durationS: Number(values.seconds), ...(rate && { rate }) }),
});

const sides = [...(values.ref ? [{ name: 'before', ref: describeRef(values.ref) }] : []), { name: 'after', ref: describeRef(undefined) }];
const median = (xs: number[]) => {
  const s = xs.filter((x) => Number.isFinite(x)).sort((a, b) => a - b);
  if (s.length === 0) return NaN;
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
};

/** `credit.leases: true`, maybe packed passes, maybe a linger (only named when given: a ref may not know it). */
function leaseConfig(packed: boolean, linger: string | undefined) {
  return {
    credit: { leases: true, ...(linger !== undefined && { lease_linger_ms: Number(linger) }) },
    ...(packed && { store: { debit_entries: 'packed' } }),
  };
}
const sideLabel = (name: string) => {
  const [leases, packed, linger] =
    name === 'after' ? [values.leases, values.packed, values.linger] : [values['ref-leases'], values['ref-packed'], values['ref-linger']];
  if (!leases) return '';
  return `, \`credit.leases: true\`${packed ? ', `store.debit_entries: packed`' : ''}${linger !== undefined ? `, \`credit.lease_linger_ms: ${linger}\`` : ''}`;
};
const stacks = new Map<string, Stack>();
for (const side of sides)
  stacks.set(
    side.name,
    await startStack({
      reference: false,
      // One worker: the stack's own single-process gateway ('tollgate/live'), no second one.
      workers: workers > 1 ? workers : false,
      ...(side.ref.sha && { ref: side.ref.sha }),
      ...(side.name === 'after' && values.leases && { config: leaseConfig(values.packed, values.linger) }),
      // --ref-leases: the ref's gateway with leases too (a ref that knows credit.leases).
      ...(side.name === 'before' && values['ref-leases'] && { config: leaseConfig(values['ref-packed'], values['ref-linger']) }),
    }),
  );
const runs = new Map<string, Measurement[]>();
const load0 = loadavg()
  .map((x) => x.toFixed(2))
  .join(' ');
try {
  // Warm every side at every concurrency (JIT, pools, key caches in every worker).
  for (const side of sides) {
    const st = stacks.get(side.name)!;
    const t = st.targets.find((x) => x.name === TARGET)!;
    for (const c of conns) await measure(scenario(c), t, 0, false, st.pids);
  }
  for (let r = 0; r < rounds; r++) {
    const order = r % 2 ? [...sides].reverse() : sides;
    for (const c of conns) {
      for (const side of order) {
        const st = stacks.get(side.name)!;
        const t = st.targets.find((x) => x.name === TARGET)!;
        const m = await measure(scenario(c), t, r, false, st.pids, st.redisScriptCommands);
        const key = `${side.name} ${c}`;
        runs.set(key, [...(runs.get(key) ?? []), m]);
        process.stderr.write(
          `round ${r} ${key}: ${m.result.rps.toFixed(0)} req/s, p50 ${m.result.latency.p50.toFixed(2)} / p99 ${m.result.latency.p99.toFixed(2)} ms, Redis ${m.redisCmdUsPerReq?.toFixed(2)} µs/req (commandstats), ${m.redisScriptCallsPerReq?.toFixed(3)} script calls/req, ${m.redisUsPerReq?.toFixed(2)} µs/req (/proc), gateway ${m.cpuUsPerReq.toFixed(0)} µs/req\n`,
        );
      }
    }
  }
} finally {
  for (const st of stacks.values()) await st.stop();
}

const lines = [
  `# Hot account: one account, one live key, \`server.workers: ${workers}\`, one redis-server`,
  '',
  `\`node bench/hot-account.ts${values.ref ? ` --ref ${values.ref}` : ''}${values['ref-leases'] ? ' --ref-leases' : ''}${values['ref-packed'] ? ' --ref-packed' : ''}${values['ref-linger'] !== undefined ? ` --ref-linger ${values['ref-linger']}` : ''}${values.leases ? ' --leases' : ''}${values.packed ? ' --packed' : ''}${values.linger !== undefined ? ` --linger ${values.linger}` : ''} --rounds ${rounds} --seconds ${values.seconds} --conns ${values.conns}\` · ${new Date().toISOString()} · load average at start ${load0}`,
  '',
  ...sides.map((s) => `- ${s.name}: ${s.ref.label}${sideLabel(s.name)}`),
  '',
  'wrk, non-streaming, 64 tokens, all on the same 2 cores. Redis µs/req: `INFO commandstats` (time inside the gateway’s commands, scripts counted once) and redis-server’s CPU from /proc (its network and syscall work included), each per completed request. Medians over rounds.',
  '',
  '| side | c | req/s | p50 ms | p99 ms | Redis µs/req (commandstats) | script calls/req | Redis CPU µs/req (/proc) | gateway CPU µs/req (all workers) |',
  '|---|--:|--:|--:|--:|--:|--:|--:|--:|',
];
for (const c of conns) {
  for (const side of sides) {
    const ms = runs.get(`${side.name} ${c}`) ?? [];
    const f = (g: (m: Measurement) => number | undefined, d: number) => median(ms.map((m) => g(m) ?? NaN)).toFixed(d);
    lines.push(
      `| ${side.name} | ${c} | ${f((m) => m.result.rps, 0)} | ${f((m) => m.result.latency.p50, 2)} | ${f((m) => m.result.latency.p99, 2)} | ${f((m) => m.redisCmdUsPerReq, 2)} | ${f((m) => m.redisScriptCallsPerReq, 3)} | ${f((m) => m.redisUsPerReq, 2)} | ${f((m) => m.cpuUsPerReq, 0)} |`,
    );
  }
}
const text = lines.join('\n') + '\n';
process.stdout.write(text);
if (values.out) writeFileSync(values.out, text);
