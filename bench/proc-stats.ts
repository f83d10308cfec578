/**
 * CPU and memory of a process from /proc (Linux): utime+stime from /proc/<pid>/stat, VmRSS from
 * /proc/<pid>/status. Read from outside, so the measured process does no extra work for it. CPU time
 * has clock-tick resolution (10 ms at CLK_TCK 100): a 5 s run at one core is 500 ticks, 0.2 % error.
 */
import { readFileSync } from 'node:fs';
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

/** What a window of sampling saw. */
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

/**
 * Samples RSS every `everyMs` until `end()`, which returns the window's CPU and RSS of `pid`;
 * `ours` lists every process of the benchmark (for the foreign CPU share).
 */
export function sample(pid: number, ours: readonly number[], everyMs = 200): { end(): Usage } {
  const c0 = cpuMs(pid);
  const m0 = machineMs();
  const o0 = sumCpu(ours);
  const t0 = performance.now();
  const rssStart = rssMB(pid);
  const io0 = syscalls(pid);
  let rssMax = rssStart;
  const timer = setInterval(() => {
    try {
      rssMax = Math.max(rssMax, rssMB(pid));
    } catch {
      // The process may be gone at the very end; the window's last good sample stands.
    }
  }, everyMs);
  return {
    end() {
      clearInterval(timer);
      const wallMs = performance.now() - t0;
      const used = cpuMs(pid) - c0;
      const rssEnd = rssMB(pid);
      const io = syscalls(pid);
      const m1 = machineMs();
      const foreign = Math.max(0, m1.busy - m0.busy - (sumCpu(ours) - o0));
      return {
        foreignPct: (100 * foreign) / wallMs,
        stealPct: (100 * (m1.steal - m0.steal)) / wallMs,
        cpuMs: used,
        wallMs,
        cpuPct: (100 * used) / wallMs,
        rssStartMB: rssStart,
        rssMaxMB: Math.max(rssMax, rssEnd),
        rssEndMB: rssEnd,
        reads: io.reads - io0.reads,
        writes: io.writes - io0.writes,
      };
    },
  };
}
