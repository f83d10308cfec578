/**
 * Turns the runs into the report: per scenario and target the median over rounds of each number, and
 * ratios taken within a round (direct, bare and Tollgate ran back to back, so drift hits all alike)
 * then the median over rounds. Checks the issue's targets and renders Markdown and JSON.
 */
import type { Measurement } from './measure.ts';
import { SCENARIOS, type ScenarioId } from './scenarios.ts';
import type { Target } from './stack.ts';
import { soakMarkdown, type SoakResult } from './soak-report.ts';

export interface Meta {
  node: string;
  cpus: number;
  cpuModel: string;
  commit: string;
  store: 'redis' | 'embedded';
  mode: 'quick' | 'full';
  rounds: number;
  date: string;
  /** Load average when the run started: other load on the machine skews everything. */
  loadAvg: number[];
  /** Extra node flags the gateway ran with. */
  gatewayNodeArgs: string[];
}

/** One scenario × target, aggregated. */
export interface Row {
  scenario: ScenarioId;
  target: Target['name'];
  rps: number;
  vsDirect: number;
  vsBare: number;
  /** req/s over bare+redis's in the same round (the bare proxy plus two Redis round trips). */
  vsBareRedis?: number;
  /** CPU per request over bare+redis's in the same round. */
  cpuVsBareRedis?: number;
  /** Lowest and highest per-round ratio to the bare proxy (how much to trust vsBare). */
  vsBareRange: [number, number];
  /** tollgate/live-w2 only: req/s over tollgate/live's (one worker) in the same round, and its range. */
  vsLive?: number;
  vsLiveRange?: [number, number];
  /** tollgate/live-w2 only: CPU per request over tollgate/live's in the same round. */
  cpuVsLive?: number;
  p50: number;
  p99: number;
  p999: number;
  /** Of one core, summed over the target's processes (a gateway's primary and workers). */
  cpuPct: number;
  cpuUsPerReq: number;
  /** redis-server CPU per request, µs, from /proc (tollgate targets on Redis): its network and syscall work included. */
  redisUsPerReq?: number;
  /** redis-server's time inside the gateway's commands per request, µs (`INFO commandstats`; tollgate targets on Redis). */
  redisCmdUsPerReq?: number;
  rssMaxMB: number;
  /** RSS just before the run, MB. */
  rssIdleMB: number;
  /** Read and write syscalls of the target process per completed request. */
  readsPerReq: number;
  writesPerReq: number;
  ttfbP50?: number;
  ttfbP99?: number;
  /** TTFB p99 minus the bare proxy's in the same round, ms. */
  ttfbP99OverBare?: number;
  /** SYNs dropped on full listen queues per run (median), warm-up included. */
  listenOverflows?: number;
  /** Streams whose first byte never came within 15 s after the window (summed over rounds). */
  ttfbCensored?: number;
  /** (peak RSS − idle RSS) / streams open, KB. */
  kbPerStream?: number;
  /** Latency added over direct in the same round, ms. */
  addedP50?: number;
  addedP99?: number;
  errors: number;
  non2xx: number;
  /** CPU used by processes outside the benchmark during the window, % of one core (median). */
  foreignPct: number;
}

export interface Check {
  what: string;
  target: string;
  got: string;
  /** null: not a target but the issue's reference point, for calibrating this machine. */
  pass: boolean | null;
}

export interface Report {
  meta: Meta;
  rows: Row[];
  checks: Check[];
  measurements: Measurement[];
  /** The soak phase (bench/soak.ts); absent with --no-soak, without redis-server, and in reports before it. */
  soak?: SoakResult;
}

const TARGETS: Target['name'][] = ['direct', 'bare', 'bare+redis', 'tollgate/test', 'tollgate/live', 'tollgate/live-w2'];
/**
 * The hot-path issue's reference point: on its 2-core machine, under wrk, the bare passthrough plus two
 * autopipelined Redis round trips reached these shares of the bare proxy's req/s (11,900 / 21,800 and
 * 7,900 / 10,500); the live-key targets are set against that target in the same run.
 */
const REFERENCE: Partial<Record<ScenarioId, number>> = { nonstream: 0.55, stream64: 0.75 };

function median(xs: number[]): number {
  const v = xs.filter((x) => Number.isFinite(x)).sort((a, b) => a - b);
  if (v.length === 0) return NaN;
  const m = v.length >> 1;
  return v.length % 2 ? v[m]! : (v[m - 1]! + v[m]!) / 2;
}

/** Aggregates measurements into rows and checks. */
export function buildReport(meta: Meta, ms: Measurement[], soak?: SoakResult): Report {
  const rows: Row[] = [];
  const get = (s: ScenarioId, t: Target['name'], round: number) => ms.find((m) => m.scenario === s && m.target === t && m.round === round);
  for (const sc of SCENARIOS) {
    for (const tn of TARGETS) {
      const mine = ms.filter((m) => m.scenario === sc.id && m.target === tn);
      if (mine.length === 0) continue;
      const within = (f: (m: Measurement, ref: Measurement) => number, ref: Target['name']) =>
        median(
          mine.map((m) => {
            const r = get(sc.id, ref, m.round);
            return r ? f(m, r) : NaN;
          }),
        );
      const med = (f: (m: Measurement) => number) => median(mine.map(f));
      const perRound = (ref: Target['name']) =>
        mine
          .map((m) => {
            const b = get(sc.id, ref, m.round);
            return b ? m.result.rps / b.result.rps : NaN;
          })
          .filter(Number.isFinite);
      const range = (xs: number[]): [number, number] => [Math.min(...xs), Math.max(...xs)];
      const row: Row = {
        scenario: sc.id,
        target: tn,
        rps: med((m) => m.result.rps),
        vsDirect: within((m, r) => m.result.rps / r.result.rps, 'direct'),
        vsBare: within((m, r) => m.result.rps / r.result.rps, 'bare'),
        vsBareRange: range(perRound('bare')),
        ...(tn === 'tollgate/live-w2' && {
          vsLive: within((m, r) => m.result.rps / r.result.rps, 'tollgate/live'),
          vsLiveRange: range(perRound('tollgate/live')),
          cpuVsLive: within((m, r) => m.cpuUsPerReq / r.cpuUsPerReq, 'tollgate/live'),
        }),
        ...(ms.some((m) => m.target === 'bare+redis' && m.scenario === sc.id) && {
          vsBareRedis: within((m, r) => m.result.rps / r.result.rps, 'bare+redis'),
          cpuVsBareRedis: within((m, r) => m.cpuUsPerReq / r.cpuUsPerReq, 'bare+redis'),
        }),
        p50: med((m) => m.result.latency.p50),
        p99: med((m) => m.result.latency.p99),
        p999: med((m) => m.result.latency.p999),
        cpuPct: med((m) => m.proc.cpuPct),
        cpuUsPerReq: med((m) => m.cpuUsPerReq),
        ...(mine.some((m) => m.redisUsPerReq !== undefined) && { redisUsPerReq: med((m) => m.redisUsPerReq ?? NaN) }),
        ...(mine.some((m) => m.redisCmdUsPerReq !== undefined) && { redisCmdUsPerReq: med((m) => m.redisCmdUsPerReq ?? NaN) }),
        rssMaxMB: med((m) => m.proc.rssMaxMB),
        rssIdleMB: med((m) => m.rssIdleMB),
        readsPerReq: med((m) => m.proc.reads / m.result.requests),
        writesPerReq: med((m) => m.proc.writes / m.result.requests),
        foreignPct: med((m) => m.proc.foreignPct),
        errors: mine.reduce((a, m) => a + m.result.errors, 0),
        non2xx: mine.reduce((a, m) => a + Object.values(m.result.statuses).reduce((x, y) => x + y, 0), 0),
      };
      if (sc.id === 'slow1000') {
        row.ttfbP50 = med((m) => m.result.ttfb?.p50 ?? NaN);
        row.ttfbP99 = med((m) => m.result.ttfb?.p99 ?? NaN);
        row.ttfbP99OverBare = within((m, r) => (m.result.ttfb?.p99 ?? NaN) - (r.result.ttfb?.p99 ?? NaN), 'bare');
        row.listenOverflows = med((m) => m.listenOverflows ?? NaN);
        row.ttfbCensored = mine.reduce((a, m) => a + (m.result.ttfbCensored ?? 0), 0);
        // Approximate: V8 keeps (and sometimes returns) heap from the previous run, so the baseline is the
        // lower of the RSS before the client started and at the window's start.
        row.kbPerStream = med((m) => ((m.proc.rssMaxMB - Math.min(m.rssIdleMB, m.proc.rssStartMB)) * 1000) / (m.result.maxOpen || NaN));
      }
      if (sc.id === 'rate2000' || sc.id === 'serial') {
        row.addedP50 = within((m, r) => m.result.latency.p50 - r.result.latency.p50, 'direct');
        row.addedP99 = within((m, r) => m.result.latency.p99 - r.result.latency.p99, 'direct');
      }
      rows.push(row);
    }
  }
  return { meta, rows, checks: [...checks(rows), ...ledgerChecks(rows, soak)], measurements: ms, ...(soak && { soak }) };
}

/** The hot-path issue's targets (wrk, same run, this 2-core machine), each met or not. */
function checks(rows: Row[]): Check[] {
  const row = (s: ScenarioId, t: Target['name']) => rows.find((r) => r.scenario === s && r.target === t);
  const out: Check[] = [];
  const live = (s: ScenarioId) => row(s, 'tollgate/live');
  const vsRef = (s: ScenarioId, min: number, what: string) => {
    const r = live(s);
    if (r?.vsBareRedis !== undefined)
      out.push({
        what,
        target: `≥ ${min.toFixed(2)}× bare+redis`,
        got: `${fmt(r.vsBareRedis, 2)}× (${fmt(r.vsBare, 2)}× bare)`,
        pass: r.vsBareRedis >= min,
      });
  };
  vsRef('nonstream', 0.85, 'live key, non-streaming req/s');
  const ns = live('nonstream');
  if (ns?.cpuVsBareRedis !== undefined)
    out.push({
      what: 'live key, non-streaming CPU per request',
      target: '≤ 1.30× bare+redis',
      got: `${fmt(ns.cpuVsBareRedis, 2)}× (${fmt(ns.cpuUsPerReq, 0)} µs)`,
      pass: ns.cpuVsBareRedis <= 1.3,
    });
  vsRef('stream64', 0.9, 'live key, streaming 64 tokens req/s');
  for (const s of ['nonstream', 'stream64'] as const) {
    const [t, l] = [row(s, 'tollgate/test'), live(s)];
    if (t && l)
      out.push({
        what: `test key CPU per request, ${SCENARIOS.find((x) => x.id === s)!.title}`,
        target: "≤ the live key's",
        got: `${fmt(t.cpuUsPerReq, 0)} vs ${fmt(l.cpuUsPerReq, 0)} µs`,
        pass: t.cpuUsPerReq <= l.cpuUsPerReq,
      });
  }
  for (const [s, ref] of Object.entries(REFERENCE) as [ScenarioId, number][]) {
    const r = row(s, 'bare+redis');
    if (r)
      out.push({
        what: `calibration: bare + 2 Redis round trips, ${SCENARIOS.find((x) => x.id === s)!.title}`,
        target: `${ref.toFixed(2)}× bare on the issue's machine`,
        got: `${r.vsBare.toFixed(2)}×`,
        pass: null,
      });
  }
  const slow = live('slow1000');
  if (slow) {
    const [lo, hi] = slow.vsBareRange;
    out.push({
      what: 'live key, 1,000 slow streams req/s',
      target: '≥ 0.95× bare',
      got: `${fmt(slow.vsBare, 2)}×${hi - lo >= 0.005 ? ` (rounds ${fmt(lo, 2)}–${fmt(hi, 2)})` : ''}`,
      pass: slow.vsBare >= 0.95,
    });
    out.push({
      what: 'live key, 1,000 slow streams: gateway RSS',
      target: '≤ 300 MB',
      got: `${slow.rssMaxMB.toFixed(0)} MB`,
      pass: slow.rssMaxMB <= 300,
    });
    const d = slow.ttfbP99OverBare ?? NaN;
    out.push({ what: 'live key, 1,000 slow streams: TTFB p99 over bare', target: '≤ 20 ms', got: `${fmt(d, 1)} ms`, pass: d <= 20 });
  }
  for (const t of ['tollgate/test', 'tollgate/live'] as const) {
    const r = row('rate2000', t);
    if (!r) continue;
    out.push({
      what: `${t.slice(9)} key, 2,000 req/s: added p50 over direct`,
      target: '≤ 0.3 ms',
      got: `${fmt(r.addedP50 ?? NaN, 2)} ms`,
      pass: (r.addedP50 ?? Infinity) <= 0.3,
    });
    out.push({
      what: `${t.slice(9)} key, 2,000 req/s: added p99 over direct`,
      target: '≤ 1.5 ms',
      got: `${fmt(r.addedP99 ?? NaN, 2)} ms`,
      pass: (r.addedP99 ?? Infinity) <= 1.5,
    });
  }
  return out;
}

/**
 * Issue 15's targets: Redis time per live request (the first scenario that measured it, non-streaming
 * when it ran) and Redis memory retained per live request once exported, trimmed and reaped (the soak).
 * Rows are left out when the run has no such figure (embedded store, --no-soak, older reports).
 */
function ledgerChecks(rows: Row[], soak: SoakResult | undefined): Check[] {
  const out: Check[] = [];
  const live = rows.find((r) => r.target === 'tollgate/live' && r.redisCmdUsPerReq !== undefined);
  if (live) {
    const cpu = live.redisUsPerReq === undefined ? '' : `; redis-server CPU ${fmt(live.redisUsPerReq, 1)} µs (/proc)`;
    out.push({
      what: 'Redis time per live request (commandstats)',
      target: '≤ 10 µs',
      got: `${fmt(live.redisCmdUsPerReq!, 1)} µs, ${SCENARIOS.find((s) => s.id === live.scenario)!.title}${cpu}`,
      pass: live.redisCmdUsPerReq! <= 10,
    });
  }
  if (soak && soak.rounds.length > 1) {
    const after = soak.rounds.map((r) => r.usedAfter);
    out.push({
      what: 'Redis memory retained per live request after export + trim (soak)',
      target: '≤ 10 bytes',
      got: `${fmt(soak.retainedPerReq, 1)} bytes (used_memory after each round's passes: ${after.map((x) => `${(x / 1e6).toFixed(3)}`).join(' → ')} MB)`,
      pass: soak.retainedPerReq <= 10,
    });
  }
  return out;
}

function fmt(v: number, d: number): string {
  return Number.isFinite(v) ? v.toFixed(d) : '–';
}

/** "Workers": the live key on two workers against one, per scenario (absent in reports before the target). */
function workersSection(rows: Row[], L: string[]): void {
  const pairs = rows
    .filter((x) => x.target === 'tollgate/live-w2')
    .map((w) => [rows.find((x) => x.scenario === w.scenario && x.target === 'tollgate/live'), w] as const)
    .filter((p): p is [Row, Row] => p[0] !== undefined);
  if (pairs.length === 0) return;
  L.push(
    '',
    '## Workers: the live key on 2 workers against 1',
    '',
    'tollgate/live-w2 is a second gateway from the same `src/main.ts` with `server.workers: 2` (a node:cluster primary and two workers sharing the port), on the same Redis, loaded with the same live key right after tollgate/live. Its CPU, RSS and syscalls are summed over the primary and both workers. The load generator, simulator and Redis share the same cores, so a second worker can only use what they leave: read "× 1 worker" with the CPU % beside it. On a machine with spare cores the ratio approaches 2 only if Redis and the upstream keep up.',
    '',
    '| scenario | req/s 1 worker | req/s 2 workers | × 1 worker | CPU % 1 / 2 | CPU µs/req 1 / 2 | CPU/req × 1 worker | Redis CPU µs/req 1 / 2 | p50 ms 1 / 2 | p99 ms 1 / 2 | RSS MB 1 / 2 |',
    '|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|',
  );
  for (const [one, two] of pairs) {
    const [lo, hi] = two.vsLiveRange ?? [NaN, NaN];
    const both = (f: (x: Row) => number | undefined, d: number) => `${fmt(f(one) ?? NaN, d)} / ${fmt(f(two) ?? NaN, d)}`;
    L.push(
      `| ${SCENARIOS.find((s) => s.id === one.scenario)!.title} | ${fmt(one.rps, 0)} | ${fmt(two.rps, 0)} | ${fmt(two.vsLive ?? NaN, 2)}${hi - lo >= 0.005 ? ` (${fmt(lo, 2)}–${fmt(hi, 2)})` : ''} | ${both((x) => x.cpuPct, 0)} | ${both((x) => x.cpuUsPerReq, 0)} | ${fmt(two.cpuVsLive ?? NaN, 2)} | ${both((x) => x.redisUsPerReq, 0)} | ${both((x) => x.p50, 2)} | ${both((x) => x.p99, 2)} | ${both((x) => x.rssMaxMB, 0)} |`,
    );
  }
}

/** The Markdown report. */
export function toMarkdown(r: Report, chartFile?: string): string {
  const m = r.meta;
  const L: string[] = [];
  const hasWorkers = r.rows.some((x) => x.target === 'tollgate/live-w2');
  L.push(`# Tollgate load benchmark (${m.mode})`, '');
  L.push(
    `Node ${m.node} · ${m.cpus} CPUs (${m.cpuModel}) · commit \`${m.commit}\` · store: **${m.store === 'redis' ? 'Redis (redis-server, loopback)' : 'embedded (in the gateway process: --embedded, or no redis-server on PATH)'}** · ${m.rounds} round(s) · ${m.date} · load average at start ${m.loadAvg.map((x) => x.toFixed(2)).join(' ')}${m.gatewayNodeArgs.length ? ` · gateway node flags \`${m.gatewayNodeArgs.join(' ')}\`` : ''}`,
    '',
  );
  L.push(
    'Load generator (wrk for closed loops), simulator, Redis, bare proxy and gateway share the same cores. Each number is the median over rounds (the × bare column also shows the lowest–highest round); ratios are taken within a round (targets run back to back: direct → bare → ' +
      (r.rows.some((x) => x.target === 'bare+redis') ? 'bare+redis (the bare proxy plus two autopipelined Redis round trips) → ' : '') +
      'tollgate/test → tollgate/live' +
      (hasWorkers ? ' → tollgate/live-w2 (the live key on a second gateway with `server.workers: 2`, same Redis)' : '') +
      "), then the median. CPU and RSS are those of the target's process (the simulator for direct, the proxy otherwise" +
      (hasWorkers ? '; for tollgate/live-w2 summed over the primary and its two workers' : '') +
      '); CPU % is of one core; "Redis CPU µs/req" is redis-server\'s CPU per request from /proc, on the same cores (its network and syscall work included); "Redis cmd µs/req" is its time inside the gateway\'s commands per request, from `INFO commandstats` (issue 15\'s measure); syscalls/req are the target process\'s read + write system calls per completed request (/proc/<pid>/io), a large share of a proxy\'s CPU on loopback; "others CPU %" is what processes outside the benchmark used meanwhile (other work on a shared machine: high values make a row untrustworthy).',
    '',
  );
  const all = r.measurements;
  if (all.length) {
    L.push(
      `Across all ${all.length} runs: median CPU used by other processes ${median(all.map((x) => x.proc.foreignPct)).toFixed(0)} % (max ${Math.max(...all.map((x) => x.proc.foreignPct)).toFixed(0)} %), median CPU stolen by the hypervisor ${median(all.map((x) => x.proc.stealPct)).toFixed(1)} % (of one core).`,
      '',
    );
  }
  if (chartFile) L.push(`![ratios](${chartFile})`, '');
  L.push('## Targets (wrk, this run)', '', '| what | target | got | |', '|---|---|---|---|');
  for (const c of r.checks)
    L.push(`| ${c.what} | ${c.target} | ${c.got} | ${c.pass === null ? 'calibration' : c.pass ? 'met' : '**not met**'} |`);
  L.push('', '## Throughput and latency', '');
  L.push(
    '| scenario | target | req/s | × direct | × bare | × bare+redis | p50 ms | p99 ms | p99.9 ms | CPU % | CPU µs/req | Redis CPU µs/req | Redis cmd µs/req | syscalls/req r+w | RSS MB | errors/non-2xx | others CPU % |',
  );
  L.push('|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|');
  for (const x of r.rows) {
    const title = SCENARIOS.find((s) => s.id === x.scenario)!.title;
    L.push(
      `| ${title} | ${x.target} | ${fmt(x.rps, 0)} | ${fmt(x.vsDirect, 2)} | ${fmt(x.vsBare, 2)}${x.vsBareRange[1] - x.vsBareRange[0] >= 0.005 ? ` (${fmt(x.vsBareRange[0], 2)}–${fmt(x.vsBareRange[1], 2)})` : ''} | ${x.vsBareRedis === undefined ? '–' : fmt(x.vsBareRedis, 2)} | ${fmt(x.p50, 2)} | ${fmt(x.p99, 2)} | ${fmt(x.p999, 2)} | ${fmt(x.cpuPct, 0)} | ${fmt(x.cpuUsPerReq, 0)} | ${x.redisUsPerReq === undefined ? '–' : fmt(x.redisUsPerReq, 0)} | ${x.redisCmdUsPerReq === undefined ? '–' : fmt(x.redisCmdUsPerReq, 1)} | ${fmt(x.readsPerReq, 1)}+${fmt(x.writesPerReq, 1)} | ${fmt(x.rssMaxMB, 0)} | ${x.errors}/${x.non2xx} | ${fmt(x.foreignPct, 0)} |`,
    );
  }
  workersSection(r.rows, L);
  const slow = r.rows.filter((x) => x.scenario === 'slow1000');
  if (slow.length) {
    L.push(
      '',
      '## 1,000 slow streams: time to first byte and memory',
      '',
      'Stream latency above is the whole stream (64 tokens × 20 ms ≈ 1.3 s). TTFB and stream latency count streams started after the first 2 s, when the 1,000 connections are open; "SYNs dropped" counts the whole run, the connection ramp included (a proxy that accepts too slowly overflows its listen queue of 511, and those clients wait 1–3 s to retry).',
      '',
    );
    L.push(
      '| target | TTFB p50 ms | TTFB p99 ms | TTFB p99 over bare ms | streams without a first byte | SYNs dropped (listen queue full) | RSS before MB | peak RSS MB | RSS growth per open stream KB |',
      '|---|--:|--:|--:|--:|--:|--:|--:|--:|',
    );
    for (const x of slow) {
      L.push(
        `| ${x.target} | ${fmt(x.ttfbP50 ?? NaN, 2)} | ${fmt(x.ttfbP99 ?? NaN, 2)} | ${x.target === 'bare' ? '0' : fmt(x.ttfbP99OverBare ?? NaN, 2)} | ${x.ttfbCensored ?? 0} | ${fmt(x.listenOverflows ?? NaN, 0)} | ${fmt(x.rssIdleMB, 0)} | ${fmt(x.rssMaxMB, 0)} | ${x.target === 'direct' ? '–' : fmt(x.kbPerStream ?? NaN, 1)} |`,
      );
    }
  }
  const rate = r.rows.filter((x) => x.scenario === 'rate2000');
  if (rate.length) {
    L.push(
      '',
      '## Fixed 2,000 req/s: latency added over direct',
      '',
      "Open loop: latency runs from each request's scheduled start, so stalls are not hidden.",
      '',
    );
    L.push('| target | req/s | p50 ms | p99 ms | added p50 ms | added p99 ms |', '|---|--:|--:|--:|--:|--:|');
    for (const x of rate)
      L.push(
        `| ${x.target} | ${fmt(x.rps, 0)} | ${fmt(x.p50, 3)} | ${fmt(x.p99, 3)} | ${x.target === 'direct' ? '0' : fmt(x.addedP50 ?? NaN, 3)} | ${x.target === 'direct' ? '0' : fmt(x.addedP99 ?? NaN, 3)} |`,
      );
  }
  const serial = r.rows.filter((x) => x.scenario === 'serial');
  if (serial.length) {
    L.push(
      '',
      '## One request at a time: the critical path',
      '',
      "Closed loop with one connection (`--only serial`): no queueing, so each target's latency is the work on its request's path plus its waits (upstream, Redis, process wake-ups).",
      '',
    );
    const bareP50 = serial.find((x) => x.target === 'bare')?.p50 ?? NaN;
    L.push('| target | req/s | p50 ms | p99 ms | added p50 over direct ms | p50 over bare ms |', '|---|--:|--:|--:|--:|--:|');
    for (const x of serial)
      L.push(
        `| ${x.target} | ${fmt(x.rps, 0)} | ${fmt(x.p50, 3)} | ${fmt(x.p99, 3)} | ${x.target === 'direct' ? '0' : fmt(x.addedP50 ?? NaN, 3)} | ${x.target === 'direct' ? '–' : fmt(x.p50 - bareP50, 3)} |`,
      );
  }
  if (r.soak) {
    L.push('', '## Ledger soak: Redis memory per live request with the export on', '', ...soakMarkdown(r.soak));
  }
  L.push('');
  return L.join('\n');
}
