// SPEC §15: a key past its expires_at is refused at that instant against the injected clock, from the
// cache as well as from a store read, with no invalidation; disabled still wins in the message.
import t from 'tap';
import type { IncomingMessage } from 'node:http';
import { createAuthenticator, type AuthFailure } from '../../src/auth/authenticate.ts';
import { createFailedAuthLimiter } from '../../src/auth/failed-auth-limiter.ts';
import { createKeyCache } from '../../src/auth/key-cache.ts';
import { generateKey, hashKey } from '../../src/auth/keys.ts';
import { GatewayError } from '../../src/http/errors.ts';
import { createMemoryStore } from '../../src/store/memory-store.ts';
import type { KeyRecord } from '../../src/store/types.ts';
import { keyRecordOf } from '../store/harness.ts';

const EXPIRES = Date.parse('2026-11-25T12:00:00.000Z');
// A live chat key of acme expiring at EXPIRES (the store contract's test key record, otherwise).
const record = (over: Partial<KeyRecord> = {}): KeyRecord =>
  keyRecordOf('acme', 'key_1111111111111111', { env: 'live', expires_at: new Date(EXPIRES).toISOString(), ...over });
const req = (key: string) =>
  ({ headers: { authorization: `Bearer ${key}` }, socket: { remoteAddress: '10.0.0.1' } }) as unknown as IncomingMessage;

async function refusal(p: Promise<unknown>): Promise<GatewayError | undefined> {
  try {
    await p;
    return undefined;
  } catch (e) {
    if (!(e instanceof GatewayError)) throw e;
    return e;
  }
}

t.test('refused from the expiry instant on, cached or not, with an "expired" message', async (t) => {
  let now = EXPIRES - 1;
  const store = createMemoryStore();
  const failures: AuthFailure[] = [];
  const keys = createKeyCache({ store, ttlMs: 10_000, negativeTtlMs: 5_000, max: 100 });
  const auth = createAuthenticator({ keys, failed: createFailedAuthLimiter(1000), onFailure: (r) => failures.push(r), now: () => now });
  const key = generateKey('live');
  await store.createKey(hashKey(key), record());
  t.equal((await auth.authenticate(req(key))).id, 'key_1111111111111111', 'a millisecond before: served (and now cached)');
  now = EXPIRES;
  const e = await refusal(auth.authenticate(req(key)));
  t.equal(e?.code, 'invalid_api_key', 'at expires_at: refused from the cached record');
  t.match(e?.message, /expired/);
  t.same(failures, ['expired'], 'counted as its own failure reason');

  // A fresh instance (empty cache): the store read is refused the same way.
  const other = createAuthenticator({
    keys: createKeyCache({ store, ttlMs: 10_000, negativeTtlMs: 5_000, max: 100 }),
    failed: createFailedAuthLimiter(1000),
    now: () => now,
  });
  t.equal((await refusal(other.authenticate(req(key))))?.code, 'invalid_api_key');

  // Moving the expiry later (a PATCH) serves it again once the record is re-read.
  await store.updateKey('key_1111111111111111', { expires_at: null });
  keys.invalidate(hashKey(key), 2);
  t.equal((await auth.authenticate(req(key))).id, 'key_1111111111111111');
});

t.test('a disabled key that has also expired says disabled', async (t) => {
  const store = createMemoryStore();
  const auth = createAuthenticator({
    keys: createKeyCache({ store, ttlMs: 10_000, negativeTtlMs: 5_000, max: 100 }),
    failed: createFailedAuthLimiter(1000),
    now: () => EXPIRES + 1000,
  });
  const key = generateKey('live');
  await store.createKey(hashKey(key), record({ active: false }));
  t.match((await refusal(auth.authenticate(req(key))))?.message, /disabled/);
});
