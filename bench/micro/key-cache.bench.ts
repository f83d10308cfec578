/**
 * Cost of authenticating a request whose key is cached (every request after the first): the key
 * cache's peek alone, the SHA-256 of the presented key it needs, and the whole authenticate() (Bearer
 * regex, key shape check, hash, peek). Run: `node bench/micro/key-cache.bench.ts`.
 */
import type { IncomingMessage } from 'node:http';
import { createKeyCache } from '../../src/auth/key-cache.ts';
import { createAuthenticator } from '../../src/auth/authenticate.ts';
import { createFailedAuthLimiter } from '../../src/auth/failed-auth-limiter.ts';
import { generateKey, hashKey, isWellFormedKey } from '../../src/auth/keys.ts';
import { createMemoryStore } from '../../src/store/memory-store.ts';
import type { KeyRecord } from '../../src/store/types.ts';
import { createReport, nsPerOp } from './timing.ts';

const store = createMemoryStore();
const key = generateKey('live');
const hash = hashKey(key);
const record: KeyRecord = {
  id: 'key_bench000000000000',
  account: 'bench',
  env: 'live',
  name: 'bench',
  active: true,
  scopes: ['chat', 'models', 'shares'],
  models: [],
  rate_limits: null,
  created_at: new Date().toISOString(),
  last4: key.slice(-4),
  version: 1,
};
await store.createKey(hash, record);
let hits = 0;
// The gateway counts hit/miss with a pre-bound prom-client child; a closure increment stands in.
const keys = createKeyCache({ store, ttlMs: 10_000, negativeTtlMs: 5_000, max: 100_000, onLookup: () => void hits++ });
// 10,000 other cached keys so the LRU is not a one-entry toy.
for (let i = 0; i < 10_000; i++) {
  const other = generateKey('test');
  await store.createKey(hashKey(other), { ...record, id: `key_${i}` });
  await keys.lookup(hashKey(other));
}
await keys.lookup(hash);
if (keys.peek(hash)?.id !== record.id) throw new Error('bench key not cached');

const auth = createAuthenticator({ keys, failed: createFailedAuthLimiter(30) });
const req = { headers: { authorization: `Bearer ${key}` }, socket: { remoteAddress: '127.0.0.1' } } as unknown as IncomingMessage;

const report = createReport();
report.add(
  'keyCache.peek (hit)',
  nsPerOp(() => keys.peek(hash), 1_000_000),
  'ns/op',
);
report.add(
  'isWellFormedKey (regex)',
  nsPerOp(() => isWellFormedKey(key), 1_000_000),
  'ns/op',
);
report.add(
  'hashKey (SHA-256 hex of the key)',
  nsPerOp(() => hashKey(key), 200_000),
  'ns/op',
);
report.add(
  'authenticate() on a cache hit',
  nsPerOp(() => auth.authenticate(req), 200_000),
  'ns/op',
  'regex + shape + hash + peek + promise',
);
report.print();
