/**
 * The line format and durability step the spools share (src/credit/spool.ts for settles,
 * src/usage/spool.ts for usage flushes): a line is `<crc32 of the JSON, 8 hex digits> <JSON>\n`, so a
 * line torn or damaged on disk is told apart from a whole one; a directory is fsynced after an entry is
 * created or renamed in it, so the entry survives a crash.
 */
import { open, readdir, readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { crc32 } from 'node:zlib';

/** One spool line: checksum, space, JSON, newline. */
export function encodeCheckedLine(value: unknown): string {
  const json = JSON.stringify(value);
  return `${crc32(json).toString(16).padStart(8, '0')} ${json}\n`;
}

/** The JSON value of a line written by encodeCheckedLine (without its newline); undefined when its checksum or JSON is wrong. */
export function decodeCheckedLine(line: string): unknown {
  const json = line.slice(9);
  if (line[8] !== ' ' || !/^[0-9a-f]{8}$/.test(line.slice(0, 8))) return undefined;
  if (parseInt(line.slice(0, 8), 16) !== crc32(json)) return undefined;
  try {
    return JSON.parse(json);
  } catch {
    return undefined;
  }
}

/** fsync of a directory, so a created or renamed entry survives a crash. */
export async function syncDir(dir: string): Promise<void> {
  const h = await open(dir, 'r');
  try {
    await h.sync();
  } finally {
    await h.close();
  }
}

/**
 * The spool files of `dir` a replay takes, in name order, with their text: those `take` accepts, a
 * `….open` one (`openSuffix`: its writer may still append) only once untouched for `staleOpenMs`. A
 * missing directory has none; a file another process replayed and deleted meanwhile is skipped.
 */
export async function* spoolFiles(
  dir: string,
  take: (name: string, path: string) => boolean,
  openSuffix: string,
  staleOpenMs: number,
  now: () => number,
): AsyncGenerator<{ path: string; text: string }> {
  let names: string[];
  try {
    names = await readdir(dir);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return;
    throw e;
  }
  for (const name of names.sort()) {
    const path = join(dir, name);
    if (!take(name, path)) continue;
    let text: string;
    try {
      if (name.endsWith(openSuffix) && now() - (await stat(path)).mtimeMs < staleOpenMs) continue;
      text = await readFile(path, 'utf8');
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') continue;
      throw e;
    }
    yield { path, text };
  }
}
