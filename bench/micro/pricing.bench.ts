/**
 * Cost arithmetic per request (two calls: the hold and the settle): costMicros on exact BigInt
 * micro-credit scaling, next to the plain-Number equivalent it would be while products stay below
 * 2^53 (a reference for a possible fast path, not what the gateway runs).
 * Run: `node bench/micro/pricing.bench.ts`.
 */
import { costMicros, parsePrice } from '../../src/credit/pricing.ts';
import { createReport, nsPerOp } from './timing.ts';

const price = parsePrice(0.1, 0.4, 'bench');
const inScaled = Number(price.inputScaled);
const outScaled = Number(price.outputScaled);
const SCALE = 1_000_000;

/** The same ceil((p × in + c × out) / 1e6), in doubles: exact while the sum stays ≤ 2^53. */
function costNumber(p: number, c: number): number {
  const total = p * inScaled + c * outScaled;
  return Math.ceil(total / SCALE);
}

for (let i = 0; i < 1000; i++)
  if (costNumber(812 + i, 64 + i) !== costMicros(price, 812 + i, 64 + i)) throw new Error('reference disagrees');

const report = createReport();
report.add(
  'costMicros (BigInt), 812 + 64 tokens',
  nsPerOp((i) => costMicros(price, 812 + (i & 1023), 64), 1_000_000),
  'ns/op',
);
report.add(
  'costMicros (BigInt), 128k + 4096 tokens',
  nsPerOp((i) => costMicros(price, 128_000 + (i & 1023), 4096), 1_000_000),
  'ns/op',
);
report.add(
  'reference: Number arithmetic, 812 + 64 tokens',
  nsPerOp((i) => costNumber(812 + (i & 1023), 64), 1_000_000),
  'ns/op',
);
report.print();
