/**
 * The in-process cache of share records (SPEC §1.4): lru-cache in front of the snapshot store, misses
 * coalesced (one store read however many readers wait), unknown slugs cached negatively so a page
 * hammering a dead link does not reach Redis on every request, and revocations from any instance
 * applied within a pub/sub hop. If a message is lost, the TTL (default 10 s) bounds the staleness.
 *
 * A revoked share never comes back from this cache: a revocation *replaces* the entry with a revoked
 * marker (it is not just dropped), which makes lru-cache abort a store read in flight for that slug,
 * and the slug is remembered in a floor set, so a read that started before the revocation and returns
 * the old record afterwards is turned into "revoked" rather than cached as live.
 */
import { LRUCache } from 'lru-cache';
import type { ShareRecord, Store } from '../store/types.ts';

/** What the cache knows about a slug. */
export type ShareState =
  { readonly status: 'live'; readonly record: ShareRecord } | { readonly status: 'revoked' } | { readonly status: 'unknown' };

export interface ShareCacheOptions {
  store: Store;
  ttlMs: number;
  negativeTtlMs: number;
  /** Bound on cached snapshot text (UTF-16 code units × 2 plus overhead); default 64 MiB. */
  maxBytes?: number;
  /** Bound on entries, negative ones included; default 100,000. */
  max?: number;
  onLookup?: (outcome: 'hit' | 'miss') => void;
}

export interface ShareCache {
  /** The cached state without touching the store; undefined on a miss. Counts hit/miss. */
  peek(slug: string): ShareState | undefined;
  /** The state from cache or store (coalesced). Store failures propagate (503 store_unavailable). */
  lookup(slug: string): Promise<ShareState>;
  /** Caches a share this instance just wrote, so its first reads need no store round trip. */
  remember(record: ShareRecord): void;
  /** Marks the slug revoked here, for good; called for every `{kind:'share'}` invalidation. */
  revoke(slug: string): void;
}

const UNKNOWN: ShareState = Object.freeze({ status: 'unknown' });
const REVOKED: ShareState = Object.freeze({ status: 'revoked' });
/** 64 MiB holds ~64 maximal (1 MiB) snapshots or thousands of typical ones. */
const DEFAULT_MAX_BYTES = 64 * 1024 * 1024;
/** ~100 B per negative entry: a flood of random slugs costs at most ~10 MB before LRU eviction. */
const DEFAULT_MAX_ENTRIES = 100_000;
/** Revocations remembered for the floor check; far more than can be in flight at once. */
const REVOKED_FLOOR_MAX = 100_000;
/** Reads racing a revocation (lru-cache rejects them with 'replaced'/'deleted') are retried this often. */
const MAX_ATTEMPTS = 3;
const ENTRY_OVERHEAD = 256;

function sizeOf(state: ShareState): number {
  if (state.status !== 'live') return 64;
  const r = state.record;
  let files = 0;
  for (const f of r.files) files += 2 * (f.name.length + f.content_type.length) + 64;
  return ENTRY_OVERHEAD + 2 * (r.snapshot.length + r.slug.length + r.account.length + r.created_at.length) + files;
}

/** Builds the share cache and subscribes it to the store's invalidations. */
export function createShareCache(o: ShareCacheOptions): ShareCache {
  const revokedFloor = new LRUCache<string, true>({ max: REVOKED_FLOOR_MAX });
  const maxBytes = o.maxBytes ?? DEFAULT_MAX_BYTES;
  const cache = new LRUCache<string, ShareState>({
    max: o.max ?? DEFAULT_MAX_ENTRIES,
    maxSize: maxBytes,
    sizeCalculation: sizeOf,
    ttl: o.ttlMs,
    fetchMethod: async (slug, _stale, { options }) => {
      const record = await o.store.getShare(slug);
      if (!record) {
        options.ttl = o.negativeTtlMs;
        return UNKNOWN;
      }
      // A revocation seen while this read was in flight wins over what the read returned.
      if (record.revoked_at !== null || revokedFloor.has(slug)) return REVOKED;
      return { status: 'live', record };
    },
  });

  function revoke(slug: string): void {
    revokedFloor.set(slug, true);
    cache.set(slug, REVOKED);
  }
  o.store.onInvalidation((m) => {
    if (m.kind === 'share') revoke(m.slug);
  });

  return {
    peek(slug) {
      const s = cache.get(slug);
      o.onLookup?.(s ? 'hit' : 'miss');
      return s;
    },
    async lookup(slug) {
      const hit = cache.get(slug);
      if (hit) return hit;
      for (let attempt = 1; ; attempt++) {
        try {
          return (await cache.fetch(slug)) ?? UNKNOWN;
        } catch (err) {
          // An abort ('replaced' by a revocation, 'deleted', 'evicted'): the cache now holds the newer
          // state, or a fresh read gets it. Store failures propagate as store_unavailable.
          if (attempt >= MAX_ATTEMPTS || (err as { code?: string }).code === 'store_unavailable') throw err;
          const now = cache.get(slug);
          if (now) return now;
        }
      }
    },
    remember(record) {
      if (record.revoked_at !== null || revokedFloor.has(record.slug)) return;
      cache.set(record.slug, { status: 'live', record });
    },
    revoke,
  };
}
