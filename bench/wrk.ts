/**
 * Closed-loop load with wrk (C, Debian package `wrk`), in its own process: `connections` keep-alive
 * connections on 2 threads, each sending its next request as soon as the previous one ended. wrk leaves
 * far more CPU to the targets than a JavaScript load generator on the same 2 cores (NOTES §13: the same
 * bare proxy measured 42–62 µs per request under wrk, ~129 µs under autocannon), so ratios between
 * targets are not compressed by the generator. Two wrk runs: the warm-up (unmeasured), then the window,
 * bracketed by the `measure` / `end` lines the runner samples CPU between.
 *   node bench/wrk.ts '<LoadSpec JSON>'
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { emit, readSpec, type LoadSpec } from './load-result.ts';

const SCRIPT = join(import.meta.dirname, 'wrk.lua');

/** What wrk.lua's done() prints; latencies in µs. */
interface WrkSummary {
  requests: number;
  duration_us: number;
  non2xx: number;
  errors: number;
  p50: number;
  p99: number;
  p999: number;
  mean: number;
  max: number;
}

/**
 * The request as wrk.lua reads it: one `key=value` line each (headers tab-separated). The body is cut
 * at `"user":"` so the script can put a per-request counter there.
 */
export function wrkSpecFile(spec: LoadSpec): string {
  const url = new URL(spec.url);
  const body = JSON.parse(spec.body) as Record<string, unknown>;
  const marked = JSON.stringify({ ...body, user: '@COUNTER@' });
  const [prefix, suffix] = marked.split('@COUNTER@') as [string, string];
  const headers = Object.entries(spec.headers)
    .map(([k, v]) => `${k}\t${v}`)
    .join('\t');
  for (const s of [prefix, suffix, headers]) if (s.includes('\n')) throw new Error('wrk spec values must be single lines');
  return `path=${url.pathname}${url.search}\nheaders=${headers}\nbody_prefix=${prefix}bench-\nbody_suffix=${suffix}\n`;
}

/** Runs wrk for `seconds` against the spec; resolves with done()'s summary. */
function runWrk(spec: LoadSpec, specFile: string, seconds: number): Promise<WrkSummary> {
  const threads = Math.min(2, spec.connections);
  const args = [
    '-t',
    String(threads),
    '-c',
    String(spec.connections),
    '-d',
    `${Math.max(1, Math.round(seconds))}s`,
    '--timeout',
    '10s',
    '-s',
    SCRIPT,
    spec.url,
  ];
  return new Promise((resolve, reject) => {
    const child = spawn('wrk', args, { env: { ...process.env, WRK_SPEC: specFile }, stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.setEncoding('utf8').on('data', (c: string) => (out += c));
    child.on('error', (e) => reject(new Error(`wrk: ${e.message} (Debian: apt-get install -y wrk)`)));
    child.on('exit', (code) => {
      const line = out.split('\n').find((l) => l.startsWith('{"wrk":true'));
      if (code !== 0 || !line) reject(new Error(`wrk exited ${code}:\n${out}`));
      else resolve(JSON.parse(line) as WrkSummary);
    });
  });
}

if (import.meta.main) {
  const spec = readSpec();
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-wrk-'));
  try {
    const file = join(dir, 'spec');
    writeFileSync(file, wrkSpecFile(spec));
    if (spec.warmupS > 0) await runWrk(spec, file, spec.warmupS);
    emit('measure');
    const s = await runWrk(spec, file, spec.durationS);
    emit('end');
    const seconds = s.duration_us / 1e6;
    const ok = s.requests - s.non2xx;
    const ms = (us: number) => Number((us / 1000).toFixed(3));
    emit('result', {
      requests: ok,
      seconds,
      rps: ok / seconds,
      latency: { p50: ms(s.p50), p99: ms(s.p99), p999: ms(s.p999), mean: ms(s.mean), max: ms(s.max) },
      // wrk counts non-2xx/3xx responses, not their codes.
      statuses: s.non2xx > 0 ? { 'non-2xx': s.non2xx } : {},
      errors: s.errors,
    });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
