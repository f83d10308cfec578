// Hot-path metric children (src/obs/metrics.ts bound()): they add to plain numbers and hand the sums to
// prom-client when the registry is read. What a scrape shows must be what prom-client's own children
// would have shown for the same calls, at every scrape, with nothing counted twice or lost.
import t from 'tap';
import { Counter, Histogram, Registry } from 'prom-client';
import { bound } from '../../src/obs/metrics.ts';

const BUCKETS = [0.001, 0.01, 0.1, 1, 10];

/**
 * The exposition text with each `_sum` to 12 significant digits: a bound child adds its values up before
 * they reach the series, so a sum may differ from prom-client's one-at-a-time sum in the last bits of a
 * double. Counts and buckets are integers, compared exactly.
 */
async function scrape(registry: Registry): Promise<string> {
  return (await registry.metrics()).replace(
    /^(\w+_sum(?:\{[^}]*\})?) (\S+)$/gm,
    (_, name: string, v: string) => `${name} ${Number(v).toPrecision(12)}`,
  );
}

/** Twin registries: `hot` fed through bound(), `ref` through prom-client's own labels() children. */
function twins() {
  const make = () => {
    const registry = new Registry();
    const hist = new Histogram({ name: 'x_seconds', help: 'h', labelNames: ['route', 'model'], buckets: BUCKETS, registers: [registry] });
    const count = new Counter({ name: 'x_total', help: 'c', labelNames: ['route', 'status'], registers: [registry] });
    const plain = new Histogram({ name: 'y_seconds', help: 'h', buckets: BUCKETS, registers: [registry] });
    return { registry, hist, count, plain };
  };
  const hot = make();
  const ref = make();
  const h = bound(hot.hist);
  const c = bound(hot.count);
  const p = bound(hot.plain);
  return {
    hot,
    ref,
    observe(route: string, model: string, v: number) {
      h(route, model).observe(v);
      ref.hist.labels(route, model).observe(v);
    },
    inc(route: string, status: number, n?: number) {
      c(route, status).inc(n);
      ref.count.labels(route, String(status)).inc(n);
    },
    plain(v: number) {
      p().observe(v);
      ref.plain.observe(v);
    },
  };
}

// A seeded generator: values on the bounds, between them, past the last one, 0 and below.
function values(seed: number, n: number): number[] {
  let x = seed;
  const next = () => (x = (x * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
  const special = [0, -1, 0.001, 0.01, 0.1, 1, 10, 10.0000001, 1e9, 0.0005];
  return Array.from({ length: n }, (_, i) => (i % 4 === 0 ? special[Math.floor(next() * special.length)]! : next() * 20));
}

t.test('a scrape shows what prom-client would have, call for call', async (t) => {
  const w = twins();
  const vs = values(7, 400);
  for (const [i, v] of vs.entries()) {
    w.observe(i % 3 ? 'chat' : 'responses', i % 2 ? 'm1' : 'm2', v);
    w.inc(i % 3 ? 'chat' : 'responses', i % 5 ? 200 : 429, i % 7 ? undefined : 3);
    w.plain(v);
  }
  t.equal(await scrape(w.hot.registry), await scrape(w.ref.registry), 'the same exposition text');
  t.match(await w.hot.registry.metrics(), /x_seconds_count\{route="chat",model="m1"\} \d+/, 'with the labelled series in it');
});

t.test('each scrape sees every call before it, once', async (t) => {
  const w = twins();
  for (let round = 0; round < 4; round++) {
    for (const v of values(round + 1, 50)) {
      w.observe('chat', 'm1', v);
      w.inc('chat', 200);
    }
    t.equal(await scrape(w.hot.registry), await scrape(w.ref.registry), `scrape ${round + 1}`);
  }
  // A scrape with nothing new since the last changes nothing.
  t.equal(await scrape(w.hot.registry), await scrape(w.ref.registry), 'a scrape with nothing new');
  const json = await w.hot.registry.getMetricsAsJSON();
  const count = json
    .find((m) => m.name === 'x_seconds')!
    .values.find((v) => (v as { metricName?: string }).metricName === 'x_seconds_count')!;
  t.equal(count.value, 200, 'getMetricsAsJSON (cluster aggregation) reads the same counts');
  t.equal(
    (await w.hot.count.get()).values.find((v) => v.labels.status === 200 || v.labels.status === '200')!.value,
    200,
    "a metric's own get() flushes too",
  );
});

t.test('two bound() of one metric add to one series; a reset starts it over', async (t) => {
  const registry = new Registry();
  const hist = new Histogram({ name: 'z_seconds', help: 'h', labelNames: ['route'], buckets: BUCKETS, registers: [registry] });
  const a = bound(hist);
  const b = bound(hist);
  a('chat').observe(0.5);
  b('chat').observe(5);
  await registry.metrics();
  a('chat').observe(0.05);
  const text = await registry.metrics();
  t.match(text, /z_seconds_count\{route="chat"\} 3\n/);
  t.match(text, /z_seconds_sum\{route="chat"\} 5\.55/);
  t.match(text, /z_seconds_bucket\{le="1",route="chat"\} 2\n/);
  // A series a direct observe made, with a number for a label value, is the one bound() adds to.
  const byStatus = new Histogram({ name: 's_seconds', help: 'h', labelNames: ['status'], buckets: BUCKETS, registers: [registry] });
  byStatus.observe({ status: 200 }, 0.5);
  bound(byStatus)(200).observe(0.5);
  t.match(await registry.metrics(), /s_seconds_count\{status="200"\} 2\n/, 'one series, both observations');
  registry.resetMetrics();
  b('chat').observe(2);
  const after = await registry.metrics();
  t.match(after, /z_seconds_count\{route="chat"\} 1\n/, 'after resetMetrics() only what came since');
});

t.test('bad values are refused at the call, as prom-client refuses them', async (t) => {
  const registry = new Registry();
  const hist = bound(new Histogram({ name: 'h_seconds', help: 'h', labelNames: ['route'], buckets: BUCKETS, registers: [registry] }));
  const count = bound(new Counter({ name: 'c_total', help: 'c', labelNames: ['route'], registers: [registry] }));
  t.throws(() => hist('chat').observe(NaN), TypeError);
  t.throws(() => hist('chat').observe(Infinity), TypeError);
  t.throws(() => count('chat').inc(-1), /not possible to decrease/);
  t.throws(() => count('chat').inc(NaN));
  t.throws(() => hist('a', 'b').observe(1), 'a wrong number of label values is refused when the child is made');
  t.notMatch(await registry.metrics(), /h_seconds_count\{/, 'nothing was recorded');
});
