/**
 * What a process costs beyond its instructions, for `bench/instructions.ts --syscalls` and `--alloc`:
 * its user and kernel CPU from /proc, the syscalls `strace -c` counted, and the bytes V8's sampling heap
 * profiler saw each function allocate (objects already collected included).
 */
import { readFileSync } from 'node:fs';

/** utime and stime of a process (all its threads), in clock ticks (/proc/<pid>/stat fields 14 and 15). */
export function cpuTicks(pid: number): { user: number; sys: number } {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  // The command name (field 2) may hold spaces: the fields that follow start after its last ')'.
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return { user: Number(f[11]), sys: Number(f[12]) };
}

/** `strace -c`'s table (`% time, seconds, usecs/call, calls, [errors,] syscall`): calls per syscall, most first. */
export function straceCounts(table: string): { name: string; calls: number }[] {
  const rows: { name: string; calls: number }[] = [];
  for (const line of table.split('\n')) {
    const m = /^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)\s*$/.exec(line);
    if (m && m[2] !== 'total') rows.push({ name: m[2]!, calls: Number(m[1]) });
  }
  return rows.sort((a, b) => b.calls - a.calls);
}

/** A node of V8's sampling heap profile (`HeapProfiler.stopSampling`, or node:inspector's). */
export interface SamplingNode {
  callFrame: { functionName: string; url: string; lineNumber: number };
  selfSize: number;
  children: SamplingNode[];
}

/** Bytes sampled per allocating function (`name file:line`, files under src/ or node_modules/ shortened), most first. */
export function bytesByFunction(head: SamplingNode): { fn: string; bytes: number }[] {
  const byFn = new Map<string, number>();
  const stack = [head];
  while (stack.length > 0) {
    const n = stack.pop()!;
    if (n.selfSize > 0) {
      const f = n.callFrame;
      const where = f.url ? `${f.url.replace(/^file:\/\/.*?\/(src|node_modules|bench|test)\//, '$1/')}:${f.lineNumber + 1}` : '(native)';
      const k = `${f.functionName || '(anonymous)'} ${where}`;
      byFn.set(k, (byFn.get(k) ?? 0) + n.selfSize);
    }
    stack.push(...n.children);
  }
  return [...byFn].map(([fn, bytes]) => ({ fn, bytes })).sort((a, b) => b.bytes - a.bytes);
}
