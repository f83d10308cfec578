/**
 * CPU and memory of a process, or of a process and its children, from /proc (Linux): utime+stime from
 * /proc/<pid>/stat, VmRSS from /proc/<pid>/status. Read from outside, so the measured processes do no
 * extra work for it. CPU time has clock-tick resolution (10 ms at CLK_TCK 100): a 5 s run at one core is
 * 500 ticks, 0.2 % error.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { execFileSync } from 'node:child_process';

const TICK_MS = (() => {
  try {
    return 1000 / Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim());
  } catch {
    return 10;
  }
})();

/**
 * CPU time (user + system) of pid so far, in ms; with `children`, plus that of its children it has
 * waited for (the wrk processes bench/wrk.ts runs and reaps).
 */
export function cpuMs(pid: number, children = false): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  // Field 2 (comm) may contain spaces; everything after the last ')' is space-separated from field 3.
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  // fields 14 (utime) and 15 (stime); 16 (cutime) and 17 (cstime) for reaped children
  return (Number(f[11]) + Number(f[12]) + (children ? Number(f[13]) + Number(f[14]) : 0)) * TICK_MS;
}

/** Resident set size of pid, in MB (1e6 bytes). */
export function rssMB(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? (Number(m[1]) * 1024) / 1e6 : NaN;
}

/**
 * Read and write system calls of pid so far (/proc/<pid>/io syscr/syscw; writev counts as one write).
 * On loopback a socket write also runs the receiver's TCP path in the sender's syscall, so the number
 * of writes per request is a large part of a proxy's CPU per request.
 */
export function syscalls(pid: number): { reads: number; writes: number } {
  const io = readFileSync(`/proc/${pid}/io`, 'utf8');
  return { reads: Number(/syscr: (\d+)/.exec(io)?.[1] ?? NaN), writes: Number(/syscw: (\d+)/.exec(io)?.[1] ?? NaN) };
}

/**
 * pid and its live children (node:cluster workers of a gateway primary), from
 * /proc/<pid>/task/<tid>/children: a child is listed under the thread that forked it, so every thread
 * is read. Children that exited are not listed (their CPU shows in the parent's cutime, not counted).
 */
export function withChildren(pid: number): number[] {
  const out = [pid];
  let tids: string[];
  try {
    tids = readdirSync(`/proc/${pid}/task`);
  } catch {
    return out;
  }
  for (const tid of tids) {
    try {
      for (const c of readFileSync(`/proc/${pid}/task/${tid}/children`, 'utf8').split(' ')) if (c) out.push(Number(c));
    } catch {
      // the thread ended between the two reads
    }
  }
  return out;
}

/** CPU time of the whole machine so far, ms: busy (user, nice, system, irq, softirq) and steal (VM). */
export function machineMs(): { busy: number; steal: number } {
  const f = readFileSync('/proc/stat', 'utf8').split('\n', 1)[0]!.trim().split(/\s+/).slice(1).map(Number);
  const [user = 0, nice = 0, system = 0, , , irq = 0, softirq = 0, steal = 0] = f;
  return { busy: (user + nice + system + irq + softirq) * TICK_MS, steal: steal * TICK_MS };
}

/**
 * SYNs dropped because a listen queue was full, machine-wide so far (TcpExt ListenOverflows). A proxy
 * whose event loop accepts too slowly during a burst of new connections makes clients retry the SYN
 * after 1 s, 3 s, …: seconds of time to first byte that no application timer shows.
 */
export function listenOverflows(): number {
  const lines = readFileSync('/proc/net/netstat', 'utf8').split('\n');
  for (let i = 0; i + 1 < lines.length; i++) {
    if (!lines[i]!.startsWith('TcpExt:')) continue;
    const names = lines[i]!.split(' ');
    const values = lines[i + 1]!.split(' ');
    const k = names.indexOf('ListenOverflows');
    return k < 0 ? NaN : Number(values[k]);
  }
  return NaN;
}

/** What a window of sampling saw (summed over the sampled processes). */
export interface Usage {
  /** CPU time over the window, ms. */
  cpuMs: number;
  wallMs: number;
  /** CPU as % of one core (200 % = both cores of this machine). */
  cpuPct: number;
  rssStartMB: number;
  rssMaxMB: number;
  rssEndMB: number;
  /** Read and write syscalls over the window. */
  reads: number;
  writes: number;
  /**
   * CPU used on the machine by processes not in `ours` (other people's work on a shared box), and
   * CPU stolen by the hypervisor, both in % of one core. High values make the window untrustworthy.
   */
  foreignPct: number;
  stealPct: number;
  /** Processes sampled at the window's end: 1, or a gateway primary plus its workers (absent in older reports). */
  processes?: number;
}

function sumCpu(pids: readonly number[]): number {
  let t = 0;
  for (const p of pids) {
    try {
      t += cpuMs(p, true);
    } catch {
      // exited: its share is lost, so foreign CPU reads slightly high
    }
  }
  return t;
}

interface Counters {
  cpu: number;
  reads: number;
  writes: number;
}

function counters(pid: number): Counters | undefined {
  try {
    return { cpu: cpuMs(pid), ...syscalls(pid) };
  } catch {
    return undefined; // exited
  }
}

/** RSS summed over pids, MB; a process that exited meanwhile counts 0. */
export function sumRssMB(pids: readonly number[]): number {
  let t = 0;
  for (const p of pids) {
    try {
      t += rssMB(p);
    } catch {
      // exited
    }
  }
  return t;
}

/**
 * Samples RSS every `everyMs` until `end()`, which returns the window's CPU, syscalls and RSS summed
 * over `members()` (one pid, or a gateway primary and its workers: asked again at each sample, so a
 * worker replaced mid-window is counted from its start; a process gone by the end loses its share).
 * `ours` lists every process of the benchmark (for the foreign CPU share).
 */
export function sample(members: () => readonly number[], ours: readonly number[], everyMs = 200): { end(): Usage } {
  const start = new Map<number, Counters>();
  const pids0 = members();
  for (const p of pids0) {
    const c = counters(p);
    if (c) start.set(p, c);
  }
  // The sampled processes count as ours through their own counters (a worker may not be in `ours`).
  const others = ours.filter((p) => !pids0.includes(p));
  const m0 = machineMs();
  const o0 = sumCpu(others);
  const t0 = performance.now();
  const rssStart = sumRssMB(pids0);
  let rssMax = rssStart;
  const timer = setInterval(() => {
    rssMax = Math.max(rssMax, sumRssMB(members()));
  }, everyMs);
  return {
    end() {
      clearInterval(timer);
      const wallMs = performance.now() - t0;
      const pids = members();
      const used: Counters = { cpu: 0, reads: 0, writes: 0 };
      for (const p of pids) {
        const c = counters(p);
        if (!c) continue;
        const c0 = start.get(p) ?? { cpu: 0, reads: 0, writes: 0 };
        used.cpu += c.cpu - c0.cpu;
        used.reads += c.reads - c0.reads;
        used.writes += c.writes - c0.writes;
      }
      const rssEnd = sumRssMB(pids);
      const m1 = machineMs();
      const foreign = Math.max(0, m1.busy - m0.busy - (sumCpu(others) - o0) - used.cpu);
      return {
        foreignPct: (100 * foreign) / wallMs,
        stealPct: (100 * (m1.steal - m0.steal)) / wallMs,
        cpuMs: used.cpu,
        wallMs,
        cpuPct: (100 * used.cpu) / wallMs,
        rssStartMB: rssStart,
        rssMaxMB: Math.max(rssMax, rssEnd),
        rssEndMB: rssEnd,
        reads: used.reads,
        writes: used.writes,
        processes: pids.length,
      };
    },
  };
}
