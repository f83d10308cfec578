/**
 * Profiles the live-key path under load: for each scenario (non-streaming, streaming 64 tokens) a
 * fresh stack with the gateway under `node --cpu-prof`, load on the live key only, then SIGTERM (the
 * profile is written at exit) and a summary of where the gateway's CPU went.
 *   node bench/profile.ts [--seconds 8] [--only nonstream,stream64] [--ref <git ref>] [--embedded] [--key test]
 * Writes bench/results/profile.md (profile-test.md with --key test); raw profiles stay in bench/results/profiles/ (not committed; open
 * them in Chrome DevTools → Performance, or summarise with bench/cpuprofile.ts).
 */
import { parseArgs } from 'node:util';
import { describeRef } from './git.ts';
import { mkdirSync, readdirSync, readFileSync, renameSync, writeFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { startStack } from './stack.ts';
import { measure } from './measure.ts';
import { SCENARIOS, type ScenarioId } from './scenarios.ts';
import { summarise, summaryMarkdown } from './cpuprofile.ts';

const { values } = parseArgs({
  options: {
    seconds: { type: 'string', default: '8' },
    only: { type: 'string', default: 'nonstream,stream64' },
    top: { type: 'string', default: '30' },
    ref: { type: 'string' },
    embedded: { type: 'boolean', default: false },
    key: { type: 'string', default: 'live' },
  },
});
if (values.key !== 'live' && values.key !== 'test') throw new Error('--key must be live or test');
const seconds = Number(values.seconds);
if (!(seconds > 0 && seconds <= 60)) throw new Error('--seconds must be in (0, 60]');
const ids = values.only.split(',') as ScenarioId[];
const { sha: ref, label } = describeRef(values.ref);
const results = join(import.meta.dirname, 'results');
const raw = join(results, 'profiles');
mkdirSync(raw, { recursive: true });

const L: string[] = [
  `# CPU profile of the ${values.key}-key path`,
  '',
  `Gateway under \`node --cpu-prof --cpu-prof-interval 500\`, ${values.key} key only, ${seconds} s of load after 1 s of warm-up; load generator, simulator and Redis share the cores. Node ${process.version}. Gateway code: ${label}. Regenerate with \`node bench/profile.ts\`.`,
  '',
];
for (const id of ids) {
  const s = SCENARIOS.find((x) => x.id === id);
  if (!s) throw new Error(`unknown scenario ${id}`);
  const tmp = join(raw, `tmp-${id}`);
  rmSync(tmp, { recursive: true, force: true });
  mkdirSync(tmp);
  const stack = await startStack({
    gatewayNodeArgs: ['--cpu-prof', '--cpu-prof-dir', tmp, '--cpu-prof-interval', '500'],
    embedded: values.embedded,
    ...(ref && { ref }),
  });
  let line = '';
  try {
    const target = stack.targets.find((t) => t.name === `tollgate/${values.key}`)!;
    const m = await measure({ ...s, spec: (t, q) => ({ ...s.spec(t, q), warmupS: 1, durationS: seconds }) }, target, 1, false, stack.pids);
    line = `${m.result.rps.toFixed(0)} req/s, p50 ${m.result.latency.p50.toFixed(2)} ms, p99 ${m.result.latency.p99.toFixed(2)} ms, gateway CPU ${m.proc.cpuPct.toFixed(0)} % (${m.cpuUsPerReq.toFixed(0)} µs/req) under the profiler; store ${stack.store}; other processes used ${m.proc.foreignPct.toFixed(0)} % CPU`;
  } finally {
    await stack.stop();
  }
  const file = readdirSync(tmp).find((f) => f.endsWith('.cpuprofile'));
  if (!file) throw new Error(`no profile written in ${tmp}`);
  const dest = join(raw, `gateway-${values.key}-${id}.cpuprofile`);
  renameSync(join(tmp, file), dest);
  rmSync(tmp, { recursive: true, force: true });
  const summary = summarise(JSON.parse(readFileSync(dest, 'utf8')));
  L.push(`## ${s.title}`, '', line, '', summaryMarkdown(summary, Number(values.top)), '');
  process.stdout.write(`${id}: ${line}\n`);
}
const out = values.key === 'live' ? 'profile.md' : `profile-${values.key}.md`;
writeFileSync(join(results, out), L.join('\n'));
process.stdout.write(`wrote bench/results/${out} and bench/results/profiles/*.cpuprofile\n`);
