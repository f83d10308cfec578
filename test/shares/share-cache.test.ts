import t from 'tap';
import { setTimeout as sleep } from 'node:timers/promises';
import { createShareCache, type ShareCache } from '../../src/shares/share-cache.ts';
import { createMemorySnapshotObjects, type SnapshotObjects } from '../../src/shares/snapshot-objects.ts';
import { createMemoryStore } from '../../src/store/memory-store.ts';
import { GatewayError } from '../../src/http/errors.ts';
import type { ShareRecord, Store } from '../../src/store/types.ts';
import { largeFills } from '../helpers/array-fill.ts';
import { waitFor } from '../helpers/wait.ts';

const SLUG = 'AbCdEfGhJkLmNpQrStUvWx';

function share(over: Partial<ShareRecord> = {}): ShareRecord {
  return {
    slug: SLUG,
    account: 'acme',
    created_at: '2026-11-22T10:00:00.000Z',
    bytes: 17,
    snapshot: '{"messages":[{}]}',
    files: [],
    revoked_at: null,
    ...over,
  };
}

/** Primes the cache the way a create does: the record and the text it published. */
function remember(cache: ShareCache, r: ShareRecord): void {
  cache.remember(r, r.snapshot!);
}

interface Counting {
  store: Store;
  /** Where the test store's putShare leaves the snapshot text (the record never holds it). */
  objects: SnapshotObjects;
  reads: () => number;
  /** When set, every getShare reads the store, then waits for this gate before answering. */
  gate: { wait: Promise<void> | undefined };
  fail: { next: boolean };
}

function counting(inner: Store = createMemoryStore()): Counting {
  let n = 0;
  const gate: Counting['gate'] = { wait: undefined };
  const fail = { next: false };
  const objects = createMemorySnapshotObjects();
  const store: Store = {
    ...inner,
    async putShare(r) {
      if (r.snapshot !== undefined) await objects.put(r.slug, r.snapshot);
      await inner.putShare(r);
    },
    async getShare(slug) {
      n++;
      if (fail.next) {
        fail.next = false;
        throw new GatewayError('store_unavailable', 'down');
      }
      const r = await inner.getShare(slug);
      if (gate.wait) await gate.wait;
      return r;
    },
  };
  return { store, objects, reads: () => n, gate, fail };
}

function deferred(): { promise: Promise<void>; resolve: () => void } {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}

const opts = { ttlMs: 10_000, negativeTtlMs: 5_000 };

t.test('50 concurrent lookups of an uncached share make one store read, later ones none', async (t) => {
  const c = counting();
  await c.store.putShare(share());
  const cache = createShareCache({ store: c.store, objects: c.objects, ...opts });
  t.equal(cache.peek(SLUG), undefined);
  const states = await Promise.all(Array.from({ length: 50 }, () => cache.lookup(SLUG)));
  t.equal(c.reads(), 1);
  for (const s of states)
    t.equal(
      s.status === 'live' && s.text,
      `{"slug":"${SLUG}","created_at":"2026-11-22T10:00:00.000Z","snapshot":{"messages":[{}]},"files":[]}`,
    );
  await cache.lookup(SLUG);
  t.equal(cache.peek(SLUG)?.status, 'live');
  t.equal(c.reads(), 1);
});

t.test('an expired share is refreshed in place: the cache never resets its arrays on the read path', async (t) => {
  // As the key cache (test/auth/key-cache.test.ts): lru-cache deleting its last, stale entry would fill
  // every one of its max-slot arrays during a public read.
  const c = counting();
  const max = 50_000;
  await c.store.putShare(share());
  const cache = createShareCache({ store: c.store, objects: c.objects, ttlMs: 100, negativeTtlMs: 100, max });
  t.equal((await cache.lookup(SLUG)).status, 'live');
  await sleep(200);
  const resets = await largeFills(max, async () => {
    t.equal(cache.peek(SLUG), undefined, 'expired: a miss');
    t.equal((await cache.lookup(SLUG)).status, 'live', 'read again from the store');
  });
  t.equal(resets, 0, 'no max-sized array filled');
  t.equal(c.reads(), 2);
  t.equal(cache.peek(SLUG)?.status, 'live', 'fresh again');
});

t.test('unknown slugs are cached negatively, coalesced, until the negative TTL', async (t) => {
  const c = counting();
  const cache = createShareCache({ store: c.store, objects: c.objects, ttlMs: 10_000, negativeTtlMs: 50 });
  const states = await Promise.all(Array.from({ length: 20 }, () => cache.lookup(SLUG)));
  t.same(new Set(states.map((s) => s.status)), new Set(['unknown']));
  t.equal(c.reads(), 1);
  t.equal(cache.peek(SLUG)?.status, 'unknown');
  await c.store.putShare(share());
  await sleep(80);
  t.equal(cache.peek(SLUG), undefined, 'the negative entry expired');
  t.equal((await cache.lookup(SLUG)).status, 'live');
  t.equal(c.reads(), 2);
});

t.test('a flood of unknown slugs evicts only unknown slugs, never a live share', async (t) => {
  // Before the fix unknown slugs shared the one LRU with the bodies: a keyless prober reading 100,000
  // random slugs (7 s over loopback) pushed every live share out; here the bound is 50 to keep it short.
  const c = counting();
  const cache = createShareCache({ store: c.store, objects: c.objects, ...opts, max: 50, maxUnknown: 100 });
  remember(cache, share());
  const A = '123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz';
  const probe = (i: number) => `${'Z'.repeat(20)}${A[Math.floor(i / 58)]}${A[i % 58]}`;
  const seen = new Set<string>();
  for (let i = 0; i < 1_000; i++) seen.add((await cache.lookup(probe(i))).status);
  t.strictSame([...seen], ['unknown']);
  t.equal(c.reads(), 1_000, 'one store read per unknown slug');
  t.equal(cache.peek(SLUG)?.status, 'live', 'the live share is still cached');
  t.equal((await cache.lookup(SLUG)).status, 'live');
  t.equal(c.reads(), 1_000, 'and served without a store read');
  t.equal(cache.peek(probe(999))?.status, 'unknown', 'recent unknown slugs are remembered');
  t.equal(cache.peek(probe(0)), undefined, 'older ones past maxUnknown are forgotten (bounded)');
});

t.test('peek counts hits and misses', async (t) => {
  const c = counting();
  const seen: string[] = [];
  const cache = createShareCache({ store: c.store, objects: c.objects, ...opts, onLookup: (o) => seen.push(o) });
  cache.peek(SLUG);
  remember(cache, share());
  cache.peek(SLUG);
  t.same(seen, ['miss', 'hit']);
  t.equal(c.reads(), 0, 'remember primes the cache without a read');
});

t.test('a revocation message replaces a cached live share at once', async (t) => {
  const c = counting();
  await c.store.putShare(share());
  const cache = createShareCache({ store: c.store, objects: c.objects, ...opts });
  t.equal((await cache.lookup(SLUG)).status, 'live');
  await c.store.publish({ kind: 'share', slug: SLUG });
  await waitFor(() => cache.peek(SLUG)?.status === 'revoked');
  t.equal(cache.peek(SLUG)?.status, 'revoked', 'without a store read: the store still says live here');
  t.equal(c.reads(), 1);
});

t.test('a read in flight when the revocation lands never caches the old record', async (t) => {
  const c = counting();
  await c.store.putShare(share());
  const cache = createShareCache({ store: c.store, objects: c.objects, ...opts });
  const gate = deferred();
  c.gate.wait = gate.promise;
  const pending = cache.lookup(SLUG); // has read "live" from the store, waits at the gate
  await waitFor(() => c.reads() === 1);
  cache.revoke(SLUG);
  gate.resolve();
  t.equal((await pending).status, 'revoked', 'the racing reader sees the revocation');
  t.equal(cache.peek(SLUG)?.status, 'revoked');
  for (let i = 0; i < 5; i++) t.equal((await cache.lookup(SLUG)).status, 'revoked');
});

t.test('the floor wins over a late store read even after the revoked entry is gone', async (t) => {
  const c = counting();
  await c.store.putShare(share()); // the store (e.g. a lagging replica) still says live
  const cache = createShareCache({ store: c.store, objects: c.objects, ttlMs: 30, negativeTtlMs: 30 });
  cache.revoke(SLUG);
  await sleep(50); // the revoked entry expired
  t.equal(cache.peek(SLUG), undefined);
  t.equal((await cache.lookup(SLUG)).status, 'revoked');
  remember(cache, share());
  t.equal(cache.peek(SLUG)?.status, 'revoked', 'remember never resurrects a revoked slug');
});

t.test('a record revoked in the store reads as revoked', async (t) => {
  const c = counting();
  await c.store.putShare(share({ revoked_at: '2026-11-22T10:00:01.000Z' }));
  const cache = createShareCache({ store: c.store, objects: c.objects, ...opts });
  t.equal((await cache.lookup(SLUG)).status, 'revoked');
  remember(cache, share({ revoked_at: '2026-11-22T10:00:01.000Z', slug: 'x'.repeat(22) }));
  t.equal(cache.peek('x'.repeat(22)), undefined, 'a revoked record is not primed as live');
});

t.test('store failures propagate and are not cached', async (t) => {
  const c = counting();
  await c.store.putShare(share());
  const cache = createShareCache({ store: c.store, objects: c.objects, ...opts });
  c.fail.next = true;
  await t.rejects(cache.lookup(SLUG), { code: 'store_unavailable' });
  t.equal(cache.peek(SLUG), undefined);
  t.equal((await cache.lookup(SLUG)).status, 'live');
});

t.test('live entries expire after the TTL, bounding staleness when a message is lost', async (t) => {
  const c = counting();
  await c.store.putShare(share());
  const cache = createShareCache({ store: c.store, objects: c.objects, ttlMs: 40, negativeTtlMs: 40 });
  await cache.lookup(SLUG);
  await c.store.revokeShare(SLUG, '2026-11-22T10:00:01.000Z'); // no publish: the message is "lost"
  t.equal(cache.peek(SLUG)?.status, 'live');
  await sleep(60);
  t.equal((await cache.lookup(SLUG)).status, 'revoked');
});

t.test('snapshot bytes are bounded: big records evict older ones', async (t) => {
  const c = counting();
  const cache = createShareCache({ store: c.store, objects: c.objects, ...opts, maxBytes: 100_000 });
  const big = '{"messages":[{"content":"' + 'x'.repeat(30_000) + '"}]}';
  const slugs = ['1', '2', '3', '4'].map((d) => d.repeat(22));
  for (const slug of slugs) remember(cache, share({ slug, snapshot: big }));
  t.equal(cache.peek(slugs[0]!), undefined, 'the oldest was evicted');
  t.equal(cache.peek(slugs[3]!)?.status, 'live');
  remember(cache, share({ slug: '5'.repeat(22), snapshot: 'x'.repeat(60_000) }));
  t.equal(cache.peek('5'.repeat(22)), undefined, 'larger than the whole cache: not cached');
});

t.test('a record whose object is missing is reported and answered missing, briefly cached, never live', async (t) => {
  const c = counting();
  const { snapshot: _text, ...record } = share();
  await c.store.putShare(record); // a record without its object
  const seen: string[] = [];
  const cache = createShareCache({
    store: c.store,
    objects: c.objects,
    ttlMs: 10_000,
    negativeTtlMs: 40,
    onMissing: (_s, r) => seen.push(r),
  });
  const states = await Promise.all(Array.from({ length: 10 }, () => cache.lookup(SLUG)));
  t.same(new Set(states.map((s) => s.status)), new Set(['missing']));
  t.same(seen, ['missing'], 'reported once for the coalesced reads');
  await c.objects.put(SLUG, '{"messages":[{}]}');
  await sleep(60);
  t.equal((await cache.lookup(SLUG)).status, 'live', 'the missing answer is cached only for the negative TTL');
});
