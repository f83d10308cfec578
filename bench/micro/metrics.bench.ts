/**
 * The metric calls of one live request (src/http/server.ts and src/routes/metered.ts): requests_total
 * (4 labels), request_duration_seconds, gateway_overhead_seconds, upstream_ttfb_seconds, tokens_total
 * twice and credit_debited_micros_total, through `bound()` (plain additions, handed to prom-client when
 * read) and through prom-client's own children as `bound()` used them before (a child per label set,
 * each call hashing and validating its labels). A scrape every 10,000 requests in both.
 * Run: `node bench/micro/metrics.bench.ts`.
 */
import { bound, createMetrics } from '../../src/obs/metrics.ts';
import { createReport, nsPerOp } from './timing.ts';

/** `bound()` as it was before accumulating: prom-client's children, cached by label values. */
function promChildren<C>(metric: { labels(...values: string[]): C }): (...values: (string | number)[]) => C {
  const children = new Map<string, C>();
  return (...values) => {
    const id = values.length === 1 ? String(values[0]) : values.join('\u0001');
    let c = children.get(id);
    if (c === undefined) {
      c = metric.labels(...values.map(String));
      children.set(id, c);
    }
    return c;
  };
}

const MODELS = ['llama-3.1-8b', 'qwen-2.5-7b'];
type Children = {
  requests: (...v: (string | number)[]) => { inc(n?: number): void };
  duration: (...v: (string | number)[]) => { observe(v: number): void };
  overhead: (...v: (string | number)[]) => { observe(v: number): void };
  ttfb: (...v: (string | number)[]) => { observe(v: number): void };
  tokens: (...v: (string | number)[]) => { inc(n?: number): void };
  debited: (...v: (string | number)[]) => { inc(n?: number): void };
};

function oneRequest(m: Children, i: number): void {
  const model = MODELS[i & 1]!;
  m.ttfb(model).observe(0.02 + (i % 50) / 1000);
  m.tokens(model, 'prompt', 'upstream').inc(812);
  m.tokens(model, 'completion', 'upstream').inc(64);
  m.debited(model).inc(700);
  m.requests('chat', model, 200, 'live').inc();
  m.duration('chat').observe(0.05 + (i % 100) / 1000);
  m.overhead('chat').observe(0.0002 + (i % 10) / 100_000);
}

function children(make: typeof bound | typeof promChildren): { m: Children; scrape: () => Promise<string> } {
  const metrics = createMetrics({ defaults: false });
  const b = make as (metric: unknown) => never;
  return {
    m: {
      requests: b(metrics.requests),
      duration: b(metrics.duration),
      overhead: b(metrics.overhead),
      ttfb: b(metrics.upstreamTtfb),
      tokens: b(metrics.tokens),
      debited: b(metrics.creditDebited),
    },
    scrape: () => metrics.registry.metrics(),
  };
}

const report = createReport();
for (const [name, make] of [
  ['prom-client children (before)', promChildren],
  ['bound(): added up, handed over when read', bound],
] as const) {
  const { m, scrape } = children(make);
  report.add(
    `one live request's 7 metric calls, ${name}`,
    nsPerOp((i) => {
      oneRequest(m, i);
      if (i % 10_000 === 0) void scrape();
    }, 200_000),
    'ns/op',
  );
}
report.print();
