import t from 'tap';
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig, parseConfig } from '../../src/config/load.ts';
import { ConfigError } from '../../src/config/errors.ts';
import { compileConfig } from '../../src/config/schema.ts';
import type { Test } from 'tap';

const MODEL = `
  - name: m1
    price: { input: 0.1, output: 0.4 }
    upstreams:
      - { url: "http://127.0.0.1:8000/v1" }
`;
const VALID = `models:${MODEL}`;

/** The ConfigError parseConfig throws for this text; undefined (and a failed assertion) when it throws none. */
function configError(t: Test, text: string, env: NodeJS.ProcessEnv = {}): ConfigError | undefined {
  try {
    parseConfig(text, env);
  } catch (e) {
    if (e instanceof ConfigError) return e;
    t.fail(`expected a ConfigError, got ${String(e)}`);
    return undefined;
  }
  t.fail(`expected a ConfigError, config was accepted: ${JSON.stringify(text.slice(0, 60))} env ${JSON.stringify(env)}`);
  return undefined;
}

/** Asserts the error names the field path (both in .path and in the message the operator sees). */
function namesField(t: Test, text: string, path: string, env: NodeJS.ProcessEnv = {}, problem?: RegExp): void {
  const e = configError(t, text, env);
  if (!e) return;
  t.equal(e.path, path, `path of: ${e.message}`);
  t.ok(e.message.includes(path), `message names ${path}: ${e.message}`);
  if (problem) t.match(e.message, problem);
}

t.test('a minimal file compiles with SPEC defaults', async (t) => {
  const c = parseConfig(VALID, {});
  t.equal(c.server.port, 8080);
  t.equal(c.server.adminPort, 9090);
  t.equal(c.server.adminHost, '127.0.0.1', 'admin bound to loopback unless configured (SPEC §2)');
  t.equal(c.limits.maxBodyBytes, 4 * 1024 * 1024);
  t.equal(c.auth.failedPerMinute, 30);
  t.ok(c.auth.cacheTtlMs <= 10_000, 'key cache TTL ≤ 10 s (SPEC §1.1)');
  t.equal(c.store.redisUrl, undefined);
  t.equal(c.adminToken, undefined);
  t.equal(c.logLevel, 'info');
  t.equal(c.rateLimits.test.requestsPerMinute, 60);
  t.equal(c.rateLimits.test.tokensPerMinute, 100_000);
  t.equal(c.shares.urlTtlSeconds, 900);
  t.equal(c.models.length, 1);
  const m = c.models[0]!;
  t.equal(m.name, 'm1');
  t.equal(m.upstreamModel, 'm1', 'upstream_model defaults to the name');
  t.same(m.price, { inputScaled: 100_000n, outputScaled: 400_000n, cachedInputScaled: 100_000n });
  t.same(m.upstreams, [{ url: 'http://127.0.0.1:8000/v1', apiKey: undefined }]);
});

t.test('the compiled config is deeply frozen', async (t) => {
  const c = parseConfig(VALID, {});
  t.ok(Object.isFrozen(c));
  t.ok(Object.isFrozen(c.server));
  t.ok(Object.isFrozen(c.models));
  t.ok(Object.isFrozen(c.models[0]));
  t.ok(Object.isFrozen(c.models[0]!.upstreams[0]));
  t.ok(Object.isFrozen(c.models[0]!.price));
  t.ok(Object.isFrozen(c.shares.s3));
  t.throws(() => {
    (c.server as { port: number }).port = 1;
  }, TypeError);
  t.throws(() => {
    (c.models as unknown as unknown[]).push({});
  }, TypeError);
  t.equal(c.server.port, 8080);
});

t.test('invalid YAML names the file and the line', async (t) => {
  namesField(t, 'models: [\n  - name: x\n', '(file)', {}, /not valid YAML/);
  namesField(t, 'models:\n\t- name: x\n', '(file)', {}, /not valid YAML/);
  namesField(t, 'a: 1\na: 2\n', '(file)', {}, /not valid YAML/);
});

t.test('a document that is not a mapping is refused', async (t) => {
  namesField(t, '- 1\n- 2\n', '(root)');
  namesField(t, 'just a string\n', '(root)');
});

t.test('unknown fields are refused, at the top level and below', async (t) => {
  namesField(t, `${VALID}modles: []\n`, 'modles', {}, /unknown field/);
  namesField(t, `server: { prot: 1 }\n${VALID}`, 'server.prot', {}, /unknown field/);
  namesField(
    t,
    `models:\n  - name: m1\n    price: { input: 1, output: 1, cached: 1 }\n    upstreams: [{ url: "http://x" }]\n`,
    'models[0].price.cached',
  );
  namesField(
    t,
    `models:\n  - name: m1\n    price: { input: 1, output: 1 }\n    upstreams: [{ url: "http://x", key: "k" }]\n`,
    'models[0].upstreams[0].key',
  );
  namesField(t, `shares: { s3: { buckt: x } }\n${VALID}`, 'shares.s3.buckt');
});

t.test('models are required, each with a name, a price and upstreams', async (t) => {
  namesField(t, '', 'models', {}, /required/);
  namesField(t, 'server: { port: 8080 }\n', 'models', {}, /required/);
  namesField(t, 'models: 3\n', 'models', {}, /list/);
  namesField(t, 'models: [ "m1" ]\n', 'models[0]', {}, /mapping/);
  namesField(t, `models:\n  - price: { input: 1, output: 1 }\n    upstreams: [{ url: "http://x" }]\n`, 'models[0].name', {}, /required/);
  namesField(t, `models:\n  - name: ""\n    price: { input: 1, output: 1 }\n    upstreams: [{ url: "http://x" }]\n`, 'models[0].name');
  namesField(t, `models:\n  - name: m1\n    upstreams: [{ url: "http://x" }]\n`, 'models[0].price', {}, /required/);
  namesField(t, `models:\n  - name: m1\n    price: { input: 1, output: 1 }\n`, 'models[0].upstreams', {}, /required/);
  namesField(
    t,
    `models:\n  - name: m1\n    price: { input: 1, output: 1 }\n    upstreams: []\n`,
    'models[0].upstreams',
    {},
    /at least one/,
  );
  namesField(
    t,
    `models:${MODEL}  - name: m2\n    price: { input: 1, output: 1 }\n    upstreams: [ {} ]\n`,
    'models[1].upstreams[0].url',
    {},
    /required/,
  );
});

t.test('upstream URLs must be absolute http(s) URLs', async (t) => {
  const withUrl = (u: string) =>
    `models:\n  - name: m1\n    price: { input: 1, output: 1 }\n    upstreams:\n      - { url: "http://ok:1/v1" }\n      - { url: ${JSON.stringify(u)} }\n`;
  namesField(t, withUrl('not a url'), 'models[0].upstreams[1].url', {}, /not a URL/);
  namesField(t, withUrl('/v1'), 'models[0].upstreams[1].url');
  namesField(t, withUrl('ftp://host/v1'), 'models[0].upstreams[1].url', {}, /http/);
  const c = parseConfig(withUrl('https://api.example.com/v1/'), {});
  t.equal(c.models[0]!.upstreams[1]!.url, 'https://api.example.com/v1', 'a trailing slash is dropped');
});

t.test('prices: non-negative, at most 6 decimals, numbers or numeric strings', async (t) => {
  const withPrice = (p: string) => `models:\n  - name: m1\n    price: ${p}\n    upstreams: [{ url: "http://x" }]\n`;
  namesField(t, withPrice('{ input: -0.1, output: 1 }'), 'models[0].price.input');
  namesField(t, withPrice('{ input: 1, output: 0.0000001 }'), 'models[0].price.output');
  namesField(t, withPrice('{ input: "0.1234567", output: 1 }'), 'models[0].price.input');
  namesField(t, withPrice('{ input: cheap, output: 1 }'), 'models[0].price.input');
  namesField(t, withPrice('{ input: 1 }'), 'models[0].price.output');
  namesField(t, withPrice('3'), 'models[0].price', {}, /mapping/);
  t.same(parseConfig(withPrice('{ input: "0.25", output: 1.000001 }'), {}).models[0]!.price, {
    inputScaled: 250_000n,
    outputScaled: 1_000_001n,
    cachedInputScaled: 250_000n,
  });
  namesField(t, withPrice('{ input: 1, output: 1, cached_input: -1 }'), 'models[0].price.cached_input');
  t.same(parseConfig(withPrice('{ input: 1, output: 2, cached_input: "0.1" }'), {}).models[0]!.price, {
    inputScaled: 1_000_000n,
    outputScaled: 2_000_000n,
    cachedInputScaled: 100_000n,
  });
});

t.test('duplicate model names are refused at the second one', async (t) => {
  namesField(t, `models:${MODEL}${MODEL}`, 'models[1].name', {}, /duplicate/);
});

t.test('numbers: ports are integers in range, other fields typed', async (t) => {
  namesField(t, `server: { port: 80.5 }\n${VALID}`, 'server.port', {}, /integer/);
  namesField(t, `server: { port: 70000 }\n${VALID}`, 'server.port');
  namesField(t, `server: { admin_port: -1 }\n${VALID}`, 'server.admin_port');
  namesField(t, `server: { port: eighty }\n${VALID}`, 'server.port', {}, /number/);
  namesField(t, `limits: { max_body_bytes: 10 }\n${VALID}`, 'limits.max_body_bytes');
  namesField(t, `auth: { cache_ttl_ms: 60000 }\n${VALID}`, 'auth.cache_ttl_ms', {}, /10000/);
  namesField(t, `rate_limits: { test: { requests_per_minute: 0 } }\n${VALID}`, 'rate_limits.test.requests_per_minute');
  namesField(t, `shares: { s3: { force_path_style: maybe } }\n${VALID}`, 'shares.s3.force_path_style');
  namesField(
    t,
    `models:\n  - name: m1\n    max_output_tokens: 1.5\n    price: { input: 1, output: 1 }\n    upstreams: [{ url: "http://x" }]\n`,
    'models[0].max_output_tokens',
  );
});

t.test('models[].endpoints: default chat, responses, completions; an unknown or empty list is refused', async (t) => {
  t.same(parseConfig(VALID, {}).models[0]!.endpoints, ['chat', 'responses', 'completions']);
  const embed = `models:\n  - name: e1\n    endpoints: [embeddings]\n    price: { input: 0.02, output: 0 }\n    upstreams: [{ url: "http://x" }]\n`;
  t.same(parseConfig(embed, {}).models[0]!.endpoints, ['embeddings']);
  const bad = (list: string) =>
    `models:\n  - name: m1\n    endpoints: ${list}\n    price: { input: 1, output: 1 }\n    upstreams: [{ url: "http://x" }]\n`;
  namesField(t, bad('[chat, images]'), 'models[0].endpoints[1]', {}, /one of chat, responses, completions, embeddings/);
  namesField(t, bad('[]'), 'models[0].endpoints', {}, /at least one/);
  namesField(t, bad('chat'), 'models[0].endpoints');
});

t.test('log_level must be a level the logger knows (else the process dies later, in pino, without the field)', async (t) => {
  namesField(t, `log_level: verbose\n${VALID}`, 'log_level');
  const e = configError(t, VALID, { LOG_LEVEL: 'loud' });
  if (e) t.match(e.message, /LOG_LEVEL/);
  for (const level of ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']) {
    t.equal(parseConfig(`log_level: ${level}\n${VALID}`, {}).logLevel, level);
  }
});

t.test('${VAR} interpolation: set, unset with default, empty', async (t) => {
  const text = `models:\n  - name: m1\n    price: { input: 1, output: 1 }\n    upstreams:\n      - { url: "http://\${UP_HOST:-127.0.0.1}:\${UP_PORT:-8000}/v1", api_key: "\${UP_KEY}" }\n`;
  const a = parseConfig(text, { UP_KEY: 'secret' });
  t.same(a.models[0]!.upstreams[0], { url: 'http://127.0.0.1:8000/v1', apiKey: 'secret' });
  const b = parseConfig(text, { UP_HOST: 'gpu-1', UP_PORT: '9000', UP_KEY: 'k2' });
  t.equal(b.models[0]!.upstreams[0]!.url, 'http://gpu-1:9000/v1');
  const c = parseConfig(text, { UP_HOST: '', UP_KEY: '' });
  t.equal(c.models[0]!.upstreams[0]!.url, 'http://127.0.0.1:8000/v1', 'an empty variable takes the :- default (shell semantics)');
  t.equal(c.models[0]!.upstreams[0]!.apiKey, undefined, '${VAR} set to empty is allowed and means none');
  t.equal(parseConfig(`server: { port: "\${TG_PORT_X:-8181}" }\n${VALID}`, {}).server.port, 8181, 'numbers may come from variables');
  t.equal(parseConfig(`server: { port: "\${TG_PORT_X:-8181}" }\n${VALID}`, { TG_PORT_X: '8282' }).server.port, 8282);
});

t.test('an unset ${VAR} without a default names the field and the variable', async (t) => {
  const text = `models:\n  - name: m1\n    price: { input: 1, output: 1 }\n    upstreams:\n      - { url: "http://x/v1", api_key: "\${VLLM_KEY_NOT_SET}" }\n`;
  const e = configError(t, text, {});
  t.equal(e?.path, 'models[0].upstreams[0].api_key');
  t.match(e?.message, 'models[0].upstreams[0].api_key');
  t.match(e?.message, 'VLLM_KEY_NOT_SET');
  namesField(t, `server: { host: "\${NOPE}" }\n${VALID}`, 'server.host');
});

t.test("a variable's value is data, never YAML syntax", async (t) => {
  const c = parseConfig(`server: { host: "\${H}" }\n${VALID}`, { H: 'x\nadmin_port: 1\n' });
  t.equal(c.server.host, 'x\nadmin_port: 1\n');
  t.equal(c.server.adminPort, 9090);
});

t.test('environment overrides win over the file (SPEC §6)', async (t) => {
  const file = `server: { host: 10.0.0.1, port: 1000, admin_host: 10.0.0.2, admin_port: 2000 }\nstore: { redis_url: "redis://file:6379" }\nlog_level: warn\n${VALID}`;
  const plain = parseConfig(file, {});
  t.same(
    [plain.server.host, plain.server.port, plain.server.adminHost, plain.server.adminPort, plain.store.redisUrl, plain.logLevel],
    ['10.0.0.1', 1000, '10.0.0.2', 2000, 'redis://file:6379', 'warn'],
  );
  const env = {
    PORT: '3000',
    HOST: '0.0.0.0',
    ADMIN_PORT: '4000',
    ADMIN_HOST: '::1',
    REDIS_URL: 'redis://env:6380/2',
    LOG_LEVEL: 'debug',
    TOLLGATE_ADMIN_TOKEN: 'X3I8tSxa72IlJ3Qdrh/SttlULQmRGyBK',
  };
  const c = parseConfig(file, env);
  t.equal(c.server.port, 3000);
  t.equal(c.server.host, '0.0.0.0');
  t.equal(c.server.adminPort, 4000);
  t.equal(c.server.adminHost, '::1');
  t.equal(c.store.redisUrl, 'redis://env:6380/2');
  t.equal(c.logLevel, 'debug');
  t.equal(c.adminToken, 'X3I8tSxa72IlJ3Qdrh/SttlULQmRGyBK');
  t.equal(parseConfig(VALID, { PORT: '0' }).server.port, 0, 'port 0 (any free port) is allowed');
});

t.test('an empty host in the file is the default, as an empty HOST / ADMIN_HOST is: never every interface', async (t) => {
  // `admin_host: ${ADMIN_HOST:-}` with the variable unset: '' made listen() bind /admin/ on every address.
  const c = parseConfig(`server: { host: "", admin_host: "\${ADMIN_HOST:-}", metrics_host: "" }\n${VALID}`, {});
  t.equal(c.server.adminHost, '127.0.0.1');
  t.equal(c.server.metricsHost, '127.0.0.1');
  t.equal(c.server.host, '0.0.0.0');
  const env = parseConfig(`server: { admin_host: "" }\n${VALID}`, { ADMIN_HOST: '' });
  t.equal(env.server.adminHost, '127.0.0.1', 'file and environment both empty');
  t.equal(
    parseConfig(`server: { admin_host: 10.0.0.2, metrics_host: "" }\n${VALID}`, {}).server.metricsHost,
    '10.0.0.2',
    'metrics_host empty: the admin host',
  );
});

t.test('TOLLGATE_ADMIN_TOKEN: the whitespace around it is not part of it; whitespace inside stops the boot', async (t) => {
  const token = 'X3I8tSxa72IlJ3Qdrh/SttlULQmRGyBK';
  // A token file's newline: HTTP strips it from the header, so kept, the right token was refused forever.
  t.equal(parseConfig(VALID, { TOLLGATE_ADMIN_TOKEN: `${token}\n` }).adminToken, token);
  t.equal(parseConfig(VALID, { TOLLGATE_ADMIN_TOKEN: ` ${token}\r\n` }).adminToken, token);
  t.equal(parseConfig(VALID, { TOLLGATE_ADMIN_TOKEN: ' \n' }).adminToken, undefined, 'blank: the admin API is off, as when unset');
  const e = configError(t, VALID, { TOLLGATE_ADMIN_TOKEN: `${token.slice(0, 16)} ${token.slice(16)}` });
  t.equal(e?.path, 'TOLLGATE_ADMIN_TOKEN (environment)');
  t.match(e?.message, /contains whitespace/);
  t.notOk(e?.message.includes(token.slice(0, 16)), 'the token is not echoed');
});

t.test('two listeners on one port and overlapping addresses stop the boot, naming the field', async (t) => {
  namesField(t, `server: { port: 9000, admin_port: 9000 }\n${VALID}`, 'server.admin_port', {}, /is 9000, the port of server\.port/);
  namesField(t, VALID, 'ADMIN_PORT (environment)', { PORT: '7000', ADMIN_PORT: '7000' });
  namesField(t, `server: { metrics_port: 9090 }\n${VALID}`, 'server.metrics_port', {}, /the port of server\.admin_port/);
  // Distinct addresses may share a port; port 0 is a fresh port each time.
  t.equal(parseConfig(`server: { host: 10.0.0.1, port: 9000, admin_port: 9000 }\n${VALID}`, {}).server.adminPort, 9000);
  t.equal(parseConfig(VALID, { PORT: '0', ADMIN_PORT: '0' }).server.port, 0);
});

t.test('auth.cache_max is bounded: lru-cache reserves its slots at boot', async (t) => {
  namesField(t, `auth: { cache_max: 1000000000000 }\n${VALID}`, 'auth.cache_max', {}, /must be <= 10000000/);
  t.equal(parseConfig(`auth: { cache_max: 10000000 }\n${VALID}`, {}).auth.cacheMax, 10_000_000);
});

t.test('limits.max_keys_per_account and shares.max_files are bounded: the key list and the share body grow with them', async (t) => {
  namesField(t, `limits: { max_keys_per_account: 1000000000 }\n${VALID}`, 'limits.max_keys_per_account', {}, /must be <= 1000$/);
  namesField(t, `limits: { max_keys_per_account: 1001 }\n${VALID}`, 'limits.max_keys_per_account', {}, /must be <= 1000$/);
  t.equal(parseConfig(`limits: { max_keys_per_account: 1000 }\n${VALID}`, {}).limits.maxKeysPerAccount, 1000);
  namesField(t, `shares: { max_files: 1000000000 }\n${VALID}`, 'shares.max_files', {}, /must be <= 100$/);
  namesField(t, `shares: { max_files: 101 }\n${VALID}`, 'shares.max_files', {}, /must be <= 100$/);
  t.equal(parseConfig(`shares: { max_files: 100 }\n${VALID}`, {}).shares.maxFiles, 100);
});

t.test(
  'limits.max_keys_made_per_day: 1000 by default, 0 for no bound, at most 100,000 (each key made keeps usage cells 400 days)',
  async (t) => {
    t.equal(parseConfig(VALID, {}).limits.maxKeysMadePerDay, 1000);
    t.equal(parseConfig(`limits: { max_keys_made_per_day: 0 }\n${VALID}`, {}).limits.maxKeysMadePerDay, 0);
    t.equal(parseConfig(`limits: { max_keys_made_per_day: 100000 }\n${VALID}`, {}).limits.maxKeysMadePerDay, 100_000);
    namesField(t, `limits: { max_keys_made_per_day: 100001 }\n${VALID}`, 'limits.max_keys_made_per_day', {}, /must be <= 100000$/);
    namesField(t, `limits: { max_keys_made_per_day: -1 }\n${VALID}`, 'limits.max_keys_made_per_day', {}, /must be >= 0$/);
    namesField(t, `limits: { max_keys_made_per_day: 2.5 }\n${VALID}`, 'limits.max_keys_made_per_day');
    namesField(t, `limits: { max_keys_made_per_day: lots }\n${VALID}`, 'limits.max_keys_made_per_day');
  },
);

t.test('shares.max_per_account is bounded: the console lists shares from the whole per-account index', async (t) => {
  namesField(t, `shares: { max_per_account: 1000000000 }\n${VALID}`, 'shares.max_per_account', {}, /must be <= 100000$/);
  t.equal(parseConfig(`shares: { max_per_account: 100000 }\n${VALID}`, {}).shares.maxPerAccount, 100_000);
});

// The sweep takes an intent older than the grace with no record for a failed create: below a create's
// worst case it deleted the objects of creates still in flight and gave their quota back while their
// records landed (grace 0: 10 of 10 shares published with a 300 ms record write were never counted and
// lost their snapshot object). The floor: S3's 5 s + 6 × store.command_timeout_ms + 10 s.
t.test('shares.orphan_grace_seconds covers a create in flight: its floor follows store.command_timeout_ms', async (t) => {
  namesField(t, `shares: { orphan_grace_seconds: 0 }\n${VALID}`, 'shares.orphan_grace_seconds', {}, /must be >= 18:/);
  namesField(t, `shares: { orphan_grace_seconds: 17 }\n${VALID}`, 'shares.orphan_grace_seconds', {}, /must be >= 18:/);
  t.equal(
    parseConfig(`shares: { orphan_grace_seconds: 18 }\n${VALID}`, {}).shares.orphanGraceSeconds,
    18,
    'default command timeout (500 ms)',
  );
  const slow = `store: { command_timeout_ms: 3000 }\n`;
  namesField(t, `${slow}shares: { orphan_grace_seconds: 32 }\n${VALID}`, 'shares.orphan_grace_seconds', {}, /must be >= 33:/);
  t.equal(parseConfig(`${slow}shares: { orphan_grace_seconds: 33 }\n${VALID}`, {}).shares.orphanGraceSeconds, 33);
  t.equal(parseConfig(VALID, {}).shares.orphanGraceSeconds, 300, 'the default');
  t.equal(
    parseConfig(`store: { command_timeout_ms: 60000 }\n${VALID}`, {}).shares.orphanGraceSeconds,
    375,
    'the default is raised to the floor when the command timeout asks for more',
  );
});

t.test('a bad environment override names the variable', async (t) => {
  for (const [name, value] of [
    ['PORT', 'abc'],
    ['PORT', '80.5'],
    ['ADMIN_PORT', '99999'],
  ] as const) {
    const e = configError(t, VALID, { [name]: value });
    t.match(e?.message, name, `${name}=${value}: ${e?.message}`);
  }
});

t.test('the shipped config/tollgate.yaml loads with an empty environment', async (t) => {
  const { config, file } = await loadConfig({ TOLLGATE_CONFIG: 'config/tollgate.yaml' });
  t.equal(file, 'config/tollgate.yaml');
  t.ok(config.models.length >= 1);
  t.ok(Object.isFrozen(config));
});

t.test('loadConfig reads TOLLGATE_CONFIG, and a missing file is a ConfigError naming it', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'tollgate-config-'));
  const path = join(dir, 'tg.yaml');
  await writeFile(path, `server: { port: 1234 }\n${VALID}`);
  const { config } = await loadConfig({ TOLLGATE_CONFIG: path });
  t.equal(config.server.port, 1234);
  const missing = join(dir, 'nope.yaml');
  let err: unknown;
  try {
    await loadConfig({ TOLLGATE_CONFIG: missing });
  } catch (e) {
    err = e;
  }
  t.type(err, ConfigError);
  t.match((err as Error).message, missing);
});

t.test('TOLLGATE_ADMIN_TOKEN shorter than 32 characters stops the boot, without echoing it (SPEC §12)', async (t) => {
  const doc = { models: [{ name: 'm', price: { input: 1, output: 1 }, upstreams: [{ url: 'http://x/v1' }] }] };
  const short = 'short-secret-token-0123456789';
  const err = (() => {
    try {
      compileConfig(doc, { TOLLGATE_ADMIN_TOKEN: short });
    } catch (e) {
      return e as Error;
    }
  })();
  t.match(err?.message, /TOLLGATE_ADMIN_TOKEN \(environment\): must be at least 32 characters \(got 29\)/);
  t.notMatch(err?.message, short);
  const strong = 'X3I8tSxa72IlJ3Qdrh/SttlULQmRGyBK';
  t.equal(compileConfig(doc, { TOLLGATE_ADMIN_TOKEN: strong }).adminToken, strong);
  // Issue 27: the Kubernetes Secret's placeholder and 36 × `a` were accepted (only the length was checked).
  for (const weak of ['replace-with-openssl-rand-base64-32-output', 'a'.repeat(36)]) {
    t.throws(
      () => compileConfig(doc, { TOLLGATE_ADMIN_TOKEN: weak }),
      /TOLLGATE_ADMIN_TOKEN \(environment\): (looks like a placeholder|is too predictable)/,
    );
  }
  t.equal(compileConfig(doc, {}).adminToken, undefined, 'unset: the admin API is off, the boot goes on');
});

t.test('tenant-isolation limits (SPEC §13): defaults, the account limit following the per-key one, bad values named', async (t) => {
  const c = parseConfig(VALID, {});
  t.equal(c.limits.maxConcurrentPerAccount, 256);
  t.equal(c.limits.maxInflightBodyBytesPerKey, 8 * 1024 * 1024);
  t.equal(c.limits.maxJsonDepth, 64);
  t.equal(c.server.bodyTimeoutMs, 10_000);
  t.same(c.rateLimits.testAccount, { requestsPerMinute: 240, tokensPerMinute: 400_000 }, '4 × the per-key test limits');
  const scaled = parseConfig(`rate_limits: { test: { requests_per_minute: 5 } }\n${VALID}`, {});
  t.same(scaled.rateLimits.testAccount, { requestsPerMinute: 20, tokensPerMinute: 400_000 }, 'follows a configured per-key limit');
  const own = parseConfig(`rate_limits: { test_account: { requests_per_minute: 7 } }\n${VALID}`, {});
  t.same(own.rateLimits.testAccount, { requestsPerMinute: 7, tokensPerMinute: 400_000 }, 'one dimension set, the other defaulted');
  namesField(t, `limits: { max_json_depth: 1 }\n${VALID}`, 'limits.max_json_depth');
  namesField(t, `limits: { max_concurrent_per_account: 0 }\n${VALID}`, 'limits.max_concurrent_per_account');
  namesField(t, `limits: { max_inflight_body_bytes_per_key: 10 }\n${VALID}`, 'limits.max_inflight_body_bytes_per_key');
  namesField(t, `server: { body_timeout_ms: 5 }\n${VALID}`, 'server.body_timeout_ms');
  namesField(t, `rate_limits: { test_account: { tokens_per_minute: 0 } }\n${VALID}`, 'rate_limits.test_account.tokens_per_minute');
});

t.test('models[].context_window (SPEC §4) and upstream.max_eject_seconds (SPEC §14): defaults and validation', async (t) => {
  const model = { name: 'm', price: { input: 1, output: 1 }, upstreams: [{ url: 'http://x/v1' }] };
  const c = compileConfig({ models: [model, { ...model, name: 'n', context_window: 8192 }] }, {});
  t.equal(c.models[0]!.contextWindow, 131_072, 'default 131,072 tokens');
  t.equal(c.models[1]!.contextWindow, 8192);
  t.equal(c.upstream.maxEjectSeconds, 60, 'default 60 s');
  t.equal(compileConfig({ models: [model], upstream: { max_eject_seconds: 5 } }, {}).upstream.maxEjectSeconds, 5);
  for (const bad of [0, 1.5, -1, 'big']) {
    t.throws(
      () => compileConfig({ models: [{ ...model, context_window: bad }] }, {}),
      { path: 'models[0].context_window' } as unknown as Error,
      `context_window ${bad}`,
    );
  }
  t.throws(() => compileConfig({ models: [model], upstream: { max_eject_seconds: -1 } }, {}), {
    path: 'upstream.max_eject_seconds',
  } as unknown as Error);
});
