/**
 * Cost of the one log line per request (SPEC §7) with the gateway's logger (redaction on), next to the
 * same pino logger without redaction: the profile of the live-key path shows @pinojs/redact re-parsing
 * its paths on every line. Lines go to a no-op destination, so only formatting is measured.
 * Run: `node bench/micro/log-line.bench.ts`.
 */
import { pino } from 'pino';
import { createLogger } from '../../src/obs/logger.ts';
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

const report = createReport();
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
report.print();
if (bytes === 0) throw new Error('nothing logged');
