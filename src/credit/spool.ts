/**
 * The settle spool (SPEC §14): a settle still owed when the process stops (Redis unreachable through the
 * drain) is appended here, fsynced, and applied at the next start (or by `tollgate spool replay`).
 *
 * One file per process, `<dir>/settles-<time>-<pid>-<random>.spool`, created only when something is
 * spooled. While the process may still append to it, it is named `….spool.open`; it is renamed to
 * `.spool` once the process closed it. A replay takes `.spool` files, and `.open` files no process has
 * touched for `staleOpenMs` (the writer died before closing it), never this process's own file.
 *
 * A line is `<crc32 of the JSON, 8 hex digits> <the SettleInput as JSON>\n`. A last line without its
 * newline is a write torn by a crash (skipped, logged); any other line whose checksum does not match is
 * corrupt (skipped, logged with the raw text, and the file is kept as `….corrupt` for the operator).
 *
 * Exactly once: every settle is idempotent per request id (docs/ledger.md), and a replayed settle is sent
 * with `mayHaveRun`, because it may have landed before (a replay that stopped before deleting its file,
 * a copy replayed twice, an attempt in flight at shutdown). So a settle whose hold is still in Redis —
 * open, or released by the reaper (`r`) — debits once; one that already landed replays; one that finds no
 * trace in an emptied hold bucket (replayed more than `settledMarkerTtlSeconds` after its hold expired)
 * debits nothing and is logged at error level to reconcile from.
 */
import { randomBytes } from 'node:crypto';
import { mkdir, open, rename, unlink, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import type { Logger } from '../obs/logger.ts';
import { decodeCheckedLine, encodeCheckedLine, spoolFiles, syncDir } from './spool-line.ts';
import type { SettleInput, SettleResult } from '../store/types.ts';

export interface Spool {
  /**
   * Appends the settles, one line each, and fsyncs the file before resolving. Creates the file at first use,
   * and again after close(): a settle spooled after the close goes to a new file (left `.open` unless
   * close() is called again; a replay takes it once it is stale), never to the closed one.
   */
  append(settles: readonly SettleInput[]): Promise<void>;
  /** Closes this process's file and names it `.spool`, so a replay may take it. After the appends queued before it. */
  close(): Promise<void>;
  /** This process's file (its final `.spool` name), once something was spooled. */
  readonly file: string | undefined;
}

export interface SpoolDeps {
  dir: string;
  /** The clock for the file name. */
  now?: () => number;
}

const SUFFIX = '.spool';
const OPEN = '.spool.open';

/** One spool line: checksum, space, JSON, newline. */
export function encodeLine(settle: SettleInput): string {
  return encodeCheckedLine(settle);
}

export interface DecodedSpool {
  settles: SettleInput[];
  /** The last line, cut before its newline: a write the crash interrupted. */
  torn: string | undefined;
  /** Complete lines whose checksum or content is wrong. */
  corrupt: string[];
}

/** Reads a spool file's text into its settles; a torn last line and corrupt lines are returned apart. */
export function decodeSpool(text: string): DecodedSpool {
  const out: DecodedSpool = { settles: [], torn: undefined, corrupt: [] };
  const lines = text.split('\n');
  // The text after the last newline: '' for a complete file, else a torn write.
  const tail = lines.pop()!;
  if (tail !== '') out.torn = tail;
  for (const line of lines) {
    if (line === '') continue;
    const settle = decodeLine(line);
    if (settle) out.settles.push(settle);
    else out.corrupt.push(line);
  }
  return out;
}

function decodeLine(line: string): SettleInput | undefined {
  const s = decodeCheckedLine(line) as Partial<SettleInput> | null | undefined;
  if (
    typeof s !== 'object' ||
    s === null ||
    typeof s.account !== 'string' ||
    typeof s.requestId !== 'string' ||
    !Number.isSafeInteger(s.costMicros) ||
    typeof s.ts !== 'string'
  )
    return undefined;
  return s as SettleInput;
}

/** This process's spool: nothing is created until the first append. */
export function createSpool(d: SpoolDeps): Spool {
  const now = d.now ?? Date.now;
  let fh: FileHandle | undefined;
  let opening: Promise<FileHandle> | undefined;
  let base: string | undefined;
  // Appends run one after another: each line complete and fsynced before the next write starts.
  let queue: Promise<unknown> = Promise.resolve();

  async function openFile(): Promise<FileHandle> {
    await mkdir(d.dir, { recursive: true });
    const stamp = new Date(now()).toISOString().replace(/[-:.]/g, '');
    base = join(d.dir, `settles-${stamp}-${process.pid}-${randomBytes(4).toString('hex')}`);
    const h = await open(base + OPEN, 'a', 0o600);
    await syncDir(d.dir);
    return h;
  }

  return {
    get file() {
      return base === undefined ? undefined : base + SUFFIX;
    },
    append(settles) {
      const run = queue.then(async () => {
        if (settles.length === 0) return;
        fh ??= await (opening ??= openFile());
        await fh.write(settles.map(encodeLine).join(''));
        await fh.sync();
      });
      queue = run.catch(() => {});
      return run;
    },
    close() {
      // In the queue: after every append issued before it, and before any issued after it (which opens a new file).
      const run = queue.then(async () => {
        const h = fh ?? (opening && (await opening.catch(() => undefined)));
        const name = base;
        fh = undefined;
        opening = undefined;
        if (!h || name === undefined) return;
        await h.close();
        await rename(name + OPEN, name + SUFFIX);
        await syncDir(d.dir);
      });
      queue = run.catch(() => {});
      return run;
    },
  };
}

export interface ReplayDeps {
  dir: string;
  /** Applies one settle; resolves undefined when it could not land (kept for a later replay). */
  settle: (input: SettleInput) => Promise<SettleResult | undefined>;
  logger: Logger;
  /** This process's own file (still being written), never replayed. */
  own?: string;
  /** An `.open` file untouched this long belongs to a process that died before closing it. Default 60 s. */
  staleOpenMs?: number;
  now?: () => number;
}

export interface ReplayReport {
  files: number;
  settles: number;
  /** Landed with a new ledger entry. */
  debited: number;
  /** Found already settled (an earlier attempt or replay landed): nothing debited again. */
  alreadySettled: number;
  /** Found no trace of their hold in an emptied bucket: nothing debited, logged at error level to reconcile. */
  unresolved: number;
  /** Could not reach the store: their file is kept. */
  failed: number;
  torn: number;
  corrupt: number;
}

/**
 * Applies every settle of every finished spool file in `dir`, then deletes each file whose settles all
 * landed (a file with corrupt lines is renamed `….corrupt` instead). A missing directory is an empty spool.
 */
export async function replaySpool(d: ReplayDeps): Promise<ReplayReport> {
  const now = d.now ?? Date.now;
  const staleOpenMs = d.staleOpenMs ?? 60_000;
  const report: ReplayReport = { files: 0, settles: 0, debited: 0, alreadySettled: 0, unresolved: 0, failed: 0, torn: 0, corrupt: 0 };
  const take = (name: string, path: string) =>
    (name.endsWith(SUFFIX) || name.endsWith(OPEN)) && !(d.own !== undefined && (path === d.own || path === d.own + '.open'));
  for await (const { path, text } of spoolFiles(d.dir, take, OPEN, staleOpenMs, now)) {
    report.files++;
    const decoded = decodeSpool(text);
    if (decoded.torn !== undefined) {
      report.torn++;
      d.logger.warn(
        { spool: path, line: decoded.torn },
        'spool: last line torn by a crash, skipped (its settle is in that process’s error log line)',
      );
    }
    for (const line of decoded.corrupt) d.logger.error({ spool: path, line }, 'spool: corrupt line skipped: reconcile the ledger from it');
    report.corrupt += decoded.corrupt.length;
    report.settles += decoded.settles.length;
    const results = await Promise.all(
      decoded.settles.map((s) =>
        d.settle({ ...s, mayHaveRun: true }).then(
          (r) => r,
          () => undefined,
        ),
      ),
    );
    let kept = false;
    for (const r of results) {
      if (r === undefined) {
        report.failed++;
        kept = true;
      } else if (!r.replayed) report.debited++;
      else if (r.entry_id === '') report.unresolved++;
      else report.alreadySettled++;
    }
    if (kept) continue;
    try {
      if (decoded.corrupt.length > 0) await rename(path, `${path}.corrupt`);
      else await unlink(path);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
    }
  }
  if (report.files > 0) d.logger.info({ spool: d.dir, ...report }, 'spool replayed');
  return report;
}
