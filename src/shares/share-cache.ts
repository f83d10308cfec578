/**
 * The in-process cache of ready share bodies (SPEC §1.4): lru-cache in front of the record store and
 * the snapshot objects. A miss reads the record (Redis) and then the snapshot and, for a share with
 * files, its file list (S3, both at once; or the record itself for a share not migrated yet), coalesced
 * per slug (one read however many readers wait), and keeps the response body ready: the whole body for a
 * share without files, the text up to `"files":` otherwise, with the file list (file links are signed per
 * read, file-urls.ts), so a hit makes no store call. Unknown slugs are cached negatively so a page
 * hammering a dead link does not reach Redis on every request, and revocations from any instance are
 * applied within a pub/sub hop. If a message is lost, the TTL (default 10 s) bounds the staleness.
 * Unknown slugs have an LRU of their own: a prober reading random slugs (no key needed) evicts only
 * other unknown slugs, never a live share's body.
 *
 * A revoked share never comes back from this cache: a revocation *replaces* the entry with a revoked
 * marker (it is not just dropped), which makes lru-cache abort a store read in flight for that slug,
 * and the slug is remembered in a floor set, so a read that started before the revocation and returns
 * the old record afterwards is turned into "revoked" rather than cached as live.
 */
import { LRUCache } from 'lru-cache';
import type { ShareFile, ShareRecord, Store } from '../store/types.ts';
import { GatewayError } from '../http/errors.ts';
import { SnapshotMissing, type SnapshotObjects } from './snapshot-objects.ts';
import { createObjectReadGate } from './object-read-gate.ts';

/**
 * A live share ready to send: `text` is the whole 200 body when the share has no files, else the body
 * up to and including `"files":` (the caller appends the signed links and `}`).
 */
export interface LiveShare {
  readonly status: 'live';
  readonly record: ShareRecord;
  readonly text: string;
  /** The share's files (from the record, or its file list object), in order. */
  readonly files: readonly ShareFile[];
}

/** What the cache knows about a slug; `missing`: the record exists but its snapshot object does not (or is corrupt). */
export type ShareState = LiveShare | { readonly status: 'revoked' } | { readonly status: 'unknown' } | { readonly status: 'missing' };

/** The read body up to `"files":`, with the snapshot text spliced in as published. */
function bodyHead(r: ShareRecord, snapshot: string): string {
  return `{"slug":${JSON.stringify(r.slug)},"created_at":${JSON.stringify(r.created_at)},"snapshot":${snapshot},"files":`;
}

/**
 * A live state from a record without its snapshot text, that text, and the share's files (`files`, or the
 * record's own list when it holds one).
 */
export function liveShare(record: ShareRecord, snapshot: string, files: readonly ShareFile[] = record.files ?? []): LiveShare {
  const { snapshot: _inline, ...r } = record;
  const head = bodyHead(r, snapshot);
  return { status: 'live', record: r, text: files.length === 0 ? head + '[]}' : head, files };
}

export interface ShareCacheOptions {
  store: Store;
  /** Where snapshots are; undefined when none is configured (only not-yet-migrated records are readable). */
  objects: SnapshotObjects | undefined;
  /** A record whose snapshot object is missing or corrupt: reported (log, metric), answered 503. */
  onMissing?: (slug: string, reason: 'missing' | 'checksum' | 'unconfigured') => void;
  ttlMs: number;
  negativeTtlMs: number;
  /** Bound on cached snapshot text (UTF-16 code units × 2 plus overhead); default 64 MiB. */
  maxBytes?: number;
  /** Bound on entries of known slugs (live, revoked, missing); default 100,000. */
  max?: number;
  /** Bound on remembered unknown slugs, kept apart so they cannot evict live shares; default 100,000. */
  maxUnknown?: number;
  onLookup?: (outcome: 'hit' | 'miss') => void;
  /**
   * Bound on one owning account's snapshot bytes over SMALL_SNAPSHOT_BYTES being read from the object store
   * at once (misses past it wait their turn, object-read-gate.ts); default 2 MiB.
   */
  objectReadBytesPerAccount?: number;
  /** The same bound for the account's small snapshots (≤ SMALL_SNAPSHOT_BYTES), a lane of their own; default 512 KiB. */
  smallObjectReadBytesPerAccount?: number;
}

export interface ShareCache {
  /** The cached state without touching the store; undefined on a miss. Counts hit/miss. */
  peek(slug: string): ShareState | undefined;
  /** The state from cache or store (coalesced). Store failures propagate (503 store_unavailable). */
  lookup(slug: string): Promise<ShareState>;
  /** Caches a share this instance just wrote, so its first reads need no store round trip. */
  remember(record: ShareRecord, snapshot: string): void;
  /**
   * Marks the slug revoked here, for good; called for every `{kind:'share'}` invalidation. Returns the
   * files of the live entry it replaced, if there was one (their cached links can be forgotten).
   */
  revoke(slug: string): readonly ShareFile[] | undefined;
}

const UNKNOWN: ShareState = Object.freeze({ status: 'unknown' });
const REVOKED: ShareState = Object.freeze({ status: 'revoked' });
const MISSING: ShareState = Object.freeze({ status: 'missing' });
/** 64 MiB holds ~64 maximal (1 MiB) snapshots or thousands of typical ones. */
const DEFAULT_MAX_BYTES = 64 * 1024 * 1024;
const DEFAULT_MAX_ENTRIES = 100_000;
/** ~100 B per unknown slug: a flood of random slugs costs at most ~10 MB before LRU eviction. */
const DEFAULT_MAX_UNKNOWN = 100_000;
/**
 * 2 MiB: two maximal (1 MiB) snapshots of one account read at once, dozens of typical ones. Without a
 * bound, one account reading its big shares round-robin (every read a miss) kept dozens of misses in
 * flight and each turn of the loop worked through all of them; measured before and after in
 * bench/results/share-miss-flood.md.
 */
const DEFAULT_OBJECT_READ_BYTES_PER_ACCOUNT = 2 * 1024 * 1024;
/**
 * Snapshots up to this size are read in a lane of their own, so they never queue behind the account's big
 * ones. Reads need no key: anyone who knows an account's public 1 MB slugs could flood them, and every
 * uncached read of that account's other shares, small ones too, waited in the one queue behind the flood
 * (24 connections on 1 MB shares: the account's small cold reads went from a p50 of 4 to 274 ms, another
 * account's stayed at 16 ms). A miss this small costs a fraction of a 1 MB one's ~8 ms (most of which
 * grows with the bytes, docs/shares.md).
 */
export const SMALL_SNAPSHOT_BYTES = 64 * 1024;
/**
 * The small lane's bound per account: 8 snapshots at SMALL_SNAPSHOT_BYTES, dozens of typical ones. One
 * account's misses thus hold at most 2.5 MiB of object reads at once, both lanes together.
 */
const DEFAULT_SMALL_OBJECT_READ_BYTES_PER_ACCOUNT = 512 * 1024;
/** Revocations remembered for the floor check; far more than can be in flight at once. */
const REVOKED_FLOOR_MAX = 100_000;
/** Reads racing a revocation (lru-cache rejects them with 'replaced'/'deleted') are retried this often. */
const MAX_ATTEMPTS = 3;
const ENTRY_OVERHEAD = 256;

function sizeOf(state: ShareState): number {
  if (state.status !== 'live') return 64;
  const r = state.record;
  let files = 0;
  for (const f of state.files) files += 2 * (f.name.length + f.content_type.length) + 64;
  return ENTRY_OVERHEAD + 2 * (state.text.length + r.slug.length + r.account.length + r.created_at.length) + files;
}

/** The answer to a read of a share whose snapshot is missing or corrupt: 503, never a 500. */
export function missingObject(): GatewayError {
  return new GatewayError(
    'store_unavailable',
    "This share's snapshot cannot be read from the object store; the operator has been alerted.",
  );
}

/** Builds the share cache and subscribes it to the store's invalidations. */
export function createShareCache(o: ShareCacheOptions): ShareCache {
  const revokedFloor = new LRUCache<string, true>({ max: REVOKED_FLOOR_MAX });
  const maxBytes = o.maxBytes ?? DEFAULT_MAX_BYTES;
  const objectReads = createObjectReadGate(o.objectReadBytesPerAccount ?? DEFAULT_OBJECT_READ_BYTES_PER_ACCOUNT);
  const smallObjectReads = createObjectReadGate(o.smallObjectReadBytesPerAccount ?? DEFAULT_SMALL_OBJECT_READ_BYTES_PER_ACCOUNT);
  // Unknown slugs apart from the bodies: in one LRU, 100,000 random slugs read by a keyless prober (7 s
  // from one address over loopback) evicted every cached live share, each of which then cost a Redis and
  // an S3 read again, and answered 503 while S3 was down.
  const unknown = new LRUCache<string, ShareState>({
    max: o.maxUnknown ?? DEFAULT_MAX_UNKNOWN,
    ttl: o.negativeTtlMs,
    noDeleteOnStaleGet: true,
  });
  const cache = new LRUCache<string, ShareState>({
    max: o.max ?? DEFAULT_MAX_ENTRIES,
    maxSize: maxBytes,
    sizeCalculation: sizeOf,
    ttl: o.ttlMs,
    // An expired share stays (its bytes still counted against maxSize) until it is read again and
    // replaced, or evicted: lru-cache deleting its last entry on a stale get resets all of its `max`-slot
    // arrays on the read path (the key cache, key-cache.ts, has the same setting).
    noDeleteOnStaleGet: true,
    fetchMethod: async (slug, _stale, { options }) => {
      const record = await o.store.getShare(slug);
      if (!record) {
        // Remembered in the unknown-slug LRU; returning undefined leaves no entry here (lookup reads it there).
        unknown.set(slug, UNKNOWN);
        return undefined;
      }
      // A revocation seen while this read was in flight wins over what the read returned.
      if (record.revoked_at !== null || revokedFloor.has(slug)) return REVOKED;
      let text = record.snapshot;
      let files = record.files;
      if (text === undefined || files === undefined) {
        // The owner's misses take turns (SPEC §13): whoever reads, an account's big shares cannot fill the
        // event loop with object reads while other accounts' requests wait behind them. Its small ones
        // take turns in a lane of their own: a flood of its big ones does not hold them up.
        const bytes = text === undefined ? record.bytes || 0 : 0;
        const lane = bytes <= SMALL_SNAPSHOT_BYTES ? smallObjectReads : objectReads;
        const release = o.objects ? await lane.acquire(record.account, bytes) : undefined;
        try {
          const objects = o.objects;
          if (!objects) throw new SnapshotMissing(slug, 'missing');
          // The file list is its own object when the record holds only its count: read with the snapshot.
          [text, files] = await Promise.all([text ?? objects.get(slug), files ?? objects.getFiles(slug)]);
        } catch (e) {
          if (!(e instanceof SnapshotMissing)) throw e;
          o.onMissing?.(slug, o.objects ? e.reason : 'unconfigured');
          // Kept as briefly as an unknown slug: reported once per instance per negative TTL, not per read.
          options.ttl = o.negativeTtlMs;
          return MISSING;
        } finally {
          release?.();
        }
      }
      return revokedFloor.has(slug) ? REVOKED : liveShare(record, text, files);
    },
  });

  function revoke(slug: string): readonly ShareFile[] | undefined {
    revokedFloor.set(slug, true);
    unknown.delete(slug);
    const was = cache.peek(slug);
    cache.set(slug, REVOKED);
    return was?.status === 'live' ? was.files : undefined;
  }
  o.store.onInvalidation((m) => {
    if (m.kind === 'share') revoke(m.slug);
  });

  return {
    peek(slug) {
      const s = cache.get(slug) ?? unknown.get(slug);
      o.onLookup?.(s ? 'hit' : 'miss');
      return s;
    },
    async lookup(slug) {
      const hit = cache.get(slug) ?? unknown.get(slug);
      if (hit) return hit;
      for (let attempt = 1; ; attempt++) {
        try {
          return (await cache.fetch(slug)) ?? unknown.get(slug) ?? UNKNOWN;
        } catch (err) {
          // An abort ('replaced' by a revocation, 'deleted', 'evicted'): the cache now holds the newer
          // state, or a fresh read gets it. Store failures propagate as store_unavailable.
          if (attempt >= MAX_ATTEMPTS || (err as { code?: string }).code === 'store_unavailable') throw err;
          const now = cache.get(slug) ?? unknown.get(slug);
          if (now) return now;
        }
      }
    },
    remember(record, snapshot) {
      if (record.revoked_at !== null || revokedFloor.has(record.slug)) return;
      unknown.delete(record.slug);
      cache.set(record.slug, liveShare(record, snapshot));
    },
    revoke,
  };
}
