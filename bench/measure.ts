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
  /** CPU of redis-server per completed request, µs (tollgate targets on the Redis store). */
  redisUsPerReq?: number;
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

/** Runs scenario × target once; `ours` are the benchmark's other processes (for foreign CPU). */
export async function measure(s: Scenario, t: Target, round: number, quick: boolean, ours: readonly number[] = []): Promise<Measurement> {
  const spec = s.spec(t, quick);
  const pids = members(t);
  const rssIdleMB = sumRssMB(pids());
  const overflows0 = listenOverflows();
  let sampler: ReturnType<typeof sample> | undefined;
  let proc: Usage | undefined;
  let result: LoadResult | undefined;
  let redis0 = 0;
  let redisMs: number | undefined;
  await runChild(process.execPath, [CLIENT_FILE[s.client], JSON.stringify(spec)], (line, childPid) => {
    const msg = JSON.parse(line) as { event: string } & LoadResult;
    if (msg.event === 'measure') {
      sampler = sample(pids, [...ours, childPid, process.pid]);
      if (t.redisPid) redis0 = cpuMs(t.redisPid);
    } else if (msg.event === 'end') {
      proc = sampler?.end();
      if (t.redisPid) redisMs = cpuMs(t.redisPid) - redis0;
    } else if (msg.event === 'result') {
      const { event: _e, ...r } = msg;
      result = r;
    }
  });
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
  };
}
