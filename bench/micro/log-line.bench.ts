/**
 * Cost of the one log line per request (SPEC §7): the request line's writer (createLineWriter, what the
 * edge uses), the gateway's pino logger (redaction on) and the same pino logger without redaction.
 * Lines go to a no-op destination, so only formatting is measured.
 * Run: `node bench/micro/log-line.bench.ts`.
 */
import { pino } from 'pino';
import { createLineWriter, createLogger } from '../../src/obs/logger.ts';
import { isoTime } from '../../src/obs/iso-time.ts';
import { createReport, nsPerOp } from './timing.ts';

let bytes = 0;
const sink = { write: (s: string) => void (bytes += s.length) };
const withRedact = createLogger('info', sink);
const plain = pino({ level: 'info', base: { svc: 'tollgate' }, timestamp: pino.stdTimeFunctions.isoTime }, sink);

// The shape server.ts finish() logs for a settled live-key chat completion.
const line = () => ({
  listener: 'public',
  request_id: 'req_4mJ9sQfW2xYbT7kP1nRcZe',
  method: 'POST',
  route: '/v1/chat/completions',
  status: 200,
  duration_ms: 12.345,
  model: 'llama-3.1-8b',
  hold_micros: 1660,
  upstream: '127.0.0.1:8000',
  upstream_status: 200,
  prompt_tokens: 812,
  completion_tokens: 64,
  usage_source: 'upstream',
  cost_micros: 107,
  relay_end: 'complete',
  overhead_us: 210,
  key_id: 'key_8Jk2mN4pQ6rS8tU1',
  account: 'acme',
});

const requestLine = createLineWriter(withRedact, 'request');

const report = createReport();
report.add(
  'request line writer (the edge)',
  nsPerOp(() => requestLine(line()), 100_000),
  'ns/op',
);
report.add(
  'logger.info(request line), redaction on',
  nsPerOp(() => withRedact.info(line(), 'request'), 100_000),
  'ns/op',
);
report.add(
  'same line, pino without redaction',
  nsPerOp(() => plain.info(line(), 'request'), 100_000),
  'ns/op',
);
report.add(
  'isoTime(Date.now()) (cached head)',
  nsPerOp(() => isoTime(Date.now()), 100_000),
  'ns/op',
);
report.add(
  'new Date().toISOString()',
  nsPerOp(() => new Date(Date.now()).toISOString(), 100_000),
  'ns/op',
);
report.print();
if (bytes === 0) throw new Error('nothing logged');
