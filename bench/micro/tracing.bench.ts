/**
 * What SPEC §15 traces cost per request: the route's hook sequence (request span, hold, upstream with
 * its traceparent, settle, billing, end) run as routes/metered.ts runs it, (a) off (`trace` undefined:
 * every hook is `trace?.`) and (b) on at sample_ratio 1 with the real OTLP/HTTP JSON exporter, its batch
 * processor and the export to a collector in another process (so only the gateway side is counted).
 * (b) is process CPU µs per request including the batched export's serialisation and HTTP, measured
 * over 20 000 requests and a final flush. Run: `node bench/micro/tracing.bench.ts`.
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { compileConfig } from '../../src/config/schema.ts';
import { createOtlpTracing } from '../../src/obs/otlp.ts';
import type { RequestTrace, Tracing } from '../../src/obs/tracing.ts';
import { withTraceparent } from '../../src/obs/tracing.ts';
import type { RequestContext } from '../../src/http/context.ts';
import { createReport, nsPerOp } from './timing.ts';

// The collector: a separate process answering 200 to every export, counting the spans it got (GET).
const collector = spawn(
  process.execPath,
  [
    '-e',
    `let spans = 0;
     require('node:http').createServer((q, s) => {
       let n = 0;
       q.setEncoding('utf8').on('data', (c) => { n += c.split('"spanId"').length - 1; });
       q.on('end', () => { spans += n; s.end(q.method === 'GET' ? String(spans) : '{}'); });
     }).listen(0, '127.0.0.1', function () { console.log(this.address().port); });`,
  ],
  { stdio: ['ignore', 'pipe', 'inherit'] },
);
const [portLine] = (await once(collector.stdout!, 'data')) as [Buffer];
const port = Number(String(portLine).trim());

const config = compileConfig(
  {
    otel: { endpoint: `http://127.0.0.1:${port}`, sample_ratio: 1 },
    models: [{ name: 'm', price: { input: 1, output: 1 }, upstreams: [{ url: 'http://127.0.0.1:9/v1' }] }],
  },
  {},
);
const ctx = {
  req: { headers: { traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01' } },
  key: { account: 'acct_bench', id: 'key_0123456789', env: 'live' },
  requestId: 'req_0123456789abcdefghijkl',
  route: '/v1/chat/completions',
  res: { statusCode: 200 },
} as unknown as RequestContext;
const settled = Promise.resolve();
const headers = (): Record<string, string> => ({ 'content-type': 'application/json', 'x-request-id': ctx.requestId });

/** One request's hooks, in the route's order. */
function request(tracing: Tracing | undefined): void {
  const trace: RequestTrace | undefined = tracing?.start(ctx, 'chat');
  trace?.model('m', 'org/model-8b');
  const holdSpan = trace?.hold(1234);
  holdSpan?.end();
  trace?.upstreamStart();
  withTraceparent(trace, headers());
  trace?.upstreamAnswered(200, 'http://10.0.0.5:8000/v1');
  trace?.upstreamEnd(200, 'complete');
  trace?.settle(settled, 1000);
  trace?.billed(100, 50, 1000, 'upstream');
  trace?.end(200);
}

const report = createReport();
report.add(
  'off: hooks on an undefined trace (+ the headers object the route builds anyway)',
  nsPerOp(() => request(undefined), 200_000),
  'ns/op',
);

const tracing = createOtlpTracing(config.otel!, 'bench');
const N = 20_000;
for (let i = 0; i < 2_000; i++) {
  request(tracing); // warm
  if (i % 50 === 49) await new Promise((r) => setImmediate(r));
}
await new Promise((r) => setTimeout(r, 100));
const cpu0 = process.cpuUsage();
const t0 = process.hrtime.bigint();
for (let i = 0; i < N; i++) {
  request(tracing);
  // Let the batch processor's timers and exports run as they would between requests.
  if (i % 50 === 49) await new Promise((r) => setImmediate(r));
}
await tracing.shutdown(); // the last batches exported
const cpu = process.cpuUsage(cpu0);
const wall = Number(process.hrtime.bigint() - t0) / 1e3;
report.add(
  'on, ratio 1: 4 spans + OTLP/HTTP JSON export, process CPU',
  (cpu.user + cpu.system) / N,
  'µs/op',
  `wall ${(wall / N).toFixed(1)} µs/op`,
);
const exported = Number(await (await fetch(`http://127.0.0.1:${port}/`)).text());
report.print();
// Spans past the batch processor's queue (2048) are dropped, not exported: the figure counts only what left.
console.log(`spans exported: ${exported} of ${4 * (N + 2_000)}`);
collector.kill();
