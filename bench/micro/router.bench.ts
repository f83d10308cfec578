/**
 * Cost of routing a request with the gateway's public route table: the chat route (first in the
 * table), a parameterised share route, and an unknown path (a 404 GatewayError is thrown).
 * Run: `node bench/micro/router.bench.ts`.
 */
import { createRouter, type Route } from '../../src/http/router.ts';
import { createReport, nsPerOp } from './timing.ts';

const h = async () => {};
// The public table as gateway.ts assembles it (chat, models, shares).
const routes: Route[] = [
  { method: 'POST', pattern: '/v1/chat/completions', handler: h },
  { method: 'GET', pattern: '/v1/models', handler: h },
  { method: 'POST', pattern: '/v1/shares', handler: h },
  { method: 'GET', pattern: '/v1/shares/{slug}', handler: h },
  { method: 'DELETE', pattern: '/v1/shares/{slug}', handler: h },
];
const router = createRouter(routes);

const report = createReport();
report.add(
  'match POST /v1/chat/completions',
  nsPerOp(() => router.match('POST', '/v1/chat/completions'), 1_000_000),
  'ns/op',
);
report.add(
  'match GET /v1/shares/{slug}',
  nsPerOp(() => router.match('GET', '/v1/shares/4mJ9sQfW2xYbT7kP1nRcZe'), 1_000_000),
  'ns/op',
);
report.add(
  'unknown path → 404 thrown',
  nsPerOp(() => {
    try {
      return router.match('GET', '/v1/nope');
    } catch (e) {
      return e;
    }
  }, 100_000),
  'ns/op',
);
report.print();
