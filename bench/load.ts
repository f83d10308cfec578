/**
 * Closed-loop load with autocannon used as a library, in its own process (never inside the process
 * being measured): `connections` keep-alive connections, each sending its next request as soon as the
 * previous one ended. Latency comes from autocannon's per-response event in fractional ms: its own
 * histogram keeps whole milliseconds (lowestDiscernibleValue 1), too coarse for sub-ms overheads.
 *   node bench/load.ts '<LoadSpec JSON>'
 */
import autocannon from 'autocannon';
import { emit, percentiles, readSpec, window } from './load-result.ts';

const spec = readSpec();
const latencies: number[] = [];
const statuses: Record<string, number> = {};
let errors = 0;

const instance = autocannon(
  {
    url: spec.url,
    method: 'POST',
    headers: spec.headers,
    body: spec.body,
    connections: spec.connections,
    // Stopped by the window below; the slack only guards against a stuck run.
    duration: spec.warmupS + spec.durationS + 5,
    timeout: 10,
  },
  () => {
    const seconds = spec.durationS;
    const requests = latencies.length;
    emit('result', { requests, seconds, rps: requests / seconds, latency: percentiles(latencies), statuses, errors });
  },
);

const w = window(spec, () => instance.stop());
instance.on('response', (_client: unknown, statusCode: number, _bytes: number, ms: number) => {
  if (!w.measuring()) return;
  if (statusCode >= 200 && statusCode < 300) latencies.push(ms);
  else statuses[statusCode] = (statuses[statusCode] ?? 0) + 1;
});
instance.on('reqError', () => {
  if (w.measuring()) errors++;
});
