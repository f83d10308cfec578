/**
 * One measured run: spawns the scenario's load child against one target and samples the target's
 * processes (CPU, RSS, syscalls; a gateway with workers: the primary and every worker, summed) exactly
 * over the child's measured window (between its `measure` and `end` lines).
 */
import { runChild } from './procs.ts';
import { cpuMs, listenOverflows, sample, sumRssMB, withChildren, type Usage } from './proc-stats.ts';
import type { LoadResult } from './load-result.ts';
import type { Scenario } from './scenarios.ts';
import type { Target } from './stack.ts';
import { Redis } from 'ioredis';
import { commandStats, usecBetween } from './redis-stats.ts';

/** A run's numbers. */
export interface Measurement {
  scenario: Scenario['id'];
  target: Target['name'];
  round: number;
  result: LoadResult;
  /** The target's processes over the window, summed. */
  proc: Usage;
  /** RSS of the target's processes just before the load started, MB. */
  rssIdleMB: number;
  /** CPU of the target's processes per completed request, µs. */
  cpuUsPerReq: number;
  /** CPU of redis-server per completed request, µs, from /proc (its network and syscall work included). */
  redisUsPerReq?: number;
  /**
   * redis-server's time inside the gateway's commands per completed request, µs, from `INFO commandstats`
   * (tollgate targets on the Redis store; absent in reports before it was measured).
   */
  redisCmdUsPerReq?: number;
  /** Script calls (EVALSHA + EVAL) per completed request, from `INFO commandstats` (a live key unbatched: 2, its hold and settle). */
  redisScriptCallsPerReq?: number;
  /** SYNs dropped on full listen queues during the whole run, warm-up included (machine-wide). */
  listenOverflows: number;
}

const CLIENT_FILE = { wrk: 'bench/wrk.ts', streams: 'bench/streams.ts', paced: 'bench/paced.ts' } as const;

/**
 * The target's processes: its pid, or for a gateway with workers the primary and its children, looked
 * up again at every sample (a worker that died is replaced under a new pid).
 */
function members(t: Target): () => readonly number[] {
  if (!t.workers) return () => [t.pid];
  const found = withChildren(t.pid).length - 1;
  // Fewer would silently leave a worker's CPU out of the row.
  if (found !== t.workers) throw new Error(`${t.name}: ${found} of ${t.workers} workers found under pid ${t.pid}`);
  return () => withChildren(t.pid);
}

/**
 * Runs scenario × target once; `ours` are the benchmark's other processes (for foreign CPU);
 * `scriptCommands`: commands the gateway runs only inside scripts (left out of the commandstats total).
 */
export async function measure(
  s: Scenario,
  t: Target,
  round: number,
  quick: boolean,
  ours: readonly number[] = [],
  scriptCommands: ReadonlySet<string> = new Set(),
): Promise<Measurement> {
  const spec = s.spec(t, quick);
  const pids = members(t);
  const rssIdleMB = sumRssMB(pids());
  const overflows0 = listenOverflows();
  let sampler: ReturnType<typeof sample> | undefined;
  let proc: Usage | undefined;
  let result: LoadResult | undefined;
  let redis0 = 0;
  let redisMs: number | undefined;
  // Connected before the window, so its own HELLO/CLIENT commands fall outside it (they are left out anyway).
  const redis = t.redisUrl ? new Redis(t.redisUrl, { lazyConnect: true }) : undefined;
  // A failed INFO leaves the figure out rather than failing the run (caught now: read after the child exits).
  const info = () => redis?.info('commandstats').catch(() => undefined);
  let stats0: Promise<string | undefined> | undefined;
  let stats1: Promise<string | undefined> | undefined;
  let redisCmdUs: number | undefined;
  let scriptCalls: number | undefined;
  try {
    await redis?.connect();
    await runChild(process.execPath, [CLIENT_FILE[s.client], JSON.stringify(spec)], (line, childPid) => {
      const msg = JSON.parse(line) as { event: string } & LoadResult;
      if (msg.event === 'measure') {
        sampler = sample(pids, [...ours, childPid, process.pid]);
        if (t.redisPid) redis0 = cpuMs(t.redisPid);
        stats0 = info();
      } else if (msg.event === 'end') {
        proc = sampler?.end();
        if (t.redisPid) redisMs = cpuMs(t.redisPid) - redis0;
        stats1 = info();
      } else if (msg.event === 'result') {
        const { event: _e, ...r } = msg;
        result = r;
      }
    });
    const [a, b] = [await stats0, await stats1];
    if (a && b) {
      const [sa, sb] = [commandStats(a), commandStats(b)];
      redisCmdUs = usecBetween(sa, sb, scriptCommands);
      const calls = (s: typeof sa) => (s.get('evalsha')?.calls ?? 0) + (s.get('eval')?.calls ?? 0);
      scriptCalls = calls(sb) - calls(sa);
    }
  } finally {
    redis?.disconnect();
  }
  if (!result || !proc) throw new Error(`${s.id} → ${t.name}: the load child reported no result`);
  const overflows = listenOverflows() - overflows0;
  const perReq = (ms: number) => (result!.requests > 0 ? (ms * 1000) / result!.requests : NaN);
  return {
    scenario: s.id,
    target: t.name,
    round,
    result,
    proc,
    rssIdleMB,
    cpuUsPerReq: perReq(proc.cpuMs),
    listenOverflows: overflows,
    ...(redisMs !== undefined && { redisUsPerReq: perReq(redisMs) }),
    ...(redisCmdUs !== undefined && { redisCmdUsPerReq: perReq(redisCmdUs / 1000) }),
    ...(scriptCalls !== undefined && { redisScriptCallsPerReq: perReq(scriptCalls / 1000) }),
  };
}
