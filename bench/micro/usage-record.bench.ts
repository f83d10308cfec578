/**
 * Cost of the one call the chat route makes per billed request for usage aggregates (SPEC §10):
 * `usage.record(…)`, an in-process map update (no I/O; the flush runs on a timer, off the request).
 * Cases: the same cell again (the common steady state) and a new cell each time (many keys × models).
 * Run: `node bench/micro/usage-record.bench.ts`.
 */
import { Writable } from 'node:stream';
import { createLogger } from '../../src/obs/logger.ts';
import { createMemoryStore } from '../../src/store/memory-store.ts';
import { createUsage } from '../../src/usage/usage.ts';
import { createReport, nsPerOp } from './timing.ts';

const logger = createLogger('silent', new Writable({ write: (_c, _e, cb) => cb() }));
const usage = createUsage({ store: createMemoryStore(), logger, retentionDays: 400, flushIntervalMs: 1000, maxPendingCells: 1e9 });
const base = {
  account: 'acme',
  keyId: 'key_1aw7PEsv3GchYF4Y',
  live: true,
  model: 'llama-3.1-8b',
  promptTokens: 120,
  completionTokens: 300,
  costMicros: 132,
};
const at = Date.now();
let i = 0;
const report = createReport();
report.add(
  'record(), same cell',
  nsPerOp(() => usage.record({ ...base, at }), 200_000),
  'ns/op',
);
report.add(
  'record(), a new key each call',
  nsPerOp(() => usage.record({ ...base, keyId: `key_${i++}`, at }), 100_000),
  'ns/op',
);
report.print();
