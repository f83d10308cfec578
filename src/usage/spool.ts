/**
 * The usage spool (SPEC §10, §14): usage flushes that could not land when the process stopped (Redis
 * unreachable at shutdown) are written to `server.spool_dir`, fsynced, and applied at the next start, by
 * the running spool scan, or by `tollgate spool replay` — so the aggregates stay equal to the ledger whose
 * settles were spooled beside them, without a rebuild.
 *
 * One file per stopping process, `<dir>/usage-<time>-<pid>-<random>.usage`, written once: as
 * `….usage.open`, fsynced, then renamed (and the directory fsynced). It is a kind of its own, apart from the
 * settle spool (`settles-….spool`, src/credit/spool.ts), which never reads it. A replay takes `.usage` files,
 * and `.usage.open` files untouched for `staleOpenMs` (the writer died while writing).
 *
 * A line is `<crc32 of the JSON, 8 hex digits> <a UsageFlush as JSON>\n`, in flush order. Exactly once: each
 * flush keeps the id it was (or would have been) sent with, and the store applies a flush id at most once per
 * account × day (the `~flush:<process>` mark, usage-flush.lua), so a flush that landed before the process
 * gave up on it, a file replayed twice, or by two instances at once, counts once. The lines of a file are
 * applied one after another and a replay stops at the first that cannot land: a process's later flush landing
 * first would make the store skip its earlier one (the mark keeps the highest number applied).
 */
import { randomBytes } from 'node:crypto';
import { mkdir, open, rename, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import type { Logger } from '../obs/logger.ts';
import { decodeCheckedLine, encodeCheckedLine, spoolFiles, syncDir } from '../credit/spool-line.ts';
import type { UsageFlush } from '../store/types.ts';

const SUFFIX = '.usage';
const OPEN = '.usage.open';

export function encodeUsageLine(f: UsageFlush): string {
  return encodeCheckedLine(f);
}

function decodeUsageLine(line: string): UsageFlush | undefined {
  const f = decodeCheckedLine(line) as Partial<UsageFlush> | null | undefined;
  if (
    typeof f !== 'object' ||
    f === null ||
    !Array.isArray(f.cells) ||
    !Array.isArray(f.lastUsed) ||
    !Array.isArray(f.ledgerAccounts) ||
    typeof f.retentionDays !== 'number' ||
    // Without an id a replay could count twice: such a flush is never spooled.
    typeof f.flushId?.process !== 'string' ||
    f.flushId.process === '' ||
    !Number.isSafeInteger(f.flushId.seq)
  )
    return undefined;
  return f as UsageFlush;
}

/** The complete, valid lines of a usage spool file's text, in order (for tests and tools). */
export function decodeUsageSpool(text: string): UsageFlush[] {
  const lines = text.split('\n');
  lines.pop();
  return lines.map(decodeUsageLine).filter((f): f is UsageFlush => f !== undefined);
}

/**
 * Writes `flushes` (in flush order) to a new usage spool file in `dir`, fsynced and renamed to its final
 * `.usage` name before resolving; returns that name.
 */
export async function writeUsageSpool(dir: string, flushes: readonly UsageFlush[], now: number = Date.now()): Promise<string> {
  await mkdir(dir, { recursive: true });
  const stamp = new Date(now).toISOString().replace(/[-:.]/g, '');
  const base = join(dir, `usage-${stamp}-${process.pid}-${randomBytes(4).toString('hex')}`);
  const h = await open(base + OPEN, 'wx', 0o600);
  try {
    await h.write(flushes.map(encodeUsageLine).join(''));
    await h.sync();
  } finally {
    await h.close();
  }
  await rename(base + OPEN, base + SUFFIX);
  await syncDir(dir);
  return base + SUFFIX;
}

export interface UsageReplayDeps {
  dir: string;
  /** Applies one flush (store.flushUsage); rejects when the store is unreachable (the file is kept). */
  flush: (f: UsageFlush) => Promise<void>;
  logger: Logger;
  /** A `.usage.open` file untouched this long belongs to a process that died while writing it. Default 60 s. */
  staleOpenMs?: number;
  now?: () => number;
}

export interface UsageReplayReport {
  files: number;
  /** Flushes sent to the store (a flush that had landed already changes nothing there). */
  flushes: number;
  /** Flushes that could not reach the store: their file is kept. */
  failed: number;
  torn: number;
  corrupt: number;
}

/**
 * Applies every flush of every finished usage spool file in `dir`, in order, then deletes each file that
 * was applied whole (renamed `….corrupt` when it had corrupt lines). A missing directory is an empty spool.
 */
export async function replayUsageSpool(d: UsageReplayDeps): Promise<UsageReplayReport> {
  const now = d.now ?? Date.now;
  const staleOpenMs = d.staleOpenMs ?? 60_000;
  const report: UsageReplayReport = { files: 0, flushes: 0, failed: 0, torn: 0, corrupt: 0 };
  const take = (name: string) => name.startsWith('usage-') && (name.endsWith(SUFFIX) || name.endsWith(OPEN));
  for await (const { path, text } of spoolFiles(d.dir, take, OPEN, staleOpenMs, now)) {
    report.files++;
    const lines = text.split('\n');
    const tail = lines.pop()!;
    if (tail !== '') {
      report.torn++;
      d.logger.error(
        { spool: path, line: tail },
        'usage spool: last line torn by a crash, skipped: run `tollgate usage rebuild` for its accounts and days',
      );
    }
    let corrupt = 0;
    let failed = false;
    for (const line of lines) {
      if (line === '') continue;
      const f = decodeUsageLine(line);
      if (!f) {
        corrupt++;
        d.logger.error({ spool: path, line }, 'usage spool: corrupt line skipped: run `tollgate usage rebuild` for its accounts and days');
        continue;
      }
      try {
        await d.flush(f);
        report.flushes++;
      } catch (e) {
        // Kept whole, in order: the flushes after this one wait for it (see the header).
        d.logger.warn({ err: (e as Error).message, spool: path }, 'usage spool: store unreachable, file kept for the next replay');
        report.failed++;
        failed = true;
        break;
      }
    }
    report.corrupt += corrupt;
    if (failed) continue;
    try {
      if (corrupt > 0) await rename(path, `${path}.corrupt`);
      else await unlink(path);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
    }
  }
  if (report.files > 0) d.logger.info({ spool: d.dir, ...report }, 'usage spool replayed');
  return report;
}
