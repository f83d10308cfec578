/**
 * The in-process key table cache (SPEC §1.1): lru-cache in front of the store, misses coalesced
 * (one store read however many requests wait), unknown keys cached negatively, and invalidations from
 * any instance applied within a pub/sub hop. Entries carry the record's version: a record older than an
 * invalidation already seen is never cached, and a delete during a read discards that read (lru-cache
 * aborts the pending fetch), so a disabled key cannot come back from a racing request.
 * If an invalidation is lost, the TTL (≤ 10 s) bounds how long a stale record lives.
 */
import { LRUCache } from 'lru-cache';
import type { KeyRecord, Store } from '../store/types.ts';

interface Entry {
  record: KeyRecord | null;
}

export interface KeyCacheOptions {
  store: Store;
  ttlMs: number;
  negativeTtlMs: number;
  max: number;
  onLookup?: (outcome: 'hit' | 'miss') => void;
}

export interface KeyCache {
  /** The cached record (null = known unknown) without touching the store; undefined on a miss. Counts hit/miss. */
  peek(hash: string): KeyRecord | null | undefined;
  /** The record from cache or store (coalesced); null when the key does not exist. */
  lookup(hash: string): Promise<KeyRecord | null>;
  /** Drops the entry and remembers the version, so older reads are refused. */
  invalidate(hash: string, version: number): void;
  /**
   * True while `record` (one lookup() or peek() returned) is still its key's live entry: not invalidated,
   * replaced, evicted or past the TTL since. Touches no store and counts no hit or miss.
   */
  isCurrent(record: KeyRecord): boolean;
}

/** Reads racing an invalidation are retried this often before the lookup gives up with an error. */
const MAX_ATTEMPTS = 3;

/** Builds the key cache and subscribes it to the store's invalidations. */
export function createKeyCache(o: KeyCacheOptions): KeyCache {
  // An expired entry stays until its key is read again (and replaced) or evicted: when lru-cache deletes
  // the last entry on a stale get, it resets all of its `max`-slot arrays on the request path, once per
  // TTL when a gateway has one active key (bench/results/instructions-vs-bare.md). Still bounded by `max`.
  const stale = { noDeleteOnStaleGet: true } as const;
  // Each cached record's hash, for isCurrent(): set once per store read, not per request.
  const hashOf = new WeakMap<KeyRecord, string>();
  // Highest version announced per key; kept longer than the cache TTL so a late read of an old record is refused.
  const floors = new LRUCache<string, number>({ max: o.max, ttl: Math.max(60_000, o.ttlMs * 6), ...stale });
  const cache = new LRUCache<string, Entry>({
    max: o.max,
    ttl: o.ttlMs,
    ...stale,
    fetchMethod: async (hash, _stale, { options }) => {
      const record = await o.store.getKeyByHash(hash);
      const floor = floors.get(hash);
      if (record && floor !== undefined && record.version < floor) throw new Error('stale key record');
      if (!record) options.ttl = o.negativeTtlMs;
      else hashOf.set(record, hash);
      return { record };
    },
  });

  function invalidate(hash: string, version: number): void {
    const prev = floors.get(hash);
    if (prev === undefined || version > prev) floors.set(hash, version);
    cache.delete(hash);
  }
  o.store.onInvalidation((m) => {
    if (m.kind === 'key') invalidate(m.hash, m.version);
  });

  return {
    peek(hash) {
      const e = cache.get(hash);
      o.onLookup?.(e ? 'hit' : 'miss');
      return e === undefined ? undefined : e.record;
    },
    async lookup(hash) {
      const hit = cache.get(hash);
      if (hit) return hit.record;
      for (let attempt = 1; ; attempt++) {
        try {
          const e = await cache.fetch(hash);
          return e?.record ?? null;
        } catch (err) {
          // 'deleted' (an invalidation landed mid-read) and stale records are retried with a fresh read;
          // store failures propagate as store_unavailable.
          if (attempt >= MAX_ATTEMPTS || (err as { code?: string }).code === 'store_unavailable') throw err;
        }
      }
    },
    invalidate,
    isCurrent(record) {
      const hash = hashOf.get(record);
      return hash !== undefined && cache.get(hash)?.record === record;
    },
  };
}
