/**
 * One measured run: spawns the scenario's load child against one target and samples the target's
 * process (CPU, RSS) exactly over the child's measured window (between its `measure` and `end` lines).
 */
import { runChild } from './procs.ts';
import { cpuMs, listenOverflows, rssMB, sample, type Usage } from './proc-stats.ts';
import type { LoadResult } from './load-result.ts';
import type { Scenario } from './scenarios.ts';
import type { Target } from './stack.ts';

/** A run's numbers. */
export interface Measurement {
  scenario: Scenario['id'];
  target: Target['name'];
  round: number;
  result: LoadResult;
  /** The target process over the window. */
  proc: Usage;
  /** RSS of the target process just before the load started, MB. */
  rssIdleMB: number;
  /** CPU of the target process per completed request, µs. */
  cpuUsPerReq: number;
  /** CPU of redis-server per completed request, µs (tollgate targets on the Redis store). */
  redisUsPerReq?: number;
  /** SYNs dropped on full listen queues during the whole run, warm-up included (machine-wide). */
  listenOverflows: number;
}

const CLIENT_FILE = { wrk: 'bench/wrk.ts', streams: 'bench/streams.ts', paced: 'bench/paced.ts' } as const;

/** Runs scenario × target once; `ours` are the benchmark's other processes (for foreign CPU). */
export async function measure(s: Scenario, t: Target, round: number, quick: boolean, ours: readonly number[] = []): Promise<Measurement> {
  const spec = s.spec(t, quick);
  const rssIdleMB = rssMB(t.pid);
  const overflows0 = listenOverflows();
  let sampler: ReturnType<typeof sample> | undefined;
  let proc: Usage | undefined;
  let result: LoadResult | undefined;
  let redis0 = 0;
  let redisMs: number | undefined;
  await runChild(process.execPath, [CLIENT_FILE[s.client], JSON.stringify(spec)], (line, childPid) => {
    const msg = JSON.parse(line) as { event: string } & LoadResult;
    if (msg.event === 'measure') {
      sampler = sample(t.pid, [...ours, childPid, process.pid]);
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
