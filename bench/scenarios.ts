/**
 * The benchmark scenarios, as load specs per target. Output size and pacing are steered per request
 * with the simulator's `sim` body field, which every proxy here passes through unchanged (Tollgate
 * forwards only allowlisted headers, so `x-sim-*` headers would not reach the simulator through it).
 * Closed-loop scenarios run on wrk; slow streams and the fixed rate need our own clients (wrk has no
 * open-loop pacing, and wrk2 is not packaged here).
 */
import type { LoadSpec } from './load-result.ts';
import { MODEL, type Target } from './stack.ts';

export type ScenarioId = 'nonstream' | 'stream64' | 'responses64' | 'slow1000' | 'prompt32k' | 'rate2000' | 'serial';

export interface Scenario {
  readonly id: ScenarioId;
  readonly title: string;
  /** Which load child runs it. */
  readonly client: 'wrk' | 'streams' | 'paced';
  /** Runs only when named in `--only` (a diagnostic, not one of the scenarios). */
  readonly optIn?: boolean;
  spec(t: Target, quick: boolean): LoadSpec;
}

const SHORT = 'Say hello in one short sentence.';
const prose = 'The committee reviewed the proposal in detail and, after a long discussion about costs, agreed to revisit it next quarter. ';
/** A 32 KB user message (32,768 bytes of content). */
const LONG = prose.repeat(Math.ceil(32768 / prose.length)).slice(0, 32768);

function body(content: string, stream: boolean, sim: Record<string, number> = { tokens: 64 }): string {
  return JSON.stringify({ model: MODEL, messages: [{ role: 'user', content }], max_tokens: 64, ...(stream && { stream: true }), sim });
}

/** A streamed Responses API request (issue 19): the same 64 tokens as stream64, as typed events. */
function responsesBody(content: string): string {
  return JSON.stringify({ model: MODEL, input: content, max_output_tokens: 64, stream: true, sim: { tokens: 64 } });
}

function headers(t: Target): Record<string, string> {
  return { 'content-type': 'application/json', authorization: t.authorization };
}

/** Closed-loop window lengths: quick keeps the whole pass near one minute on 2 cores. */
// Full mode: 5 rounds of short windows beat 3 rounds of long ones here: the noise is run-to-run
// (a round's ×bare ratio moved 0.35–0.53 with 5 s windows), and a median of 5 absorbs outliers.
const win = (quick: boolean) => (quick ? { warmupS: 0.4, durationS: 1.2 } : { warmupS: 1, durationS: 3 });

export const SCENARIOS: readonly Scenario[] = [
  {
    id: 'nonstream',
    title: 'non-streaming, 64 tokens, c=64',
    client: 'wrk',
    spec: (t, q) => ({ url: `${t.base}/chat/completions`, headers: headers(t), body: body(SHORT, false), connections: 64, ...win(q) }),
  },
  {
    id: 'stream64',
    title: 'streaming, 64 tokens, c=64',
    client: 'wrk',
    spec: (t, q) => ({ url: `${t.base}/chat/completions`, headers: headers(t), body: body(SHORT, true), connections: 64, ...win(q) }),
  },
  {
    // Beside stream64: the same output through /v1/responses (72 typed events, usage in response.completed).
    id: 'responses64',
    title: 'streaming /v1/responses, 64 tokens, c=64',
    client: 'wrk',
    spec: (t, q) => ({ url: `${t.base}/responses`, headers: headers(t), body: responsesBody(SHORT), connections: 64, ...win(q) }),
  },
  {
    id: 'slow1000',
    title: '1,000 slow streams, 64 tokens × 20 ms',
    client: 'streams',
    // 64 tokens at 20 ms ≈ 1.3 s per stream; TTFB counts only streams started after the first 2 s.
    spec: (t, q) => ({
      url: `${t.base}/chat/completions`,
      headers: headers(t),
      body: body(SHORT, true, { tokens: 64, delay_ms: 20 }),
      connections: 1000,
      warmupS: 2,
      durationS: q ? 1.5 : 4,
      rampS: 1,
    }),
  },
  {
    id: 'prompt32k',
    title: '32 KB prompt, non-streaming, c=64',
    client: 'wrk',
    spec: (t, q) => ({ url: `${t.base}/chat/completions`, headers: headers(t), body: body(LONG, false), connections: 64, ...win(q) }),
  },
  {
    id: 'rate2000',
    title: 'fixed 2,000 req/s, non-streaming (open loop)',
    client: 'paced',
    spec: (t, q) => ({
      url: `${t.base}/chat/completions`,
      headers: headers(t),
      body: body(SHORT, false),
      connections: 256,
      rate: 2000,
      ...win(q),
    }),
  },
  {
    // No queueing at all: each target's latency is its critical path (the proxy's work between the
    // waits, plus the waits: Redis and upstream round trips, process wake-ups).
    id: 'serial',
    title: 'non-streaming, one request at a time (c=1)',
    client: 'wrk',
    optIn: true,
    spec: (t, q) => ({ url: `${t.base}/chat/completions`, headers: headers(t), body: body(SHORT, false), connections: 1, ...win(q) }),
  },
];
