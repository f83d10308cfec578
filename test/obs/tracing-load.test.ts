// Tracing off costs nothing at boot either: a gateway without `otel` loads no OpenTelemetry SDK module
// (it is ~1 s and ~10 MB of heap), and one with it loads them (so this test can fail). The API package
// is left out: prom-client (process CPU metrics) requires it whatever the config.
// Each case runs in a fresh process with a module resolve hook that records what gets loaded.
import t from 'tap';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';

const run = promisify(execFile);

/** The OpenTelemetry modules but the API (and obs/otlp.ts, obs/request-trace.ts) a fresh process loads to build and start a gateway with `otel`. */
async function loaded(otel: unknown): Promise<string[]> {
  const code = `
    import { registerHooks } from 'node:module';
    const seen = new Set();
    registerHooks({ resolve(spec, ctx, next) {
      const r = next(spec, ctx);
      if (/@opentelemetry\\/(?!api\\/)|obs\\/otlp\\.ts|obs\\/request-trace\\.ts/.test(r.url)) seen.add(r.url.replace(/.*node_modules\\//, ''));
      return r;
    } });
    const { compileConfig } = await import('./src/config/schema.ts');
    const { createGateway } = await import('./src/gateway.ts');
    const { createMemoryStore } = await import('./src/store/memory-store.ts');
    const { createLogger } = await import('./src/obs/logger.ts');
    const { createMetrics } = await import('./src/obs/metrics.ts');
    const config = compileConfig({
      otel: ${JSON.stringify(otel)},
      server: { host: '127.0.0.1', port: 0, admin_host: '127.0.0.1', admin_port: 0 },
      models: [{ name: 'm', price: { input: 1, output: 1 }, upstreams: [{ url: 'http://127.0.0.1:9/v1' }] }],
    }, {});
    const gw = createGateway({ config, store: createMemoryStore(), logger: createLogger('silent'), metrics: createMetrics({ defaults: false }) });
    await gw.listen();
    await gw.close(0);
    process.stdout.write(JSON.stringify([...seen]));
  `;
  const { stdout } = await run(process.execPath, ['--input-type=module', '-e', code], { cwd: new URL('../..', import.meta.url).pathname });
  return JSON.parse(stdout) as string[];
}

t.test('without otel: no OpenTelemetry SDK module is loaded', async (t) => {
  t.same(await loaded(null), []);
});

t.test('with otel: the SDK and the exporter are loaded', async (t) => {
  const mods = await loaded({ endpoint: 'http://127.0.0.1:9' });
  t.ok(
    mods.some((m) => m.startsWith('@opentelemetry/sdk-trace/')),
    mods.join(', '),
  );
  t.ok(mods.some((m) => m.startsWith('@opentelemetry/exporter-trace-otlp-http/')));
});
