// SPEC §13 "No first-use stalls": /readyz is 503 `warm_up: loading` until the fallback tokenizer is
// loaded, and listen() resolves only then. The tokenizer's import is held open here (injected), so the
// window is observed deterministically; test/isolation/noisy-first-use.test.ts runs the real cold import in a
// fresh process. A tokenizer that cannot load is logged and the gateway becomes ready anyway.
import t from 'tap';
import { Writable } from 'node:stream';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { compileConfig } from '../../src/config/schema.ts';
import { createGateway } from '../../src/gateway.ts';
import { createLogger } from '../../src/obs/logger.ts';
import { createMetrics } from '../../src/obs/metrics.ts';
import { createMemoryStore } from '../../src/store/memory-store.ts';
import { createTokenizer, type TokenizerModule } from '../../src/meter/tokenizer.ts';
import { createWarmUp } from '../../src/admin/warm-up.ts';
import { ADMIN_TOKEN, testConfigDoc } from '../helpers/gateway.ts';
import { freePort } from '../helpers/ports.ts';
import { waitFor } from '../helpers/wait.ts';

const fakeModule: TokenizerModule = { countTokens: (text) => text.length };

async function build(t: import('tap').Test, importModule: () => Promise<TokenizerModule>) {
  const adminPort = await freePort();
  const doc = testConfigDoc();
  doc.server = { ...(doc.server as object), admin_port: adminPort };
  const config = compileConfig(doc, { TOLLGATE_ADMIN_TOKEN: ADMIN_TOKEN });
  const logs: string[] = [];
  const sink = new Writable({
    write(chunk, _enc, cb) {
      logs.push(String(chunk));
      cb();
    },
  });
  const store = createMemoryStore();
  const tokenizer = createTokenizer({ importModule });
  const gateway = createGateway({
    config,
    store,
    logger: createLogger('info', sink),
    metrics: createMetrics({ defaults: false }),
    tokenizer,
  });
  t.teardown(() => gateway.close(500));
  return { gateway, tokenizer, logs, readyz: `http://127.0.0.1:${adminPort}/readyz`, healthz: `http://127.0.0.1:${adminPort}/healthz` };
}

/** GET, retried while the listener is not up yet (listen() is still pending by design). */
async function get(url: string): Promise<{ status: number; body: any }> {
  for (let i = 0; ; i++) {
    try {
      const res = await fetch(url);
      return { status: res.status, body: await res.json() };
    } catch (e) {
      if (i > 200) throw e;
      await new Promise((r) => setTimeout(r, 10));
    }
  }
}

t.test('/readyz is 503 while the tokenizer loads, 200 once loaded; listen() waits for it', async (t) => {
  let release!: (m: TokenizerModule) => void;
  const held = new Promise<TokenizerModule>((r) => (release = r));
  const { gateway, tokenizer, readyz, healthz } = await build(t, () => held);
  let listened = false;
  const listening = gateway.listen().then((urls) => ((listened = true), urls));

  const before = await get(readyz);
  t.equal(before.status, 503, 'not ready while the tokenizer is loading');
  t.match(before.body, { status: 'not_ready', store: 'ok', warm_up: 'loading' });
  t.equal((await get(healthz)).status, 200, '/healthz answers meanwhile: the process is up');
  t.notOk(tokenizer.loaded);
  t.notOk(listened, 'listen() has not resolved');

  release(fakeModule);
  await listening;
  t.ok(tokenizer.loaded, 'loaded by the time listen() resolves');
  const after = await get(readyz);
  t.equal(after.status, 200);
  t.match(after.body, { status: 'ready', warm_up: 'done' });
});

t.test('a tokenizer that cannot load is logged, and the gateway becomes ready anyway', async (t) => {
  const { gateway, logs, readyz } = await build(t, () => Promise.reject(new Error('module missing')));
  await gateway.listen();
  const r = await get(readyz);
  t.equal(r.status, 200, 'ready: requests fall back to the byte bound');
  t.equal(r.body.warm_up, 'failed');
  t.ok(
    logs.some((l) => l.includes('warm-up failed') && l.includes('tokenizer') && l.includes('module missing')),
    'the failure is logged with the piece',
  );
});

t.test('warm-up runs once: one import, one presign without network, one self-request', async (t) => {
  let imports = 0;
  const tokenizer = createTokenizer({
    importModule: async () => {
      imports++;
      return fakeModule;
    },
  });
  const errors: unknown[] = [];
  const logger = { warn: () => {}, error: (o: unknown) => void errors.push(o) } as never;
  // An endpoint nobody listens on: a presign is local (HMAC), so nothing is contacted.
  const s3 = { endpoint: 'http://127.0.0.1:9', region: 'us-east-1', bucket: 'b', forcePathStyle: true };
  const w = createWarmUp({ tokenizer, s3: s3 as never, logger });
  // The self-request that has undici compile its parser: one GET, its connection closed after.
  const hits: string[] = [];
  const server = createServer((req, res) => {
    hits.push(req.url!);
    res.end('{"status":"ok"}');
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.teardown(() => server.close());
  const self = `http://127.0.0.1:${(server.address() as AddressInfo).port}/healthz`;
  t.equal(w.state, 'idle');
  const a = w.run(self);
  t.equal(w.state, 'loading');
  await Promise.all([a, w.run(self)]);
  await w.run(self);
  t.equal(w.state, 'done');
  t.equal(imports, 1, 'one import');
  t.strictSame(hits, ['/healthz'], 'one request to the given URL');
  t.strictSame(errors, [], 'the presign needed no credentials and no network');
  const open = () => new Promise<number>((r) => server.getConnections((_e, n) => r(n)));
  await waitFor(async () => (await open()) === 0, 2_000, 'the warm-up connection to close');
  t.pass('no connection left open');
});
