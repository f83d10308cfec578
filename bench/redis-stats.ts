/**
 * redis-server's own time per command, from `INFO commandstats` (the client's CPU and the server's
 * network and syscall work do not count). A command called from a Lua script is counted twice there: in
 * its own line and inside the script's time, so the scripts' commands are left out of a total.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';

export type CommandStats = Map<string, { calls: number; usec: number }>;

/** Parses `INFO commandstats`. */
export function commandStats(info: string): CommandStats {
  const m: CommandStats = new Map();
  for (const [, cmd, calls, usec] of info.matchAll(/^cmdstat_([^:]+):calls=(\d+),usec=(\d+)/gm)) {
    m.set(cmd!, { calls: Number(calls), usec: Number(usec) });
  }
  return m;
}

/** Lower-cased commands a Lua source calls (`redis.call('X'` / `redis.pcall("X"`). */
export function luaCommands(lua: string): string[] {
  return [...lua.matchAll(/redis\.p?call\(\s*['"]([A-Za-z]+)['"]/g)].map((x) => x[1]!.toLowerCase());
}

/**
 * Commands the gateway only runs inside scripts: those of `<src>/store/lua/*.lua` and of the rate
 * limiter's script (rate-limiter-flexible's RateLimiterRedis, run by src/store/limiter-client.ts).
 */
export function scriptCommands(src: string): Set<string> {
  const out = new Set<string>();
  const dir = join(src, 'store/lua');
  // A --ref from before the scripts moved to files has none to read; its total then counts them twice.
  if (existsSync(dir)) for (const f of readdirSync(dir)) for (const c of luaCommands(readFileSync(join(dir, f), 'utf8'))) out.add(c);
  const limiter = createRequire(import.meta.url).resolve('rate-limiter-flexible/lib/RateLimiterRedis.js');
  for (const c of luaCommands(readFileSync(limiter, 'utf8'))) out.add(c);
  return out;
}

/** The bench's own commands, not the gateway's. */
const OWN = /^(info|config|client|hello|ping|select)/;

/**
 * Redis µs spent between two snapshots on the gateway's behalf: every command's usec delta, scripts
 * included, less the commands in `nested` (already inside their scripts' time) and the bench's own.
 */
export function usecBetween(before: CommandStats, after: CommandStats, nested: ReadonlySet<string>): number {
  let usec = 0;
  for (const [cmd, s] of after) {
    if (nested.has(cmd) || OWN.test(cmd)) continue;
    usec += s.usec - (before.get(cmd)?.usec ?? 0);
  }
  return usec;
}
