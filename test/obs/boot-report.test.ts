// What the boot tells an operator: the summary, the warnings for likely mistakes, the listen error.
import t from 'tap';
import { createServer } from 'node:net';
import { compileConfig } from '../../src/config/schema.ts';
import { bootSummary, bootWarnings, listenErrorMessage } from '../../src/obs/boot-report.ts';
import { listen } from '../../src/http/server.ts';

const model = (urls: string[]) => ({ name: 'm', price: { input: 1, output: 1 }, upstreams: urls.map((url) => ({ url })) });

t.test('an upstream URL without a version path is warned about; /v1, /v1beta and /api/v2 are not', async (t) => {
  const config = compileConfig(
    {
      server: { host: '127.0.0.1' },
      models: [model(['http://a:8000', 'http://b:8000/v1', 'http://c/api/v2/', 'http://d/v1beta', 'http://e:11434/'])],
    },
    {},
  );
  const w = bootWarnings(config);
  t.equal(w.length, 2, w.join('\n'));
  t.match(w[0], /models\[0\]\.upstreams\[0\]\.url "http:\/\/a:8000" has no version path/);
  t.match(w[1], /upstreams\[4\]/);
  t.same(bootWarnings(compileConfig({ server: { host: '127.0.0.1' }, models: [model(['http://x/v1'])] }, {})), []);
});

t.test('a public listener off loopback with a loopback console.public_url is warned about (issue 27)', async (t) => {
  const warn = (server: Record<string, unknown>, env: Record<string, string> = {}, extra: Record<string, unknown> = {}) =>
    bootWarnings(compileConfig({ server, models: [model(['http://x/v1'])], ...extra }, env)).filter((w) =>
      w.startsWith('console.public_url'),
    );
  t.match(warn({ host: '0.0.0.0' }), [
    /^console\.public_url is unset \(http:\/\/127\.0\.0\.1:<port>\) while the public listener is on 0\.0\.0\.0: .*Set CONSOLE_PUBLIC_URL/,
  ]);
  t.equal(warn({ host: '::' }, {}, { console: { public_url: 'http://localhost:8080' } }).length, 1, 'an explicit loopback origin too');
  t.same(warn({ host: '0.0.0.0' }, {}, { console: { public_url: 'https://api.example.com' } }), [], 'a real origin: quiet');
  t.same(warn({ host: '127.0.0.1' }), [], 'a loopback listener: quiet');
  t.same(warn({ host: '0.0.0.0' }, {}, { console: { enabled: false } }), [], 'no console: quiet');
});

t.test('the summary says where each model goes, which store, and whether the admin API is on', async (t) => {
  const urls = { publicUrl: 'http://p', adminUrl: 'http://a' };
  const off = bootSummary(compileConfig({ models: [model(['http://x/v1', 'http://y/v1'])] }, {}), 'memory', urls);
  t.same(off.models, { m: ['http://x/v1', 'http://y/v1'] });
  t.equal(off.store, 'memory');
  t.match(off.admin_api, /^off \(set TOLLGATE_ADMIN_TOKEN/);
  const on = bootSummary(
    compileConfig({ models: [model(['http://x/v1'])] }, { TOLLGATE_ADMIN_TOKEN: 'X3I8tSxa72IlJ3Qdrh/SttlULQmRGyBK' }),
    'redis',
    urls,
  );
  t.equal(on.admin_api, 'on');
});

t.test('a port in use names the variable that moves that listener', async (t) => {
  const blocker = createServer();
  await new Promise<void>((r) => blocker.listen(0, '127.0.0.1', r));
  t.teardown(() => blocker.close());
  const busy = (blocker.address() as { port: number }).port;
  const opts = { host: '127.0.0.1', headersTimeoutMs: 1000, requestTimeoutMs: 1000 };
  const err = await listen(() => {}, { ...opts, port: busy }).then(
    () => undefined,
    (e: unknown) => e,
  );
  t.ok(err, 'the listen failed');
  const pub = compileConfig({ server: { port: busy, admin_port: 1 }, models: [model(['http://x/v1'])] }, {});
  t.match(
    listenErrorMessage(err, pub),
    new RegExp(`^cannot listen on 127\\.0\\.0\\.1:${busy}: the address is already in use.*Set PORT=<port>`),
  );
  const adm = compileConfig({ server: { port: 1, admin_port: busy }, models: [model(['http://x/v1'])] }, {});
  t.match(listenErrorMessage(err, adm), /Set ADMIN_PORT=<port>/);
  t.equal(listenErrorMessage(new Error('boom'), pub), undefined, 'other errors keep their stack');
});

t.test('keys naming models the config does not serve are warned about, on both stores', async (t) => {
  const { createMemoryStore } = await import('../../src/store/memory-store.ts');
  const { keyModelWarnings } = await import('../../src/obs/boot-report.ts');
  const { createKeyTable } = await import('../../src/auth/key-table.ts');
  const { startRedis } = await import('../helpers/redis.ts');
  const { openStore } = await import('../../src/main.ts');
  const { createLogger } = await import('../../src/obs/logger.ts');
  const config = compileConfig({ models: [model(['http://x/v1'])] }, {});
  const redis = await startRedis(t);
  const stores = [
    createMemoryStore(),
    ...(redis ? [await openStore({ ...config, store: { ...config.store, redisUrl: redis.url } }, {}, createLogger('silent'))] : []),
  ];
  for (const store of stores) {
    t.teardown(() => store.close());
    const keys = createKeyTable({ store, now: Date.now });
    t.same(await keyModelWarnings(config, store), [], `${store.kind}: none yet`);
    await keys.create({ account: 'a', env: 'live', name: 'ok', models: ['m'] });
    await keys.create({ account: 'a', env: 'live', name: 'all' });
    const stale = await keys.create({ account: 'a', env: 'live', name: 'stale', models: ['m', 'gone-model'] });
    const w = await keyModelWarnings(config, store);
    t.equal(w.length, 1, store.kind);
    t.match(w[0], new RegExp(`^1 key\\(s\\) name models this config does not serve \\("gone-model"\\): ${stale.record.id}`));
  }
});
