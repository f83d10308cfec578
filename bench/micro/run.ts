/**
 * Runs every `bench/micro/*.bench.ts`, each in its own process (one benchmark's JIT state and garbage
 * never skew the next), and writes bench/results/micro.md: one table per file, in ns/op.
 *   node bench/micro/run.ts [name-filter]
 * Each bench prints a JSON object as its last line: `{"case (ns/op)": n}` or `{"case (µs/op)": n}`;
 * keys without a unit are µs/op (presign.bench.ts prints those).
 */
import { readdirSync, writeFileSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { cpus, loadavg } from 'node:os';
import { runChild } from '../procs.ts';
import { shortHead } from '../git.ts';

const dir = import.meta.dirname;
const filter = process.argv[2] ?? '';
const files = readdirSync(dir)
  .filter((f) => f.endsWith('.bench.ts') && f.includes(filter))
  .sort();

function nsOf(key: string, v: number): { name: string; ns: number } {
  const m = /^(.*) \((ns|µs)\/op\)$/.exec(key);
  if (!m) return { name: key, ns: v * 1000 };
  return { name: m[1]!, ns: m[2] === 'µs' ? v * 1000 : v };
}

function fmt(ns: number): string {
  return ns >= 10_000 ? `${(ns / 1000).toFixed(1)} µs` : `${ns.toFixed(0)} ns`;
}

const commit = shortHead();
const L: string[] = [
  '# Micro-benchmarks',
  '',
  `Node ${process.version} · ${cpus().length} CPUs (${cpus()[0]?.model.trim() ?? '?'}) · commit \`${commit}\` · load average at start ${loadavg()
    .map((x) => x.toFixed(2))
    .join(' ')} · ${new Date().toISOString()}`,
  '',
  'Best of several rounds (timing.ts), each file in its own process. Shared machine: treat as upper bounds. Regenerate with `node bench/micro/run.ts`.',
  '',
];
let failed = 0;
for (const f of files) {
  process.stdout.write(`${f} …\n`);
  let lines: string[];
  try {
    lines = await runChild(process.execPath, [join(dir, f)]);
  } catch (e) {
    failed++;
    process.stdout.write(`  failed: ${(e as Error).message.slice(0, 500)}\n`);
    L.push(`## ${f}`, '', `failed: ${(e as Error).message.split('\n')[0]}`, '');
    continue;
  }
  const json = [...lines].reverse().find((l) => l.startsWith('{'));
  const results = json ? (JSON.parse(json) as Record<string, number>) : {};
  L.push(`## ${f}`, '', '| case | per op |', '|---|--:|');
  for (const [k, v] of Object.entries(results)) {
    const { name, ns } = nsOf(k, v);
    L.push(`| ${name} | ${fmt(ns)} |`);
    process.stdout.write(`  ${name.padEnd(56)} ${fmt(ns).padStart(10)}\n`);
  }
  L.push('');
}
mkdirSync(join(dir, '..', 'results'), { recursive: true });
writeFileSync(join(dir, '..', 'results', 'micro.md'), L.join('\n'));
process.stdout.write(`wrote bench/results/micro.md${failed ? ` (${failed} failed)` : ''}\n`);
process.exitCode = failed ? 1 : 0;
