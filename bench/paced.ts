/**
 * Open-loop load at a fixed rate (the "2,000 req/s, not saturated" scenario). Request i is due at
 * start + i/rate; latency runs from that scheduled time, so a stall is charged to every request it
 * delayed (no coordinated omission). autocannon's `overallRate` is not used: it sends each second's
 * quota back-to-back at the start of the second and then idles (httpClient.js `reqsMadeThisSecond`),
 * which measures a burst at full concurrency, not a steady 2,000 req/s.
 *   node bench/paced.ts '<LoadSpec JSON with rate>'
 */
import { Pool } from 'undici';
import { emit, percentiles, readSpec, window } from './load-result.ts';
import { postOptions, timedRequest, type Timing } from './http-client.ts';

const spec = readSpec();
const rate = spec.rate ?? 2000;
const url = new URL(spec.url);
// Enough connections that the client never queues at this rate (2,000/s × a few ms each ≪ 256).
const pool = new Pool(url.origin, { connections: spec.connections, pipelining: 1, keepAliveTimeout: 30_000 });
const opts = postOptions(url, spec.headers, spec.body);

const latencies: number[] = [];
const statuses: Record<string, number> = {};
let errors = 0;
let scheduledInWindow = 0;
let sent = 0;
let running = true;
const start = performance.now();

const w = window(spec, () => {
  running = false;
});

function tick(): void {
  if (!running) return;
  const now = performance.now();
  const due = Math.floor(((now - start) * rate) / 1000);
  // setTimeout(1) wakes every ~1.1 ms here: 2–3 requests per wake-up, close to a smooth schedule.
  while (sent < due) {
    const scheduled = start + (sent * 1000) / rate;
    const counted = w.measuring();
    if (counted) scheduledInWindow++;
    sent++;
    timedRequest(pool, opts, scheduled, (t: Timing) => {
      if (!counted) return;
      if (t.error) errors++;
      else if (t.status >= 200 && t.status < 300) latencies.push(t.totalMs);
      else statuses[t.status] = (statuses[t.status] ?? 0) + 1;
    });
  }
  setTimeout(tick, 1);
}
tick();

// Requests scheduled inside the window may still be in flight when it closes: wait for them (bounded).
const waitEnd = setInterval(() => {
  if (running) return;
  const settled = latencies.length + errors + Object.values(statuses).reduce((a, b) => a + b, 0);
  if (settled < scheduledInWindow && performance.now() - w.startedAt() < (spec.durationS + 10) * 1000) return;
  clearInterval(waitEnd);
  const requests = latencies.length;
  emit('result', {
    requests,
    seconds: spec.durationS,
    rps: requests / spec.durationS,
    latency: percentiles(latencies),
    statuses,
    errors,
    scheduled: scheduledInWindow,
  });
  void pool.close().finally(() => process.exit(0));
}, 20);
