/**
 * Where a process's calls into V8's C++ runtime come from, per request: `bench/instructions.ts --runtime`
 * runs the gateway with callgrind's `--separate-callers=4` and node's `--perf-basic-prof`, and this reads
 * the main thread's dump. callgrind names V8's C++ and builtins but not JIT-compiled JavaScript (an
 * address); V8's perf map (/tmp/perf-<pid>.map: start, size, name per compiled function) names those
 * addresses. A runtime call costs hundreds to thousands of instructions where the JIT's own code costs
 * tens, so these lines are where per-request work hides in "V8 runtime" (results/instructions-vs-bare.md).
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';

interface CompiledFn {
  start: number;
  end: number;
  name: string;
}

/** The perf map's functions (its text), sorted by start address. */
function parsePerfMap(text: string): CompiledFn[] {
  const syms: CompiledFn[] = [];
  for (const line of text.split('\n')) {
    const [start, size, ...name] = line.split(' ');
    if (start && size && name.length > 0) {
      const s = parseInt(start, 16);
      syms.push({ start: s, end: s + parseInt(size, 16), name: name.join(' ') });
    }
  }
  return syms.sort((a, b) => a.start - b.start);
}

/** The name of the compiled function at `addr`, or the address. */
function nameAt(syms: CompiledFn[], addr: number): string {
  let lo = 0;
  let hi = syms.length - 1;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    if (syms[mid]!.start <= addr) lo = mid + 1;
    else hi = mid - 1;
  }
  const s = syms[hi];
  return s && addr < s.end ? s.name : `0x${addr.toString(16)}`;
}

/** A context's frame as a readable name: a JIT address through the perf map, else callgrind's name. */
function frame(syms: CompiledFn[], f: string): string {
  const addr = /^(?:\?\?\?:)?0x([0-9a-f]+)/.exec(f.trim());
  if (addr) return nameAt(syms, parseInt(addr[1]!, 16));
  return f
    .replace(/^(?:\?\?\?:)?/, '')
    .replace(/\s*\[[^\]]*\]\s*$/, '')
    .replace(/\(.*$/, '');
}

/**
 * The report from `callgrind_annotate --inclusive=yes` output of a dump made with --separate-callers:
 * runtime calls entered from JavaScript (through V8's CEntry stub) by inclusive instructions per request,
 * each line a runtime function and its first two JavaScript callers (up to `top` lines), and the total.
 */
export function reportRuntimeCalls(annotated: string, perfMap: string, requests: number, top = 25): string {
  const syms = parsePerfMap(perfMap);
  const byCaller = new Map<string, number>();
  let total = 0;
  for (const line of annotated.split('\n')) {
    const m = /^\s*([\d,]+)\s+\(\s*[\d.]+%\)\s+(?:\?\?\?:)?v8::internal::(Runtime_\w+)\([^']*'(.*)$/.exec(line);
    if (!m || !m[3]!.includes('CEntry')) continue;
    const ir = Number(m[1]!.replaceAll(',', ''));
    const callers = m[3]!.split("'").map((f) => frame(syms, f));
    const js = callers.filter((c) => c.startsWith('JS:')).slice(0, 2);
    const key = `${m[2]} <- ${js.length > 0 ? js.join(' <- ') : callers.slice(1, 3).join(' <- ')}`;
    byCaller.set(key, (byCaller.get(key) ?? 0) + ir);
    total += ir;
  }
  const perReq = (ir: number) =>
    Math.round(ir / requests)
      .toLocaleString('en')
      .padStart(7);
  const lines = [`V8 runtime calls from JavaScript, instructions per request (inclusive), ${perReq(total).trim()} in all:`];
  for (const [k, ir] of [...byCaller].sort((a, b) => b[1] - a[1]).slice(0, top)) lines.push(`  ${perReq(ir)}  ${k}`);
  return `${lines.join('\n')}\n`;
}

/** The report for a dump file and a perf map file (runs callgrind_annotate). */
export function runtimeCalls(dump: string, perfMapFile: string, requests: number, top = 25): string {
  const annotated = execFileSync('callgrind_annotate', ['--inclusive=yes', '--threshold=100', dump], {
    encoding: 'utf8',
    maxBuffer: 1 << 30,
  });
  return reportRuntimeCalls(annotated, readFileSync(perfMapFile, 'utf8'), requests, top);
}
