/**
 * What a load child is asked to do and what it reports, shared by the runner and the three load
 * clients (wrk, paced, streams). A child prints one JSON line per event on stdout:
 * `{"event":"measure"}` when its warm-up ends, `{"event":"end"}` when the measured window closes
 * (the runner brackets its CPU/RSS sampling with those two), then `{"event":"result", ...}`.
 */

/** One load run against one target. */
export interface LoadSpec {
  /** Full URL, path included. */
  url: string;
  headers: Record<string, string>;
  body: string;
  /** Concurrent connections (wrk) or concurrent streams (streams client). */
  connections: number;
  /** Not measured: lets JIT, pools and keep-alive connections settle (TTFB: the first 2 s). */
  warmupS: number;
  /** The measured window. */
  durationS: number;
  /** Paced client: requests per second, open loop. */
  rate?: number;
  /** Streams client: spread the first request of each stream over this long (no lock-step ticks). */
  rampS?: number;
}

/** Percentiles in ms. */
export interface Percentiles {
  p50: number;
  p99: number;
  p999: number;
  mean: number;
  max: number;
}

/** What a load child measured inside its window. */
export interface LoadResult {
  /** Completed 2xx responses in the window. */
  requests: number;
  seconds: number;
  rps: number;
  /** Request start (paced: scheduled start) to the response's end. */
  latency: Percentiles;
  /** Time to the first body byte (streams client only). */
  ttfb?: Percentiles;
  /** Responses that were not 2xx, by status. */
  statuses: Record<string, number>;
  errors: number;
  /** Streams client: streams whose first byte had not come 15 s after the window (TTFB is a lower bound). */
  ttfbCensored?: number;
  /** Streams client: the most streams open at once. */
  maxOpen?: number;
  /** Paced client: requests the schedule asked for in the window. */
  scheduled?: number;
}

/** Percentiles of a list of samples (sorted in place); zeros when empty. */
export function percentiles(samples: number[]): Percentiles {
  if (samples.length === 0) return { p50: 0, p99: 0, p999: 0, mean: 0, max: 0 };
  samples.sort((a, b) => a - b);
  const at = (q: number) => samples[Math.min(samples.length - 1, Math.max(0, Math.ceil(q * samples.length) - 1))]!;
  let sum = 0;
  for (const s of samples) sum += s;
  const r = (v: number) => Number(v.toFixed(3));
  return { p50: r(at(0.5)), p99: r(at(0.99)), p999: r(at(0.999)), mean: r(sum / samples.length), max: r(samples[samples.length - 1]!) };
}

/** Prints one protocol line. */
export function emit(event: 'measure' | 'end' | 'result', data: object = {}): void {
  process.stdout.write(`${JSON.stringify({ event, ...data })}\n`);
}

/** Reads the spec a child was started with (argv[2], JSON). */
export function readSpec(): LoadSpec {
  const raw = process.argv[2];
  if (!raw) throw new Error('usage: node bench/<client>.ts <LoadSpec JSON>');
  return JSON.parse(raw) as LoadSpec;
}

/** Schedules the window: calls onMeasure at warm-up end and onEnd when the window closes. */
export function window(spec: LoadSpec, onEnd: () => void): { measuring: () => boolean; startedAt: () => number } {
  let measuring = false;
  let t0 = 0;
  setTimeout(() => {
    measuring = true;
    t0 = performance.now();
    emit('measure');
    setTimeout(() => {
      measuring = false;
      emit('end');
      onEnd();
    }, spec.durationS * 1000);
  }, spec.warmupS * 1000);
  return { measuring: () => measuring, startedAt: () => t0 };
}
