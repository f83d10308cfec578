/**
 * Cost of the request id every request gets (`req_` + 22 base58 from a CSPRNG): newRequestId, and
 * the raw randomFillSync of 64 bytes it draws per call, to show how much of it is the syscall-backed
 * CSPRNG call. Run: `node bench/micro/request-id.bench.ts`.
 */
import { randomFillSync } from 'node:crypto';
import { newRequestId } from '../../src/http/server.ts';
import { createReport, nsPerOp } from './timing.ts';

const buf = new Uint8Array(64);
const report = createReport();
report.add(
  'newRequestId()',
  nsPerOp(() => newRequestId(), 200_000),
  'ns/op',
);
report.add(
  'randomFillSync(64 bytes) alone',
  nsPerOp(() => randomFillSync(buf), 200_000),
  'ns/op',
);
report.print();
