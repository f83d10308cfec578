/**
 * Cost of an error answer's body (401/402/429 floods are answered at line rate): errorBody +
 * JSON.stringify of a ready GatewayError, and the same including the GatewayError's construction
 * (an Error captures a stack trace). Run: `node bench/micro/error-body.bench.ts`.
 */
import { GatewayError } from '../../src/http/errors.ts';
import { errorBody } from '../../src/http/respond.ts';
import { createReport, nsPerOp } from './timing.ts';

const ready = new GatewayError('invalid_api_key', 'Invalid API key.');
const withHeaders = () =>
  new GatewayError('rate_limit_exceeded', 'Rate limit reached: 60 requests per 60s window for this key. The window resets in 12s.', {
    headers: { 'retry-after': '12', 'retry-after-ms': '11234', 'x-should-retry': 'false' },
  });

const report = createReport();
report.add(
  'errorBody + JSON.stringify (ready error)',
  nsPerOp(() => JSON.stringify(errorBody(ready)), 500_000),
  'ns/op',
);
report.add(
  'new GatewayError + errorBody + stringify',
  nsPerOp(() => JSON.stringify(errorBody(new GatewayError('invalid_api_key', 'Invalid API key.'))), 200_000),
  'ns/op',
);
report.add(
  '429 with headers: construct + body',
  nsPerOp(() => JSON.stringify(errorBody(withHeaders())), 200_000),
  'ns/op',
);
report.print();
