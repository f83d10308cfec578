/**
 * Many concurrent slow streams (the "1,000 slow streams" scenario): `connections` loops, each opening
 * a streaming request, reading it to the end and opening the next. Records time to the first body
 * byte per stream, which autocannon cannot see for SSE, and the whole stream's duration. Only streams
 * started after the warm-up (the first 2 s: connection setup, SYN backlog) count for TTFB, and every
 * one of them is waited for, so a proxy that queues streams cannot hide the wait past the window.
 *   node bench/streams.ts '<LoadSpec JSON>'
 */
import { Pool } from 'undici';
import { emit, percentiles, readSpec, window } from './load-result.ts';
import { postOptions, timedRequest, type Timing } from './http-client.ts';

const spec = readSpec();
const url = new URL(spec.url);
const pool = new Pool(url.origin, { connections: spec.connections, pipelining: 1, keepAliveTimeout: 30_000, bodyTimeout: 60_000 });
const opts = postOptions(url, spec.headers, spec.body);

const ttfbs: number[] = [];
const totals: number[] = [];
const statuses: Record<string, number> = {};
let errors = 0;
let completed = 0;
let open = 0;
let maxOpen = 0;
let running = true;
/** Streams started in the window still waiting for their first byte: id → start time. */
const waiting = new Map<number, number>();
let nextId = 0;
/** Streams started in the window that have not ended yet. */
let countedOpen = 0;
let censored = 0;

const w = window(spec, () => {
  running = false;
});

function loop(): void {
  if (!running) return;
  const counted = w.measuring();
  const t0 = performance.now();
  const id = nextId++;
  open++;
  if (counted) {
    maxOpen = Math.max(maxOpen, open);
    waiting.set(id, t0);
    countedOpen++;
  }
  timedRequest(
    pool,
    opts,
    t0,
    (t: Timing) => {
      open--;
      waiting.delete(id);
      // A stream counts for throughput when it ended in the window, for its duration when it started
      // in it (like TTFB: streams of the connection ramp are not mixed in).
      if (w.measuring()) {
        if (t.error) errors++;
        else if (t.status === 200) completed++;
        else statuses[t.status] = (statuses[t.status] ?? 0) + 1;
      }
      if (counted) {
        countedOpen--;
        if (!t.error && t.status === 200) totals.push(t.totalMs);
      }
      // Never recurse synchronously: undici reports some errors from inside dispatch().
      if (t.error) setTimeout(loop, 10);
      else setImmediate(loop);
    },
    (ms, status) => {
      // ... and for TTFB when it started in the window (its first byte may come after the window).
      if (counted && waiting.delete(id) && status === 200) ttfbs.push(ms);
    },
  );
}

// Staggered starts: 1,000 streams started in the same ms would tick in lock-step forever.
const rampMs = (spec.rampS ?? 1) * 1000;
for (let i = 0; i < spec.connections; i++) setTimeout(loop, (i * rampMs) / spec.connections);

// After the window no stream starts, but streams started in it (queued in a proxy, say) are given up
// to 15 s to end; any still waiting for a first byte then enter TTFB at their wait so far (a lower bound).
const CENSOR_AFTER_MS = 15_000;
const done = setInterval(() => {
  if (running) return;
  const now = performance.now();
  if (countedOpen > 0 && now - (w.startedAt() + spec.durationS * 1000) < CENSOR_AFTER_MS) return;
  clearInterval(done);
  for (const t0 of waiting.values()) ttfbs.push(now - t0);
  censored = waiting.size;
  emit('result', {
    requests: completed,
    seconds: spec.durationS,
    rps: completed / spec.durationS,
    latency: percentiles(totals),
    ttfb: percentiles(ttfbs),
    ttfbCensored: censored,
    statuses,
    errors,
    maxOpen,
  });
  // Streams still open are cut: the window is over and the runner moves on.
  void pool.destroy().finally(() => process.exit(0));
}, 20);
