// Shared by the fault-* e2e tests (issue 25, SPEC §14): a redis-server on its own AOF (killed and restarted
// without losing what it acknowledged, so an outage does not also wipe the holds), SSE reading up to a
// number of content chunks, and the spool files a gateway left.
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { decodeSpool } from '../../src/credit/spool.ts';
import type { SettleInput, UsageCell } from '../../src/store/types.ts';
import { decodeUsageSpool } from '../../src/usage/spool.ts';
import { sseData } from './chat-fixture.ts';
import { startDurableRedis } from './durable-redis.ts';

interface Teardown {
  teardown(fn: () => unknown): void;
}

export interface AofRedis {
  url: string;
  /** SIGKILL: a crash, nothing saved at shutdown (the AOF, fsynced before every reply, has it all). */
  kill(): Promise<void>;
  /** Starts it again on its AOF, same port. */
  start(): Promise<void>;
}

/** redis-server with `--appendonly yes --appendfsync always` in a temp dir, on a free port (durable-redis.ts). */
export async function startAofRedis(t: Teardown): Promise<AofRedis> {
  const r = await startDurableRedis(t);
  return { url: r.url, kill: () => r.stop('SIGKILL'), start: () => r.start() };
}

/** Reads an SSE response until `n` content chunks arrived; `rest()` reads it to its end (or its cut). */
export async function readContent(res: Response, n: number): Promise<{ rest: () => Promise<string> }> {
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  let text = '';
  while (sseData(text).filter((d) => d.includes('"content":"tok')).length < n) {
    const { value, done } = await reader.read();
    if (done) break;
    text += decoder.decode(value, { stream: true });
  }
  const rest = async () => {
    let more = text;
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return more;
        more += decoder.decode(value, { stream: true });
      }
    } catch {
      return more; // the connection was cut
    }
  };
  return { rest };
}

/** The settle spool files in `dir` (none when it does not exist) and every settle in them. */
export async function spooled(dir: string): Promise<{ files: string[]; settles: SettleInput[] }> {
  let names: string[] = [];
  try {
    // The usage spool beside it (`usage-….usage`) is usageSpooled's.
    names = (await readdir(dir)).filter((n) => !n.startsWith('usage-')).sort();
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
  }
  const settles: SettleInput[] = [];
  for (const n of names) if (n.endsWith('.spool')) settles.push(...decodeSpool(await readFile(join(dir, n), 'utf8')).settles);
  return { files: names, settles };
}

/** The usage spool files in `dir` (`usage-….usage`) and the cells of every flush in them, in order. */
export async function usageSpooled(dir: string): Promise<{ files: string[]; cells: (UsageCell & { account: string })[] }> {
  let names: string[] = [];
  try {
    names = (await readdir(dir)).filter((n) => n.startsWith('usage-') && n.endsWith('.usage')).sort();
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
  }
  const cells: (UsageCell & { account: string })[] = [];
  for (const n of names) for (const f of decodeUsageSpool(await readFile(join(dir, n), 'utf8'))) cells.push(...f.cells);
  return { files: names, cells };
}
