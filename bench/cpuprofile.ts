/**
 * Summarises a V8 `.cpuprofile` (from `node --cpu-prof`): self and total time per function, and self
 * time per file, as percentages of all samples. Time per sample comes from `timeDeltas`, so a
 * stretched sampling interval under load is weighed correctly.
 *   node bench/cpuprofile.ts <file.cpuprofile> [--top 30] [--md]
 */
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { pathToFileURL } from 'node:url';

interface CallFrame {
  functionName: string;
  url: string;
  lineNumber: number;
}
interface Node {
  id: number;
  callFrame: CallFrame;
  children?: number[];
}
interface Profile {
  nodes: Node[];
  samples: number[];
  timeDeltas: number[];
  startTime: number;
  endTime: number;
}

/** One function's share of the profile. */
export interface FnCost {
  name: string;
  where: string;
  selfPct: number;
  totalPct: number;
  selfMs: number;
  /** Nearest application callers (first ancestor in src/ or node_modules/) by share of this function's self time. */
  callers: { where: string; pct: number }[];
}

export interface Summary {
  totalMs: number;
  samples: number;
  functions: FnCost[];
  files: { where: string; selfPct: number }[];
}

const ROOT = pathToFileURL(process.cwd()).href + '/';

/** Repo-relative path: also for a gateway run from an exported ref (`/tmp/…/ref/src/…`). */
function relative(url: string): string {
  if (url.startsWith(ROOT)) return url.slice(ROOT.length);
  const m = /^file:\/\/.*?\/((?:src|node_modules|bench|test)\/.*)$/.exec(url);
  return m ? m[1]! : url;
}

function where(cf: CallFrame): string {
  if (!cf.url) return '(native)';
  return `${relative(cf.url)}:${cf.lineNumber + 1}`;
}

function fileOf(cf: CallFrame): string {
  if (!cf.url) return '(native / VM)';
  const u = relative(cf.url);
  // Group dependencies by package: node_modules/undici/lib/... → node_modules/undici
  const m = /^node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(u);
  return m ? `node_modules/${m[1]}` : u;
}

/** Self/total time per function and self time per file. */
export function summarise(p: Profile): Summary {
  const byId = new Map<number, Node>();
  const parent = new Map<number, number>();
  for (const n of p.nodes) {
    byId.set(n.id, n);
    for (const c of n.children ?? []) parent.set(c, n.id);
  }
  const key = (n: Node) => `${n.callFrame.functionName || '(anonymous)'}\t${where(n.callFrame)}`;
  const self = new Map<string, number>();
  const total = new Map<string, number>();
  const files = new Map<string, number>();
  const callers = new Map<string, Map<string, number>>();
  let all = 0;
  for (let i = 0; i < p.samples.length; i++) {
    // timeDeltas[i] is the time before sample i; the next delta is how long this sample stood.
    const dt = (p.timeDeltas[i + 1] ?? p.timeDeltas[i] ?? 0) / 1000;
    const n = byId.get(p.samples[i]!);
    if (!n) continue;
    all += dt;
    const k = key(n);
    self.set(k, (self.get(k) ?? 0) + dt);
    let up = parent.get(n.id);
    // Skip native and node: internals: the interesting caller is in src/ or a dependency.
    while (up !== undefined && /^(node:|$)/.test(byId.get(up)!.callFrame.url)) up = parent.get(up);
    const caller = up === undefined ? '(root)' : key(byId.get(up)!).replace('\t', ' ');
    const cm = callers.get(k) ?? new Map<string, number>();
    callers.set(k, cm.set(caller, (cm.get(caller) ?? 0) + dt));
    const f = fileOf(n.callFrame);
    files.set(f, (files.get(f) ?? 0) + dt);
    const seen = new Set<string>();
    for (let id: number | undefined = n.id; id !== undefined; id = parent.get(id)) {
      const kk = key(byId.get(id)!);
      if (seen.has(kk)) continue; // recursion counts once per sample
      seen.add(kk);
      total.set(kk, (total.get(kk) ?? 0) + dt);
    }
  }
  const pct = (ms: number) => (100 * ms) / (all || 1);
  const functions = [...self.entries()]
    .map(([k, ms]) => {
      const [name, w] = k.split('\t') as [string, string];
      const cs = [...(callers.get(k) ?? new Map<string, number>()).entries()].sort((a, b) => b[1] - a[1]).slice(0, 3);
      return {
        name,
        where: w,
        selfPct: pct(ms),
        totalPct: pct(total.get(k) ?? 0),
        selfMs: ms,
        callers: cs.map(([c, t]) => ({ where: c, pct: (100 * t) / (ms || 1) })),
      };
    })
    .sort((a, b) => b.selfMs - a.selfMs);
  const fileList = [...files.entries()].map(([w, ms]) => ({ where: w, selfPct: pct(ms) })).sort((a, b) => b.selfPct - a.selfPct);
  return { totalMs: all, samples: p.samples.length, functions, files: fileList };
}

/** Markdown tables of the top functions and files. */
export function summaryMarkdown(s: Summary, top = 30): string {
  const L = [
    `${s.samples} samples, ${(s.totalMs / 1000).toFixed(1)} s sampled.`,
    '',
    '| self % | total % | function | where |',
    '|--:|--:|---|---|',
  ];
  for (const f of s.functions.slice(0, top)) L.push(`| ${f.selfPct.toFixed(1)} | ${f.totalPct.toFixed(1)} | \`${f.name}\` | ${f.where} |`);
  L.push('', "Nearest callers in src/ or node_modules/ of the top native / VM entries (share of that entry's self time):", '');
  for (const f of s.functions.slice(0, 12).filter((x) => x.where === '(native)' && !x.name.startsWith('('))) {
    L.push(`- \`${f.name}\` (${f.selfPct.toFixed(1)} %): ${f.callers.map((c) => `${c.where} ${c.pct.toFixed(0)} %`).join('; ')}`);
  }
  L.push('', '| self % | file / package |', '|--:|---|');
  for (const f of s.files.slice(0, 20)) L.push(`| ${f.selfPct.toFixed(1)} | ${f.where} |`);
  return L.join('\n');
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: { top: { type: 'string', default: '30' }, md: { type: 'boolean', default: false } },
  });
  if (!positionals[0]) throw new Error('usage: node bench/cpuprofile.ts <file.cpuprofile> [--top N] [--md]');
  const s = summarise(JSON.parse(readFileSync(positionals[0], 'utf8')) as Profile);
  const top = Number(values.top);
  if (values.md) process.stdout.write(`${summaryMarkdown(s, top)}\n`);
  else {
    process.stdout.write(`${s.samples} samples, ${(s.totalMs / 1000).toFixed(1)} s\n  self%  total%  function  (where)\n`);
    for (const f of s.functions.slice(0, top)) {
      process.stdout.write(`${f.selfPct.toFixed(1).padStart(7)} ${f.totalPct.toFixed(1).padStart(7)}  ${f.name}  (${f.where})\n`);
      for (const c of f.callers) process.stdout.write(`${''.padStart(17)}← ${c.where} ${c.pct.toFixed(0)} %\n`);
    }
    process.stdout.write('\n  self%  file\n');
    for (const f of s.files.slice(0, 15)) process.stdout.write(`${f.selfPct.toFixed(1).padStart(7)}  ${f.where}\n`);
  }
}
