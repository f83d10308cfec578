/**
 * A/B of the gateway's CPU per request: two full stacks side by side (A: the gateway from a git ref,
 * B: the working tree, or `--b <ref>`), each its own simulator and Redis, measured in alternation
 * (A, B, B, A, …) so machine drift from other work hits both alike. Prints, per scenario and key, the
 * median CPU µs/req and req/s of each side and the median of the per-pair B/A ratios.
 *   node bench/ab.ts --a HEAD [--b <ref>] [--pairs 6] [--only nonstream,stream64] [--key live,test,live-budget]
 * The stacks idle while the other is measured; run it only for comparisons, not for the report.
 */
import { parseArgs } from 'node:util';
import { startStack, type Stack } from './stack.ts';
import { measure, type Measurement } from './measure.ts';
import { SCENARIOS, type ScenarioId } from './scenarios.ts';
import { describeRef } from './git.ts';

const { values } = parseArgs({
  options: {
    a: { type: 'string', default: 'HEAD' },
    b: { type: 'string' },
    pairs: { type: 'string', default: '6' },
    only: { type: 'string', default: 'nonstream' },
    key: { type: 'string', default: 'live,test' },
    seconds: { type: 'string', default: '2' },
  },
});
const pairs = Number(values.pairs);
const seconds = Number(values.seconds);
const ids = values.only.split(',') as ScenarioId[];
const keys = values.key.split(',') as ('live' | 'test' | 'live-budget')[];
const a = describeRef(values.a);
const b = describeRef(values.b);

const median = (xs: number[]) => {
  const s = [...xs].sort((x, y) => x - y);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
};

// live-budget: a live key with a budget it never reaches (docs/keys.md); needs a gateway with key budgets on both sides.
const start = (ref: string | undefined) =>
  startStack({ reference: false, workers: false, budgetKey: keys.includes('live-budget'), ...(ref && { ref }) });
const stacks: [Stack, Stack] = [await start(a.sha), await start(b.sha)];
process.stdout.write(`A: ${a.label}\nB: ${b.label}\n`);
try {
  for (const id of ids) {
    const s0 = SCENARIOS.find((x) => x.id === id);
    if (!s0) throw new Error(`unknown scenario ${id}`);
    const s = { ...s0, spec: (t: Parameters<typeof s0.spec>[0], q: boolean) => ({ ...s0.spec(t, q), warmupS: 0.5, durationS: seconds }) };
    for (const key of keys) {
      const runs: [Measurement[], Measurement[]] = [[], []];
      const one = async (side: 0 | 1) => {
        const st = stacks[side];
        const t = st.targets.find((x) => x.name === `tollgate/${key}`)!;
        runs[side].push(await measure(s, t, runs[side].length, false, st.pids));
      };
      // Warm both (JIT, pools, key cache) before anything counts.
      for (const side of [0, 1] as const) {
        const st = stacks[side];
        const t = st.targets.find((x) => x.name === `tollgate/${key}`)!;
        await measure({ ...s, spec: (tt, q) => ({ ...s.spec(tt, q), durationS: 1 }) }, t, 0, false, st.pids);
      }
      for (let i = 0; i < pairs; i++) {
        const order: (0 | 1)[] = i % 2 ? [1, 0] : [0, 1];
        for (const side of order) await one(side);
      }
      const cpu = runs.map((r) => r.map((m) => m.cpuUsPerReq));
      const rps = runs.map((r) => r.map((m) => m.result.rps));
      const ratio = cpu[0]!.map((x, i) => cpu[1]![i]! / x);
      const redis = runs.map((r) => median(r.map((m) => m.redisUsPerReq ?? NaN)));
      process.stdout.write(
        `${id} ${key}: CPU µs/req A ${median(cpu[0]!).toFixed(1)} [${cpu[0]!.map((x) => x.toFixed(0)).join(' ')}]` +
          ` B ${median(cpu[1]!).toFixed(1)} [${cpu[1]!.map((x) => x.toFixed(0)).join(' ')}]` +
          ` · B/A median ${median(ratio).toFixed(3)} · req/s A ${median(rps[0]!).toFixed(0)} B ${median(rps[1]!).toFixed(0)}` +
          ` · Redis µs/req A ${redis[0]!.toFixed(1)} B ${redis[1]!.toFixed(1)}\n`,
      );
    }
  }
} finally {
  await Promise.all(stacks.map((st) => st.stop()));
}
