import t from 'tap';
import type { IncomingMessage } from 'node:http';
import { createAuthenticator, requireModel, requireScope, type AuthFailure } from '../../src/auth/authenticate.ts';
import { createFailedAuthLimiter } from '../../src/auth/failed-auth-limiter.ts';
import { createKeyCache } from '../../src/auth/key-cache.ts';
import { generateKey, hashKey } from '../../src/auth/keys.ts';
import { GatewayError } from '../../src/http/errors.ts';
import { createMemoryStore } from '../../src/store/memory-store.ts';
import type { KeyRecord } from '../../src/store/types.ts';
import { countingKeyReads, keyRecordOf } from '../store/harness.ts';

// A live key of acme with every scope (the store contract's test key record, otherwise).
const record = (over: Partial<KeyRecord> = {}): KeyRecord =>
  keyRecordOf('acme', 'key_1111111111111111', { env: 'live', scopes: ['chat', 'models', 'shares'], ...over });
const req = (authorization?: string, address = '10.0.0.1') =>
  ({ headers: authorization === undefined ? {} : { authorization }, socket: { remoteAddress: address } }) as unknown as IncomingMessage;

async function setup(perMinute = 30) {
  const { store, reads } = countingKeyReads();
  const failures: AuthFailure[] = [];
  const keys = createKeyCache({ store, ttlMs: 10_000, negativeTtlMs: 5_000, max: 100 });
  const auth = createAuthenticator({ keys, failed: createFailedAuthLimiter(perMinute), onFailure: (r) => failures.push(r) });
  const key = generateKey('live');
  await store.createKey(hashKey(key), record());
  return { auth, key, store, reads, failures };
}

async function code(p: Promise<unknown>): Promise<string | undefined> {
  try {
    await p;
    return undefined;
  } catch (e) {
    if (!(e instanceof GatewayError)) throw e;
    return e.code;
  }
}

t.test('each failure has its code and its metric reason', async (t) => {
  const s = await setup();
  t.equal((await s.auth.authenticate(req(`Bearer ${s.key}`))).id, 'key_1111111111111111');
  t.equal(await code(s.auth.authenticate(req())), 'missing_api_key');
  t.equal(await code(s.auth.authenticate(req('Basic abc'))), 'missing_api_key');
  t.equal(await code(s.auth.authenticate(req('Bearer nope'))), 'invalid_api_key');
  t.equal(await code(s.auth.authenticate(req(`Bearer ${generateKey('live')}`))), 'invalid_api_key');
  await s.store.updateKey('key_1111111111111111', { active: false });
  await s.store.publish({ kind: 'key', hash: hashKey(s.key), version: 2 });
  await new Promise((r) => setTimeout(r, 10));
  t.equal(await code(s.auth.authenticate(req(`Bearer ${s.key}`))), 'invalid_api_key');
  t.same(s.failures, ['missing', 'missing', 'malformed', 'unknown', 'disabled']);
});

t.test('malformed keys never reach the store', async (t) => {
  const s = await setup();
  for (const k of ['nope', `${s.key}x`, s.key.replace('svc-live-', 'svc-prod-')]) await code(s.auth.authenticate(req(`Bearer ${k}`)));
  t.equal(s.reads(), 0);
});

t.test('past the limit: malformed and known-bad keys refused without a lookup; a valid key is never refused', async (t) => {
  const s = await setup(3);
  const bad = generateKey('test');
  for (let i = 0; i < 3; i++)
    t.equal(await code(s.auth.authenticate(req(`Bearer ${i === 0 ? bad : generateKey('test')}`))), 'invalid_api_key');
  const before = s.reads();
  t.equal(await code(s.auth.authenticate(req('Bearer garbage'))), 'rate_limit_exceeded', 'malformed: 429');
  t.equal(await code(s.auth.authenticate(req())), 'rate_limit_exceeded', 'missing: 429');
  t.equal(await code(s.auth.authenticate(req(`Bearer ${bad}`))), 'rate_limit_exceeded', 'negatively cached unknown key: 429');
  t.equal(s.reads(), before, 'none of them reached the store');
  // The NAT case: a valid key this instance has never seen, from the same (throttled) address.
  t.equal((await s.auth.authenticate(req(`Bearer ${s.key}`))).id, 'key_1111111111111111', 'a fresh valid key passes');
  t.equal(s.reads(), before + 1, 'one lookup to learn it is valid');
  t.equal((await s.auth.authenticate(req(`Bearer ${s.key}`))).id, 'key_1111111111111111', 'and again, from the cache');
  t.equal(s.reads(), before + 1);
  t.equal(
    await code(s.auth.authenticate(req(`Bearer ${generateKey('test')}`))),
    'rate_limit_exceeded',
    'a fresh unknown key: looked up, then 429',
  );
  t.equal(await code(s.auth.authenticate(req(undefined, '10.0.0.2'))), 'missing_api_key', 'another address is not blocked');
  try {
    await s.auth.authenticate(req('Bearer x'));
  } catch (e) {
    const h = (e as GatewayError).headers!;
    t.match(h['retry-after'], /^\d+$/);
    t.ok(Number(h['retry-after']) >= 1 && Number(h['retry-after']) <= 60);
    t.match(h['retry-after-ms'], /^\d+$/);
  }
});

t.test('requireScope and requireModel', async (t) => {
  const k = record({ scopes: ['chat'], models: ['a'] });
  t.doesNotThrow(() => requireScope(k, 'chat'));
  t.throws(() => requireScope(k, 'models'), { code: 'permission_denied' });
  t.doesNotThrow(() => requireModel(k, 'a'));
  t.throws(() => requireModel(k, 'b'), { code: 'permission_denied', param: 'model' });
  t.doesNotThrow(() => requireModel(record(), 'anything'), 'empty allow-list = all models');
});

t.test('behind a trusted proxy the limiter counts the forwarded client, not the proxy', async (t) => {
  const { createClientAddress } = await import('../../src/http/client-address.ts');
  const keys = createKeyCache({ store: createMemoryStore(), ttlMs: 10_000, negativeTtlMs: 5_000, max: 100 });
  const auth = createAuthenticator({ keys, failed: createFailedAuthLimiter(2), clientAddress: createClientAddress(['10.0.0.0/8']) });
  const via = (client: string) =>
    ({ headers: { 'x-forwarded-for': client }, socket: { remoteAddress: '10.0.0.1' } }) as unknown as IncomingMessage;
  for (let i = 0; i < 2; i++) t.equal(await code(auth.authenticate(via('198.51.100.1'))), 'missing_api_key');
  t.equal(await code(auth.authenticate(via('198.51.100.1'))), 'rate_limit_exceeded', 'that client is throttled');
  t.equal(await code(auth.authenticate(via('198.51.100.2'))), 'missing_api_key', 'another client behind the same proxy is not');
});
