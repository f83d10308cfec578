/**
 * The gateway's instructions per live non-streaming request, counted by valgrind's callgrind: a
 * deterministic A/B where CPU time is not (on the 2-core VMs here CPU µs/request move ±30 % from run to
 * run, so a 10 % step needs dozens of `bench/ab.ts` pairs; repeats of this agree within ~1 %). For each
 * git ref (or the working tree, `--ref .`): simulator and redis-server as in bench/stack.ts, the gateway
 * of that ref under `valgrind --tool=callgrind --instr-atstart=no`, a warm-up with counting off (the JIT
 * settles), then counting on for `--n` requests at concurrency `--c`, and the count dumped.
 * `--gc` runs the same load without valgrind under `--trace-gc-nvp` and reports the bytes allocated,
 * surviving a young-generation collection and promoted per request (how issue 24's regression was found:
 * a closure per request tripled what survived).
 *   node bench/instructions.ts --ref 78dee2a --ref . [--n 4000] [--warmup 30000] [--c 8] [--gc] [--leases]
 * `--ref bare` and `--ref bare+redis`: the bench's reference proxies instead of a gateway (bench/bare-proxy.ts
 * of the working tree; bare+redis adds its two Redis round trips), under the same load: the deterministic
 * form of the full bench's "CPU per request × bare+redis".
 * `--keep`: the callgrind dumps stay (one per thread; `-01` is the main thread) for callgrind_annotate; with
 * `--runtime`, V8's perf map too (`perf-<dump>.map`), which names the JIT code the dumps show as `???`.
 * `--key test`: the requests carry a test key (rate limits, no credit) instead of the live key.
 * `--stream`: the requests ask for a stream (`stream: true`, the full bench's stream64) instead of one JSON body.
 * `--leases`: every gateway with `credit.leases: true` (docs/ledger.md "Leases"; a ref older than the
 * setting refuses the config).
 * `--runtime`: also lists the main thread's calls into V8's C++ runtime by the JavaScript that made them
 * (callgrind's --separate-callers=4 and node's --perf-basic-prof; bench/runtime-calls.ts): how the
 * per-request runtime work of results/instructions-vs-bare.md was found. Counts move with the JIT's state
 * (a call site optimised with one-shape feedback makes no runtime call at all).
 * `--syscalls` (no valgrind): the same load twice, first for the user and kernel CPU per request from /proc,
 * then under `strace -c -f` for the syscalls per request (bench/process-costs.ts).
 * `--alloc` (no valgrind): the load under V8's sampling heap profiler, over the inspector, freed objects
 * included: bytes allocated per request by the function that allocated them.
 * valgrind slows the gateway ~50× while it counts: 30,000 warm-up + 4,000 counted requests take ~2 min per ref.
 * The warm-up is 30,000 because V8 compiles the gateway's code that long: after 5,000 (the default until
 * 2026-12-01) ~30 % of a count was compiling (bench/results/instructions-vs-bare.md).
 */
import { execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { parseArgs } from 'node:util';
import { describeRef } from './git.ts';
import { answers, freePort, start, type Proc } from './procs.ts';
import { accountLimits, gatewayConfig, MODEL, PRODUCTION_NODE_ARGS } from './stack.ts';
import { runtimeCalls } from './runtime-calls.ts';
import { bytesByFunction, cpuTicks, straceCounts, type SamplingNode } from './process-costs.ts';

const { values } = parseArgs({
  options: {
    ref: { type: 'string', multiple: true, default: ['.'] },
    n: { type: 'string', default: '4000' },
    warmup: { type: 'string', default: '30000' },
    c: { type: 'string', default: '8' },
    gc: { type: 'boolean', default: false },
    leases: { type: 'boolean', default: false },
    key: { type: 'string', default: 'live' },
    keep: { type: 'boolean', default: false },
    runtime: { type: 'boolean', default: false },
    syscalls: { type: 'boolean', default: false },
    alloc: { type: 'boolean', default: false },
    stream: { type: 'boolean', default: false },
  },
});
const N = Number(values.n);
/** `--key test`: a test key instead (rate-limited with bench/stack.ts's limits, no credit calls). */
const KEY_ENV = values.key === 'test' ? 'test' : 'live';
const WARM = Number(values.warmup);
/** `--stream`: streamed answers (64 SSE events each), as the full bench's stream64. */
const STREAM = values.stream === true;
const C = Number(values.c);
const dir = mkdtempSync(join(tmpdir(), 'tollgate-instr-'));
/** Pseudo-refs for the bench's reference proxies (bench/bare-proxy.ts of the working tree), same load. */
const REFERENCES = new Set(['bare', 'bare+redis']);

/** The gateway's working directory for a ref: its src/ exported (sharing node_modules), or this tree for '.'. */
function workdir(ref: string): { cwd: string; label: string } {
  if (ref === '.') return { cwd: process.cwd(), label: describeRef(undefined).label };
  if (REFERENCES.has(ref)) return { cwd: process.cwd(), label: `${ref} (bench/bare-proxy.ts)` };
  const { sha, label } = describeRef(ref);
  const root = join(dir, sha ?? ref);
  // A ref named twice (alternated pairs: --ref A --ref B --ref A --ref B) is exported once.
  if (existsSync(root)) return { cwd: root, label };
  mkdirSync(root);
  execFileSync('sh', ['-c', 'git archive --format=tar "$1" src package.json | tar -x -C "$2"', 'sh', sha ?? ref, root]);
  symlinkSync(join(process.cwd(), 'node_modules'), join(root, 'node_modules'));
  return { cwd: root, label };
}

const agent = new http.Agent({ keepAlive: true, maxSockets: 64 });
function post(url: string, headers: Record<string, string>, body: string): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      url,
      { method: 'POST', headers: { ...headers, 'content-length': String(Buffer.byteLength(body)) }, agent },
      (res) => {
        let text = '';
        res.setEncoding('utf8').on('data', (d: string) => (text += d));
        res.on('end', () => resolve({ status: res.statusCode!, text }));
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

/** n requests at concurrency c; throws on any non-200 (a refused request would not be the path measured). */
async function load(url: string, auth: string, n: number): Promise<void> {
  const body = JSON.stringify({
    model: MODEL,
    messages: [{ role: 'user', content: 'Say hello in one short sentence.' }],
    max_tokens: 64,
    ...(STREAM && { stream: true }),
    sim: { tokens: 64 },
  });
  let next = 0;
  const worker = async () => {
    while (next < n) {
      next++;
      const r = await post(url, { 'content-type': 'application/json', authorization: auth }, body);
      if (r.status !== 200) throw new Error(`${r.status} ${r.text}`);
    }
  };
  await Promise.all(Array.from({ length: C }, worker));
}

interface Result {
  label: string;
  /** `--alloc`: bytes allocated per request by the function that allocated them (V8's sampling heap profiler). */
  alloc?: { total: number; top: { fn: string; bytes: number }[] };
  /** `--syscalls`: CPU per request split by /proc into user and kernel time, and the syscalls behind the kernel's part. */
  sys?: { userUs: number; sysUs: number; calls: number; top: { name: string; calls: number }[] };
  irPerReq?: number;
  /** The main thread's share (JavaScript, the event loop, the main-thread GC). */
  mainIrPerReq?: number;
  /** `--runtime`: the main thread's V8 runtime calls by JavaScript caller (runtime-calls.ts). */
  runtime?: string | undefined;
  gc?: { allocated: number; survived: number; promoted: number; scavenges: number; markCompacts: number };
}

type Mode = 'callgrind' | 'gc' | 'syscalls' | 'alloc';

async function measure(ref: string, mode: Mode): Promise<Result> {
  const { cwd, label } = workdir(ref);
  const procs: Proc[] = [];
  try {
    const sim = await start('simulator', process.execPath, ['src/simulator/cli.ts', '--port', '0'], {
      ready: (l) => l.some((x) => x.startsWith('http')),
    });
    procs.push(sim);
    const simUrl = sim.lines.find((l) => l.startsWith('http'))!.trim();
    const redisPort = await freePort();
    procs.push(
      await start('redis', 'redis-server', ['--port', String(redisPort), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], {
        ready: (l) => l.some((x) => x.includes('Ready to accept connections')),
      }),
    );
    const [port, adminPort] = [await freePort(), await freePort()];
    const configFile = join(dir, `config-${randomBytes(4).toString('hex')}.json`);
    // bench/stack.ts's gateway config; a longer store timeout, as valgrind slows the gateway ~50×.
    writeFileSync(
      configFile,
      JSON.stringify({
        ...gatewayConfig(simUrl, port, adminPort, 1, accountLimits(cwd)),
        store: { command_timeout_ms: 60_000 },
        ...(values.leases && { credit: { leases: true } }),
      }),
    );
    const adminToken = randomBytes(24).toString('base64url');
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      TOLLGATE_ADMIN_TOKEN: adminToken,
      NODE_ENV: 'production',
      REDIS_URL: `redis://127.0.0.1:${redisPort}`,
      TOLLGATE_CONFIG: configFile,
    };
    delete env.TOLLGATE_WORKERS;
    const out = join(dir, `callgrind-${randomBytes(4).toString('hex')}.out`);
    const inspectPort = mode === 'alloc' ? await freePort() : 0;
    const reference = REFERENCES.has(ref);
    const main = reference
      ? [
          'bench/bare-proxy.ts',
          '--port',
          String(port),
          '--upstream',
          new URL(simUrl).origin,
          ...(ref === 'bare+redis' ? ['--redis', env.REDIS_URL!] : []),
        ]
      : ['src/main.ts'];
    const nodeArgs = [
      ...PRODUCTION_NODE_ARGS,
      ...(mode === 'gc' ? ['--trace-gc-nvp'] : []),
      ...(mode === 'alloc' ? [`--inspect=127.0.0.1:${inspectPort}`] : []),
      // V8 writes a log beside the perf map: into the tool's folder, not the gateway's working directory.
      ...(values.runtime ? ['--perf-basic-prof', '--no-logfile-per-isolate', `--logfile=${join(dir, 'v8.log')}`] : []),
      ...main,
    ];
    const [cmd, args] =
      mode === 'callgrind'
        ? [
            'valgrind',
            [
              '--tool=callgrind',
              '--smc-check=all-non-file',
              '--instr-atstart=no',
              '--separate-threads=yes',
              ...(values.runtime ? ['--separate-callers=4'] : []),
              `--callgrind-out-file=${out}`,
              `--log-file=${out}.log`,
              process.execPath,
              ...nodeArgs,
            ],
          ]
        : [process.execPath, nodeArgs];
    // stdout piped (not the bench's /dev/null): --trace-gc-nvp prints there.
    const gw = spawn(cmd, args, { cwd, env, stdio: ['ignore', 'pipe', 'ignore'] });
    let stdout = '';
    gw.stdout.setEncoding('utf8').on('data', (s: string) => (stdout += s));
    try {
      const deadline = Date.now() + 600_000;
      // The gateway is ready when its /readyz answers; a reference proxy once it printed its URL.
      const ready = () => (reference ? Promise.resolve(stdout.includes('http://')) : answers(`http://127.0.0.1:${adminPort}/readyz`));
      while (!(await ready().catch(() => false))) {
        if (gw.exitCode !== null || Date.now() > deadline) throw new Error(`gateway of ${label} did not start`);
        await new Promise((r) => setTimeout(r, 200));
      }
      const call = async (path: string, body: unknown) => {
        const r = await post(
          `http://127.0.0.1:${adminPort}${path}`,
          { authorization: `Bearer ${adminToken}`, 'content-type': 'application/json' },
          JSON.stringify(body),
        );
        if (r.status >= 300) throw new Error(`${path}: ${r.status} ${r.text}`);
        return JSON.parse(r.text) as { key?: string };
      };
      // A reference proxy checks no key: the same header size as the bench's (bench/stack.ts).
      const auth = reference
        ? 'Bearer sk-bench-not-checked-0123456789abcdef'
        : `Bearer ${
            (
              await call('/admin/keys', {
                account: 'bench',
                env: KEY_ENV,
                name: `bench ${KEY_ENV} key`,
                // As bench/stack.ts's test key: the limiter runs (its cost is measured) but never refuses.
                ...(KEY_ENV === 'test' && { rate_limits: { requests_per_minute: 1_000_000_000, tokens_per_minute: 1_000_000_000_000 } }),
              })
            ).key
          }`;
      if (!reference) await call('/admin/accounts/bench/credits', { amount_micros: 1e15, idempotency_key: 'bench-grant' });
      const url = `http://127.0.0.1:${port}/v1/chat/completions`;
      await load(url, auth, WARM);
      await new Promise((r) => setTimeout(r, 2000));
      const ctl = (...x: string[]) => execFileSync('callgrind_control', [...x, String(gw.pid)], { encoding: 'utf8', timeout: 300_000 });
      if (mode === 'callgrind') ctl('-i', 'on');
      const mark = stdout.length;
      if (mode === 'alloc') {
        const alloc = await allocationWindow(inspectPort, () => load(url, auth, N));
        gw.kill('SIGTERM');
        await once(gw, 'exit');
        return { label, alloc };
      }
      if (mode === 'syscalls') {
        const sys = await syscallWindow(gw.pid!, () => load(url, auth, N));
        gw.kill('SIGTERM');
        await once(gw, 'exit');
        return { label, sys };
      }
      await load(url, auth, N);
      if (mode === 'callgrind') {
        ctl('--dump=requests');
        ctl('-i', 'off');
      }
      const measured = stdout.slice(mark);
      gw.kill('SIGTERM');
      await once(gw, 'exit');
      if (mode === 'gc') {
        const events = measured
          .split('\n')
          .filter((l) => l.includes('GC: {'))
          .map((l) => JSON.parse(l.slice(l.indexOf('GC: ') + 4)) as Record<string, number | string>);
        const s = events.filter((e) => e.gc === 's');
        const sum = (k: string) => s.reduce((a, e) => a + Number(e[k] ?? 0), 0) / N;
        return {
          label,
          gc: {
            allocated: sum('allocated'),
            survived: sum('new_space_survived'),
            promoted: sum('promoted'),
            scavenges: s.length,
            markCompacts: events.filter((e) => e.gc === 'mc').length,
          },
        };
      }
      // One dump per thread (--separate-threads): thread 1 is the main thread, where requests are served;
      // the others are V8's compiler and GC helpers and libuv's pool.
      const name = basename(out);
      const irOf = (f: string) => Number(/^(?:summary|totals): (\d+)/m.exec(readFileSync(join(dir, f), 'utf8'))?.[1]);
      const dumps = readdirSync(dir).filter((f) => f.startsWith(`${name}.1-`));
      const main = dumps.find((f) => f.endsWith('-01'));
      if (!main) throw new Error(`no dump of the main thread in ${dir}`);
      const ir = dumps.reduce((a, f) => a + irOf(f), 0);
      // Valgrind runs node in its own process: the perf map is named after the gateway's pid.
      const perfMap = `/tmp/perf-${gw.pid}.map`;
      const runtime = values.runtime ? runtimeCalls(join(dir, main), perfMap, N) : undefined;
      // With --keep the map stays beside the dumps, to name their JIT addresses (callgrind shows them as ???).
      if (values.runtime && values.keep) execFileSync('cp', [perfMap, join(dir, `perf-${name}.map`)]);
      if (values.runtime) rmSync(perfMap, { force: true });
      return { label, irPerReq: ir / N, mainIrPerReq: irOf(main) / N, runtime };
    } finally {
      if (gw.exitCode === null && gw.signalCode === null) gw.kill('SIGKILL');
    }
  } finally {
    for (const p of procs.reverse()) await p.stop();
  }
}

/**
 * Two windows of N requests: the first unobserved, for user and kernel CPU per request from /proc (every
 * thread of the process); the second under `strace -c -f`, for the syscalls per request (strace slows the
 * process, so its window gives counts, not times).
 */
async function syscallWindow(pid: number, run: () => Promise<void>): Promise<NonNullable<Result['sys']>> {
  const hz = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim());
  const a = cpuTicks(pid);
  await run();
  const b = cpuTicks(pid);
  const file = join(dir, `strace-${pid}.txt`);
  const st = spawn('strace', ['-c', '-f', '-q', '-o', file, '-p', String(pid)], { stdio: 'ignore' });
  await new Promise((r) => setTimeout(r, 1000)); // attached to every thread
  await run();
  st.kill('SIGINT');
  await once(st, 'exit');
  const top = straceCounts(readFileSync(file, 'utf8'));
  const us = (ticks: number) => ((ticks / hz) * 1e6) / N;
  return {
    userUs: us(b.user - a.user),
    sysUs: us(b.sys - a.sys),
    calls: top.reduce((x, r) => x + r.calls, 0) / N,
    top: top.slice(0, 12).map((r) => ({ name: r.name, calls: r.calls / N })),
  };
}

/**
 * N requests under V8's sampling heap profiler (inspector `HeapProfiler.startSampling`), keeping the
 * samples of objects the GC has already freed: what each function allocates, live or not, per request.
 * Sampled every 256 bytes on average, so a few hundred bytes per request are within the sampling's noise.
 */
async function allocationWindow(port: number, run: () => Promise<void>): Promise<NonNullable<Result['alloc']>> {
  const list = (await (await fetch(`http://127.0.0.1:${port}/json/list`)).json()) as { webSocketDebuggerUrl: string }[];
  const ws = new WebSocket(list[0]!.webSocketDebuggerUrl);
  await new Promise((resolve, reject) => {
    ws.onopen = resolve;
    ws.onerror = reject;
  });
  let id = 0;
  const waiting = new Map<number, (v: unknown) => void>();
  ws.onmessage = (m) => {
    const msg = JSON.parse(String(m.data)) as { id?: number; result?: unknown };
    if (msg.id !== undefined) waiting.get(msg.id)?.(msg.result);
  };
  const send = (method: string, params: unknown = {}) =>
    new Promise<unknown>((resolve) => {
      waiting.set(++id, resolve);
      ws.send(JSON.stringify({ id, method, params }));
    });
  await send('HeapProfiler.enable');
  await send('HeapProfiler.startSampling', {
    samplingInterval: 256,
    includeObjectsCollectedByMajorGC: true,
    includeObjectsCollectedByMinorGC: true,
  });
  await run();
  const { profile } = (await send('HeapProfiler.stopSampling')) as { profile: { head: SamplingNode } };
  ws.close();
  const all = bytesByFunction(profile.head);
  const total = all.reduce((x, r) => x + r.bytes, 0);
  return { total: total / N, top: all.slice(0, 30).map((r) => ({ fn: r.fn, bytes: r.bytes / N })) };
}

try {
  const rows: Result[] = [];
  const mode: Mode = values.alloc ? 'alloc' : values.syscalls ? 'syscalls' : values.gc ? 'gc' : 'callgrind';
  for (const ref of values.ref) rows.push(await measure(ref, mode));
  process.stdout.write(
    `${N} ${KEY_ENV} ${STREAM ? 'streaming' : 'non-streaming'} requests at c=${C} after ${WARM} warm-up, per request:\n`,
  );
  const base = rows[0]?.irPerReq;
  const mainBase = rows[0]?.mainIrPerReq;
  for (const r of rows) {
    if (r.irPerReq !== undefined) {
      process.stdout.write(
        `  ${r.label}: ${Math.round(r.irPerReq).toLocaleString('en')} instructions${base ? ` (${(r.irPerReq / base).toFixed(3)} × the first)` : ''}` +
          `, main thread ${Math.round(r.mainIrPerReq!).toLocaleString('en')}${mainBase ? ` (${(r.mainIrPerReq! / mainBase).toFixed(3)} ×)` : ''}\n`,
      );
    }
    if (r.runtime) process.stdout.write(r.runtime.replace(/^/gm, '    '));
    if (r.alloc) {
      process.stdout.write(`  ${r.label}: ${Math.round(r.alloc.total)} B allocated (sampled), by the allocating function:\n`);
      for (const t of r.alloc.top) process.stdout.write(`    ${Math.round(t.bytes).toString().padStart(6)} B  ${t.fn}\n`);
    }
    if (r.sys) {
      const x = r.sys;
      process.stdout.write(
        `  ${r.label}: CPU ${x.userUs.toFixed(1)} µs user + ${x.sysUs.toFixed(1)} µs kernel; ${x.calls.toFixed(2)} syscalls (` +
          x.top.map((t) => `${t.name} ${t.calls.toFixed(2)}`).join(', ') +
          ')\n',
      );
    }
    if (r.gc) {
      const g = r.gc;
      process.stdout.write(
        `  ${r.label}: ${Math.round(g.allocated)} B allocated, ${Math.round(g.survived)} B survived a scavenge, ${Math.round(g.promoted)} B promoted (${g.scavenges} scavenges, ${g.markCompacts} full GCs)\n`,
      );
    }
  }
} finally {
  if (values.keep) process.stdout.write(`dumps kept in ${dir} (callgrind_annotate <dump>.1-01: the main thread)\n`);
  else rmSync(dir, { recursive: true, force: true });
}
