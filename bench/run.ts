/**
 * `npm run bench` (about 13 min, 5 rounds) and `npm run bench -- --quick` (about 80 s, 1 round).
 * Starts the simulator, Redis (when redis-server is on PATH), the bare proxy and the gateway (plus a
 * second one with two workers on Redis) as separate processes; runs every scenario against direct →
 * bare → bare+redis → tollgate/test → tollgate/live → tollgate/live-w2, one after the other, round
 * after round; writes the report to bench/results/.
 *   --quick            1.2 s windows (1.5 s for slow streams), one round; writes bench/results/quick.{md,json,svg}
 *   --rounds N         rounds (default 5; quick 1)
 *   --only a,b         scenarios: nonstream, stream64, responses64, slow1000, prompt32k, rate2000; serial (c=1) only when named
 *   --embedded         the embedded store even when redis-server exists
 *   --ref <git ref>    run the gateway from that commit's src/ (default: the working tree)
 *   --no-reference     leave out the bare+redis target (bare proxy + two autopipelined Redis round trips; on by default)
 *   --no-workers       leave out the tollgate/live-w2 target (a gateway with server.workers: 2; on by default on Redis)
 *   --warm-seconds N   the unmeasured pass per target before round 1, half non-streaming, half streaming
 *                      (default 30; quick 1): the gateway's JIT settles only after tens of thousands of requests
 *   --node-args="…"    extra node flags for the gateway (e.g. --node-args="--max-semi-space-size=32")
 *   --no-soak          leave out the last phase: Redis memory per live request with the ledger export on (bench/soak.ts)
 *   --render <file>    no load: rebuild the Markdown/SVG (and README section) from a saved report JSON
 * A full run writes bench/results/latest.{md,json,svg} (committed); every run also keeps a copy
 * under bench/results/runs/ (not committed).
 */
import { parseArgs } from 'node:util';
import { cpus, loadavg } from 'node:os';
import { mkdirSync, readFileSync, writeFileSync, existsSync } from 'node:fs';
import { join } from 'node:path';
import { hasRedis, startStack } from './stack.ts';
import { measure, type Measurement } from './measure.ts';
import { SCENARIOS, type ScenarioId } from './scenarios.ts';
import { buildReport, toMarkdown, type Meta, type Report } from './report.ts';
import { toSvg } from './chart.ts';
import { describeRef } from './git.ts';
import type { SoakResult } from './soak-report.ts';

const { values } = parseArgs({
  allowNegative: true,
  options: {
    quick: { type: 'boolean', default: false },
    rounds: { type: 'string' },
    only: { type: 'string' },
    embedded: { type: 'boolean', default: false },
    ref: { type: 'string' },
    reference: { type: 'boolean', default: true },
    workers: { type: 'boolean', default: true },
    'node-args': { type: 'string' },
    soak: { type: 'boolean', default: true },
    render: { type: 'string' },
    'warm-seconds': { type: 'string' },
  },
});
const gatewayNodeArgs = values['node-args']?.split(' ').filter(Boolean) ?? [];
const quick = values.quick;
const warmS = values['warm-seconds'] ? Number(values['warm-seconds']) : quick ? 1 : 30;
if (!(warmS >= 0.2)) throw new Error('--warm-seconds must be at least 0.2');
const rounds = values.rounds ? Number(values.rounds) : quick ? 1 : 5;
if (!Number.isInteger(rounds) || rounds < 1 || rounds > 10) throw new Error('--rounds must be 1-10 (each round is ~2 min in full mode)');
const only = values.only?.split(',').filter(Boolean) as ScenarioId[] | undefined;
const unknown = only?.filter((id) => !SCENARIOS.some((s) => s.id === id));
if (unknown?.length) throw new Error(`unknown scenario(s): ${unknown.join(', ')}`);
const scenarios = SCENARIOS.filter((s) => (only ? only.includes(s.id) : !s.optIn));

const { sha: ref, label: commitLabel } = describeRef(values.ref);

/** Starts the stack, runs every scenario × target × round, stops the stack; returns the report. */
async function runAll(): Promise<Report> {
  const t0 = Date.now();
  const log = (s: string) => process.stdout.write(`[${((Date.now() - t0) / 1000).toFixed(0).padStart(3)} s] ${s}\n`);
  const meta0 = { loadAvg: loadavg(), date: new Date().toISOString() };
  const stack = await startStack({
    embedded: values.embedded,
    reference: values.reference && !values.embedded,
    workers: values.workers && !values.embedded,
    gatewayNodeArgs,
    ...(ref && { ref }),
  });
  const w2 = stack.targets.find((t) => t.workers);
  log(
    `stack up: store=${stack.store}, gateway stderr in ${stack.dir} (removed at the end)${gatewayNodeArgs.length ? `, gateway node flags: ${gatewayNodeArgs.join(' ')}` : ''}; ${w2 ? `${w2.name}: primary pid ${w2.pid} + ${w2.workers} workers` : `no workers target (${values.workers ? 'needs the Redis store' : '--no-workers'})`}`,
  );
  const ms: Measurement[] = [];
  try {
    // One unmeasured pass per target so JIT, pools and the key cache are warm before round 1: non-streaming
    // and streaming, half of --warm-seconds each. V8 keeps compiling the gateway's code for tens of
    // thousands of requests (bench/results/instructions-vs-bare.md: 626k instructions per request after
    // 5,000, 436–454k after 30,000, 421k after 60,000), and a round's CPU per request would count that
    // compiling, which a long-running gateway has long finished.
    log(`warming every target up for ${warmS} s`);
    for (const t of stack.targets)
      for (const id of ['nonstream', 'stream64'] as const) {
        const warm = SCENARIOS.find((s) => s.id === id)!;
        await measure(
          { ...warm, spec: (tt, q) => ({ ...warm.spec(tt, q), warmupS: 0, durationS: warmS / 2 }) },
          t,
          0,
          true,
          stack.pids,
          stack.redisScriptCommands,
        );
      }
    for (let round = 1; round <= rounds; round++) {
      for (const s of scenarios) {
        for (const t of stack.targets) {
          const m = await measure(s, t, round, quick, stack.pids, stack.redisScriptCommands);
          ms.push(m);
          const r = m.result;
          const extra = r.ttfb ? ` ttfb p99 ${r.ttfb.p99.toFixed(1)} ms, open ${r.maxOpen}` : '';
          const bad = r.errors + Object.values(r.statuses).reduce((a, b) => a + b, 0);
          log(
            `round ${round}/${rounds} ${s.id.padEnd(9)} → ${t.name.padEnd(16)} ${r.rps.toFixed(0).padStart(6)} req/s  p50 ${r.latency.p50.toFixed(2)} p99 ${r.latency.p99.toFixed(2)} ms  cpu ${m.proc.cpuPct.toFixed(0)}% rss ${m.proc.rssMaxMB.toFixed(0)} MB${extra}${m.proc.foreignPct > 10 ? `  (others used ${m.proc.foreignPct.toFixed(0)}% CPU)` : ''}${bad ? `  ${bad} errors/non-2xx` : ''}`,
          );
          // 1,000 streams cut at the window's end: let the proxies finish tearing them down.
          if (s.client === 'streams') await new Promise((res) => setTimeout(res, quick ? 300 : 1000));
        }
      }
    }
  } finally {
    await stack.stop();
  }

  // Last, on its own redis-server with the load phases' processes stopped: a memory figure, not a speed one.
  // It runs the working tree's src/ in this process (imported only now), so not with --ref.
  let soak: SoakResult | undefined;
  const noSoak = !values.soak
    ? '--no-soak'
    : values.embedded || !hasRedis()
      ? 'needs redis-server and no --embedded'
      : ref
        ? 'not with --ref'
        : undefined;
  if (noSoak) log(`no soak phase (${noSoak})`);
  else {
    const size = quick ? { rounds: 3, requests: 1000 } : { rounds: 4, requests: 3000 };
    log(`soak: ${size.rounds + 1} rounds of ${size.requests} live requests, ledger export on (bench/soak.ts)`);
    const { runSoak } = await import('./soak.ts');
    soak = await runSoak({ ...size, concurrency: 16, log });
  }

  const meta: Meta = {
    node: process.version,
    cpus: cpus().length,
    cpuModel: cpus()[0]?.model.trim() ?? 'unknown',
    commit: commitLabel,
    store: stack.store,
    mode: quick ? 'quick' : 'full',
    rounds,
    gatewayNodeArgs,
    ...meta0,
  };
  return buildReport(meta, ms, soak);
}

const report: Report = values.render ? (JSON.parse(readFileSync(values.render, 'utf8')) as Report) : await runAll();
// Re-rendering rebuilds rows and checks from the raw measurements, so report changes apply to old runs.
if (values.render) Object.assign(report, buildReport(report.meta, report.measurements, report.soak));
const meta = report.meta;
const dir = join(import.meta.dirname, 'results');
mkdirSync(join(dir, 'runs'), { recursive: true });
const base = meta.mode === 'quick' ? 'quick' : 'latest';
const previous =
  !values.render && existsSync(join(dir, `${base}.json`))
    ? (JSON.parse(readFileSync(join(dir, `${base}.json`), 'utf8')) as Report)
    : undefined;
const md = toMarkdown(report, `${base}.svg`);
writeFileSync(join(dir, `${base}.md`), md);
writeFileSync(join(dir, `${base}.json`), `${JSON.stringify(report, null, 1)}\n`);
writeFileSync(join(dir, `${base}.svg`), toSvg(report));
if (!values.render)
  writeFileSync(join(dir, 'runs', `${meta.date.replace(/[:.]/g, '-')}-${meta.mode}.json`), `${JSON.stringify(report, null, 1)}\n`);
process.stdout.write(`\n${md}\n`);
// A full run also refreshes the results section of bench/README.md (between the two markers).
const readme = join(import.meta.dirname, 'README.md');
if (base === 'latest' && existsSync(readme)) {
  const text = readFileSync(readme, 'utf8');
  const [a, b] = ['<!-- latest:start -->', '<!-- latest:end -->'];
  const i = text.indexOf(a);
  const j = text.indexOf(b);
  if (i >= 0 && j > i) {
    const body = md
      .replace(/^# .*\n/, '')
      .replace(/^## /gm, '### ')
      .replace('](latest.svg)', '](results/latest.svg)');
    writeFileSync(readme, `${text.slice(0, i + a.length)}\n${body}\n${text.slice(j)}`);
  }
}
if (previous) {
  process.stdout.write(`Change of the live key's req/s vs the previous ${base}.json (${previous.meta.commit}):\n`);
  for (const r of report.rows.filter((x) => x.target.startsWith('tollgate/live'))) {
    const p = previous.rows.find((x) => x.scenario === r.scenario && x.target === r.target);
    if (p)
      process.stdout.write(
        `  ${r.scenario.padEnd(9)} ${r.target.padEnd(16)} ×bare ${p.vsBare.toFixed(2)} → ${r.vsBare.toFixed(2)}, p99 ${p.p99.toFixed(2)} → ${r.p99.toFixed(2)} ms\n`,
      );
  }
}
process.stdout.write(`wrote bench/results/${base}.{md,json,svg}\n`);
