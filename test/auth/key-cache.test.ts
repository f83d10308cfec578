import t from 'tap';
import { setTimeout as sleep } from 'node:timers/promises';
import { createKeyCache } from '../../src/auth/key-cache.ts';
import { generateKey, hashKey } from '../../src/auth/keys.ts';
import { createMemoryStore } from '../../src/store/memory-store.ts';
import type { KeyRecord, Store } from '../../src/store/types.ts';
import { countingKeyReads as counting, keyRecordOf } from '../store/harness.ts';
import { largeFills } from '../helpers/array-fill.ts';
import { waitFor } from '../helpers/wait.ts';

/** A live key of acme with every scope (the store contract's test key record, otherwise). */
function record(over: Partial<KeyRecord> = {}): KeyRecord {
  return keyRecordOf('acme', 'key_1111111111111111', { env: 'live', scopes: ['chat', 'models', 'shares'], ...over });
}

function deferred(): { promise: Promise<void>; resolve: () => void } {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}

const opts = { ttlMs: 10_000, negativeTtlMs: 5_000, max: 1000 };

t.test('50 concurrent lookups of an uncached key make one store read', async (t) => {
  const c = counting();
  const hash = hashKey(generateKey('live'));
  await c.store.createKey(hash, record());
  const cache = createKeyCache({ store: c.store, ...opts });
  const results = await Promise.all(Array.from({ length: 50 }, () => cache.lookup(hash)));
  t.equal(c.reads(), 1);
  for (const r of results) t.equal(r?.id, 'key_1111111111111111');
  await cache.lookup(hash);
  t.equal(c.reads(), 1, 'later lookups are served from the cache');
  t.equal(cache.peek(hash)?.id, 'key_1111111111111111');
});

t.test('unknown keys are cached negatively (coalesced too) until the negative TTL', async (t) => {
  const c = counting();
  const cache = createKeyCache({ store: c.store, ttlMs: 10_000, negativeTtlMs: 150, max: 1000 });
  const hash = hashKey(generateKey('test'));
  t.equal(cache.peek(hash), undefined, 'a miss before the first lookup');
  const rs = await Promise.all(Array.from({ length: 20 }, () => cache.lookup(hash)));
  t.same(new Set(rs), new Set([null]));
  t.equal(c.reads(), 1);
  t.equal(cache.peek(hash), null, 'peek tells a known-unknown key (null) from a miss (undefined)');
  await cache.lookup(hash);
  t.equal(c.reads(), 1);
  await sleep(250);
  t.equal(cache.peek(hash), undefined, 'the negative entry expired');
  await cache.lookup(hash);
  t.equal(c.reads(), 2);
});

t.test('an expired entry is refreshed in place: the cache never resets its arrays on the request path', async (t) => {
  // lru-cache deletes an entry found stale by get() unless told not to, and deleting the last entry
  // fills every one of its max-slot arrays: once per TTL for a gateway with one key, on the request path
  // (bench/results/instructions-vs-bare.md).
  const c = counting();
  const max = 50_000;
  const cache = createKeyCache({ store: c.store, ttlMs: 100, negativeTtlMs: 100, max });
  const hash = hashKey(generateKey('live'));
  await c.store.createKey(hash, record());
  t.equal((await cache.lookup(hash))?.id, 'key_1111111111111111');
  await sleep(200);
  const resets = await largeFills(max, async () => {
    t.equal(cache.peek(hash), undefined, 'expired: a miss');
    t.equal((await cache.lookup(hash))?.id, 'key_1111111111111111', 'read again from the store');
  });
  t.equal(resets, 0, 'no max-sized array filled');
  t.equal(c.reads(), 2);
  t.equal(cache.peek(hash)?.id, 'key_1111111111111111', 'fresh again');
});

t.test('a key created after a negative lookup is found once the entry is invalidated', async (t) => {
  const c = counting();
  const cache = createKeyCache({ store: c.store, ...opts });
  const hash = hashKey(generateKey('live'));
  t.equal(await cache.lookup(hash), null);
  await c.store.createKey(hash, record());
  cache.invalidate(hash, 1);
  t.equal((await cache.lookup(hash))?.id, 'key_1111111111111111');
});

t.test('peek counts hits and misses; it never reads the store', async (t) => {
  const c = counting();
  const seen: string[] = [];
  const cache = createKeyCache({ store: c.store, ...opts, onLookup: (o) => seen.push(o) });
  const hash = hashKey(generateKey('live'));
  await c.store.createKey(hash, record());
  cache.peek(hash);
  await cache.lookup(hash);
  cache.peek(hash);
  t.same(seen, ['miss', 'hit']);
  t.equal(c.reads(), 1);
});

t.test('an invalidation from the store (pub/sub) drops the entry; the next lookup reads the new version', async (t) => {
  const c = counting();
  const cache = createKeyCache({ store: c.store, ...opts });
  const hash = hashKey(generateKey('live'));
  await c.store.createKey(hash, record());
  t.equal((await cache.lookup(hash))?.active, true);
  const r = await c.store.updateKey('key_1111111111111111', { active: false });
  await c.store.publish({ kind: 'key', hash, version: r!.record.version });
  // The embedded store delivers on a later tick, like pub/sub.
  await waitFor(() => cache.peek(hash) === undefined);
  t.equal(cache.peek(hash), undefined);
  const after = await cache.lookup(hash);
  t.equal(after?.active, false);
  t.equal(after?.version, 2);
});

t.test('an invalidation during an in-flight read never caches the old record', async (t) => {
  const c = counting();
  const cache = createKeyCache({ store: c.store, ...opts });
  const hash = hashKey(generateKey('live'));
  await c.store.createKey(hash, record());
  const gate = deferred();
  c.gate.wait = gate.promise;
  // The read has fetched version 1 (active) and is waiting at the gate...
  const pending = cache.lookup(hash);
  await waitFor(() => c.reads() === 1);
  t.equal(c.reads(), 1);
  // ...when the key is disabled and the invalidation arrives.
  const r = await c.store.updateKey('key_1111111111111111', { active: false });
  cache.invalidate(hash, r!.record.version);
  c.gate.wait = undefined;
  gate.resolve();
  let result: KeyRecord | null | undefined;
  try {
    result = await pending;
  } catch {
    result = undefined; // giving up is acceptable; returning the old record is not
  }
  t.not(result?.active, true, 'the racing request does not see the disabled key as active');
  t.not(cache.peek(hash)?.active, true, 'the old record is not in the cache');
  const again = await cache.lookup(hash);
  t.equal(again?.active, false);
  t.equal(again?.version, 2);
});

t.test('a stale record older than an invalidation already seen is refused', async (t) => {
  // A lagging replica (or a read that started before the write) answers version 1 after version 2 was announced.
  const hash = hashKey(generateKey('live'));
  let reads = 0;
  const inner = createMemoryStore();
  const store: Store = {
    ...inner,
    async getKeyByHash() {
      reads++;
      return record({ version: 1 });
    },
  };
  const cache = createKeyCache({ store, ...opts });
  cache.invalidate(hash, 2);
  let result: KeyRecord | null | undefined;
  let failed = false;
  try {
    result = await cache.lookup(hash);
  } catch {
    failed = true;
  }
  t.ok(failed || result === null, 'no stale active record is returned');
  t.equal(cache.peek(hash), undefined, 'nothing was cached');
  t.ok(reads >= 1 && reads <= 5, `bounded retries (${reads} reads)`);
});

t.test('store failures propagate and are not cached', async (t) => {
  const hash = hashKey(generateKey('live'));
  let fail = true;
  const inner = createMemoryStore();
  await inner.createKey(hash, record());
  const store: Store = {
    ...inner,
    async getKeyByHash(h) {
      if (fail) throw Object.assign(new Error('down'), { code: 'store_unavailable' });
      return inner.getKeyByHash(h);
    },
  };
  const cache = createKeyCache({ store, ...opts });
  await t.rejects(cache.lookup(hash), { code: 'store_unavailable' });
  t.equal(cache.peek(hash), undefined);
  fail = false;
  t.equal((await cache.lookup(hash))?.id, 'key_1111111111111111');
});

t.test('entries expire after the TTL, bounding staleness when an invalidation is lost', async (t) => {
  const c = counting();
  const cache = createKeyCache({ store: c.store, ttlMs: 100, negativeTtlMs: 100, max: 1000 });
  const hash = hashKey(generateKey('live'));
  await c.store.createKey(hash, record());
  await cache.lookup(hash);
  await c.store.updateKey('key_1111111111111111', { active: false }); // no publish: a lost invalidation
  t.equal(cache.peek(hash)?.active, true);
  await sleep(200);
  t.equal((await cache.lookup(hash))?.active, false);
  t.equal(c.reads(), 2);
});

t.test('isCurrent: a record stays current until an invalidation, the TTL or an eviction takes it out', async (t) => {
  const c = counting();
  const cache = createKeyCache({ store: c.store, ttlMs: 150, negativeTtlMs: 100, max: 2 });
  const hash = hashKey(generateKey('live'));
  await c.store.createKey(hash, record());
  const first = (await cache.lookup(hash))!;
  t.ok(cache.isCurrent(first), 'the record a lookup returned is current');
  const reads = c.reads();
  t.ok(cache.isCurrent(first), 'asking again reads nothing from the store');
  t.equal(c.reads(), reads);

  const changed = (await c.store.updateKey('key_1111111111111111', { name: 'renamed' }))!;
  cache.invalidate(hash, changed.record.version);
  t.notOk(cache.isCurrent(first), 'an invalidation ends it');
  const second = (await cache.lookup(hash))!;
  t.ok(cache.isCurrent(second));
  t.equal(second.name, 'renamed');
  t.notOk(cache.isCurrent(first), 'the record read again is another one');

  await sleep(250);
  t.notOk(cache.isCurrent(second), 'past the TTL it is not current, whether or not an invalidation came');
  const third = (await cache.lookup(hash))!;
  t.ok(cache.isCurrent(third));
  for (const id of ['key_2222222222222222', 'key_3333333333333333']) {
    const h = hashKey(generateKey('live'));
    await c.store.createKey(h, record({ id }));
    await cache.lookup(h);
  }
  t.notOk(cache.isCurrent(third), 'evicted (max 2): not current');
  t.notOk(cache.isCurrent(record()), 'a record the cache never returned is not current');
});
