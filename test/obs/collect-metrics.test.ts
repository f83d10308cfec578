// The primary's collector (src/cluster/collect-metrics.ts) with workers that answer over a stand-in for
// node:cluster's IPC: the parts are summed by prom-client's own aggregate, and the missing gauge is
// measured against `expected()` as the primary gives it (the workers listening until all have listened
// once, then server.workers), so a worker still booting at the start is not missing.
import t from 'tap';
import type { Worker } from 'node:cluster';
import { Registry, Counter } from 'prom-client';
import { createCollector } from '../../src/cluster/collect-metrics.ts';
import { createLogger } from '../../src/obs/logger.ts';

async function part(n: number): Promise<object[]> {
  const r = new Registry();
  new Counter({ name: 'tollgate_requests_total', help: 'h', registers: [r] }).inc(n);
  return r.getMetricsAsJSON();
}

t.test('missing is counted against expected(): none while booting, the absent one after', async (t) => {
  let expected = 1;
  const collector = createCollector({ expected: () => expected, logger: createLogger('silent'), waitMs: 200 });
  const worker = (id: number, answers: boolean): Worker => {
    const self = {
      id,
      process: { pid: 1000 + id },
      send(m: { id: number }, cb: (e: Error | null) => void) {
        cb(null);
        if (answers)
          void part(id).then((metrics) => collector.received(self as unknown as Worker, { type: 'tollgate:part', id: m.id, metrics }));
        return true;
      },
    };
    return self as unknown as Worker;
  };
  const w = worker(1, true);
  const gauge = (text: string) => Number(/^tollgate_metrics_workers_missing (\d+)$/m.exec(text)?.[1]);
  // The start: one of two workers listening, the other booting (expected() = the listening ones).
  let text = await collector.collect([w]);
  t.equal(gauge(text), 0, 'a worker still booting at the start is not missing');
  t.match(text, /^tollgate_requests_total 1$/m, "the listening worker's counter");
  // Both listened once; then one stops answering.
  expected = 2;
  const silent = worker(2, false);
  text = await collector.collect([w, silent]);
  t.equal(gauge(text), 1, 'a worker that does not answer is missing');
  text = await collector.collect([w]);
  t.equal(gauge(text), 1, 'and one that is gone (not listening) too');
});
