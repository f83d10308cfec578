/**
 * The shares' background work, run by every instance (docs/shares.md "Storage"):
 *
 * - **Orphan sweep.** A create writes an intent before its snapshot and file list objects and clears it
 *   after the record. An intent older than `graceMs` whose record does not exist is a create that failed
 *   after the upload and could not clean up (the store was down): the objects are deleted, the quota given
 *   back, the intent cleared. A revoke writes its intent before anything else: an intent whose record is
 *   revoked is a revoke that did not finish (quota release or object delete failed): the quota is given
 *   back and the objects deleted. An intent whose live record exists is only cleared. Every step is idempotent, so
 *   several instances sweeping at once do no harm. An intent that fails is put off (its time moved
 *   forward), so failing intents never fill every sweep's batch.
 * - **Migration.** Records of the layouts that kept the snapshot, or the file list (`f`), in Redis are
 *   moved, `batch` records looked at per tick: objects written, confirmed (length and SHA-256 by HEAD),
 *   then the record is rewritten without them, keeping the number of files (share-compact.lua, atomic
 *   against a revoke). The walk's cursor is saved
 *   in Redis under a lease, so one instance walks at a time and a restart resumes where it stopped;
 *   two instances moving the same record anyway (a lease that expired mid-batch) write the same object
 *   twice and compact once. Shares stay readable throughout: the cache reads the text from whichever
 *   place holds it.
 */
import { randomUUID } from 'node:crypto';
import type { Logger } from '../obs/logger.ts';
import type { RevokedShareKeep, Store } from '../store/types.ts';
import type { SnapshotObjects } from './snapshot-objects.ts';

export interface ShareJanitorDeps {
  store: Store;
  objects: SnapshotObjects;
  logger: Logger;
  now: () => number;
  /** How often both jobs run. */
  intervalMs: number;
  /** Intents younger than this are creates (or revokes) that may still be running. */
  graceMs: number;
  /** How a revoke remembers revoked shares (shares.revoked_retention_seconds, max_revoked_per_account). */
  revokedKeep?: RevokedShareKeep;
  /** Records looked at per migration tick, intents per sweep. */
  batch: number;
  onReport?: (outcome: 'migrated' | 'orphan_deleted', n: number) => void;
}

export interface ShareJanitor {
  start(): void;
  stop(): Promise<void>;
  /** One sweep: how many orphan objects were deleted. */
  sweepOnce(): Promise<number>;
  /** One migration step: records moved, and whether the walk is over (nothing left to move). */
  migrateOnce(): Promise<{ moved: number; done: boolean }>;
}

export function createShareJanitor(d: ShareJanitorDeps): ShareJanitor {
  const owner = randomUUID();
  // The lease outlives a tick by far: a slow S3 never lets two instances walk at once in practice.
  const leaseMs = Math.max(30_000, d.intervalMs * 6);
  let migrationDone = d.objects.kind === 'memory';
  // An intent the sweep could not finish is tried again this much later: the grace (the sweep's own time
  // scale), at most a minute, at least a tick.
  const retryMs = Math.max(d.intervalMs, Math.min(d.graceMs, 60_000));
  let timer: NodeJS.Timeout | undefined;
  let running: Promise<void> | undefined;

  async function sweepOnce(): Promise<number> {
    const now = d.now();
    const due = await d.store.duePendingShares(now - d.graceMs, d.batch);
    let deleted = 0;
    let failed = 0;
    let firstErr: unknown;
    for (const p of due) {
      // Each intent on its own: one that cannot be swept now (its account's slot unreachable on a Cluster)
      // is put off without holding up the others. Before, the first failure ended the sweep, and the oldest
      // intent failing every tick kept every other account's cleanup waiting behind it.
      try {
        const record = await d.store.getShare(p.slug);
        if (record === null) {
          await d.objects.delete(p.slug);
          await d.store.releaseShareQuota(p.account, p.slug, 'dropped');
          deleted++;
        } else if (record.revoked_at !== null) {
          // A revoke that did not finish (its quota release or its object delete failed, or it crashed): the
          // record is a tombstone; the quota is given back (idempotent per share) and the objects deleted.
          await d.store.releaseShareQuota(p.account, p.slug, 'revoked', d.revokedKeep);
          await d.objects.delete(p.slug);
          deleted++;
        }
        await d.store.clearSharePending(p);
      } catch (err) {
        failed++;
        firstErr ??= err;
        // Put off: due again `retryMs` from now, behind every intent already due. A sweep takes the oldest
        // `batch` intents; before, a failing intent kept its time, so `batch` intents of one account whose
        // slot stayed down filled every sweep and no other account's was ever reached. If this fails too
        // (the intents' own key unreachable), the next sweep fails before it gets this far anyway.
        await d.store.deferSharePending(p, now - d.graceMs + retryMs).catch(() => {});
      }
    }
    if (failed > 0) d.logger.warn({ err: firstErr, failed, retry_ms: retryMs }, 'share orphan sweep: intents put off');
    if (deleted > 0) {
      d.onReport?.('orphan_deleted', deleted);
      d.logger.warn({ deleted }, 'deleted share snapshot objects of creates that failed or shares revoked');
    }
    return deleted;
  }

  async function migrateOnce(): Promise<{ moved: number; done: boolean }> {
    const walk = await d.store.claimShareMigration(owner, leaseMs);
    if (walk === undefined) return { moved: 0, done: false };
    if (walk === null) return { moved: 0, done: true };
    const page = await d.store.scanLegacyShares(walk.cursor, d.batch);
    let moved = 0;
    for (const r of page.records) {
      const text = r.snapshot;
      if (text !== undefined && !(await d.objects.confirm(r.slug, text))) {
        await d.objects.put(r.slug, text);
        // Written is not enough: the bytes are freed only once the object reads back as these bytes.
        if (!(await d.objects.confirm(r.slug, text))) throw new Error('snapshot object did not confirm after upload');
      }
      const files = r.files ?? [];
      if (files.length > 0 && !(await d.objects.confirmFiles(r.slug, files))) {
        await d.objects.putFiles(r.slug, files);
        if (!(await d.objects.confirmFiles(r.slug, files))) throw new Error('file list object did not confirm after upload');
      }
      if (await d.store.compactShare(r.slug, text !== undefined ? Buffer.byteLength(text) : r.bytes, files.length)) moved++;
    }
    // A walk that moved something is walked again from the start: an instance of the previous version
    // may have stored more meanwhile (a rolling upgrade). Finished means a whole walk found nothing.
    const total = walk.moved + moved;
    const next = page.cursor !== '' ? { cursor: page.cursor, moved: total } : total === 0 ? null : { cursor: '', moved: 0 };
    await d.store.saveShareMigration(owner, next);
    if (moved > 0) {
      d.onReport?.('migrated', moved);
      d.logger.info({ moved }, 'moved share snapshots and file lists from Redis to the object store');
    }
    return { moved, done: next === null };
  }

  async function tick(): Promise<void> {
    try {
      await sweepOnce();
    } catch (err) {
      d.logger.warn({ err }, 'share orphan sweep failed; will retry');
    }
    if (migrationDone) return;
    try {
      migrationDone = (await migrateOnce()).done;
      if (migrationDone) d.logger.info('share snapshot migration: no snapshot or file list left in Redis');
    } catch (err) {
      d.logger.warn({ err }, 'share snapshot migration step failed; will retry');
    }
  }

  return {
    start() {
      if (timer) return;
      timer = setInterval(() => {
        if (!running) running = tick().finally(() => (running = undefined));
      }, d.intervalMs);
      timer.unref();
    },
    async stop() {
      if (timer) clearInterval(timer);
      timer = undefined;
      await running;
    },
    sweepOnce,
    migrateOnce,
  };
}
