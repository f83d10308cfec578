/**
 * What one live request costs Redis (issue 15 item 1): redis-server CPU per hold + settle, read inside
 * Redis from `INFO commandstats` (the client's CPU does not count; rounds alternate the cases, as a
 * preempted server still looks slower), and the memory the request leaves behind. Each case runs the store from its own `src/` on a fresh
 * redis-server:
 *
 *   node bench/ledger-redis.ts [--n 50000] [--rounds 3] [--out bench/results/ledger.md] \
 *     --case before=/tmp/ledger-before/src --case after=src
 *
 * (`mkdir /tmp/ledger-before && git archive c0e90ed src | tar -x -C /tmp/ledger-before` exports the layout
 * before hold buckets, with a settled marker per request; it imports from the worktree's node_modules
 * once `ln -s "$PWD/node_modules" /tmp/ledger-before/node_modules`.)
 * Per case: N hold + settle pairs, 64 in flight, on one account through the gateway's own store (the
 * script pipe on a single node); then the reaper once, with its clock past every hold's expiry, so
 * whatever the layout leaves for it to clean is cleaned and counted. Every command Redis ran meanwhile
 * counts (scripts, index writes, the reaper's reads), divided by N.
 *
 * Memory, `used_memory` over the grant's baseline, divided by N: right after the N requests; after
 * the ledger stream is trimmed to nothing (what export + retention leave, SPEC §4); after the reaper.
 */
import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { loadavg } from 'node:os';
import { Redis } from 'ioredis';
import type { Store } from '../src/store/types.ts';
import { liveRequest } from './live-request.ts';
import { freePort, start } from './procs.ts';
import { commandStats, luaCommands } from './redis-stats.ts';
import { shortHead } from './git.ts';

const args = process.argv.slice(2);
const N = Number(args[args.indexOf('--n') + 1] || 0) || 50_000;
const out = args.includes('--out') ? args[args.indexOf('--out') + 1] : undefined;
const cases = args.flatMap((a, i) => (a === '--case' ? [args[i + 1]!] : [])).map((c) => c.split('=') as [string, string]);
if (cases.length === 0) cases.push(['current', 'src']);
const ROUNDS = Number(args[args.indexOf('--rounds') + 1] || 0) || 3;
const IN_FLIGHT = 64;
const ACCT = 'bench';

interface CaseResult {
  name: string;
  src: string;
  usPerReq: number;
  commands: { cmd: string; calls: number; usecPerCall: number; usPerReq: number; nested: boolean }[];
  bytesAfterRequests: number;
  bytesAfterTrim: number;
  bytesAfterReap: number;
  keysAfterReap: number;
  reaped: number;
}

/** Waits until UNLINKed values are freed (Redis frees them on a background thread). */
async function settled(r: Redis): Promise<void> {
  while (!/lazyfree_pending_objects:0\r?\n/.test(await r.info('memory'))) await new Promise((res) => setTimeout(res, 20));
}

const usedMemory = async (r: Redis) => Number(/used_memory:(\d+)/.exec(await r.info('memory'))![1]);

/** In batches, so N commands never sit in one pipeline at once. */
async function each<T>(xs: readonly T[], fn: (x: T) => Promise<unknown>): Promise<void> {
  for (let i = 0; i < xs.length; i += 1000) await Promise.all(xs.slice(i, i + 1000).map(fn));
}

/** `accounts`: the N requests go round-robin over this many accounts (1: one hot account; N: one each). */
async function runCase(name: string, src: string, accounts: number): Promise<CaseResult> {
  const port = await freePort();
  const server = await start('redis', 'redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], {
    ready: (l) => l.some((x) => x.includes('Ready to accept connections')),
  });
  const url = `redis://127.0.0.1:${port}`;
  const admin = new Redis(url);
  const mod = (await import(resolve(src, 'store/redis-store.ts'))) as typeof import('../src/store/redis-store.ts');
  const store: Store = await mod.createRedisStore({ url, commandTimeoutMs: 2000, settledTtlSeconds: 4260 });
  const accts = Array.from({ length: accounts }, (_, i) => (accounts === 1 ? ACCT : `${ACCT}-${i}`));
  await each(accts, (a) => store.grant(a, 1e15, 'bench-grant', undefined, new Date().toISOString()));
  // As the gateway sets it: now + the hold TTL, so holds spread over buckets at the request rate.
  const ttlMs = 60_000;
  let seq = 0;
  const pair = (acct: string) => liveRequest(store, acct, `req_${String(seq++).padStart(22, '0')}`, Date.now(), ttlMs);
  const run = async (pool: readonly string[], count: number) => {
    let left = count;
    let next = 0;
    await Promise.all(
      Array.from({ length: IN_FLIGHT }, async () => {
        while (left-- > 0) await pair(pool[next++ % pool.length]!);
      }),
    );
  };
  const pastEveryHold = () => Date.now() + ttlMs + 60_000;
  // Scripts cached and code warm, on another account (its reaper run marks only that one reaped).
  await store.grant('warm-up', 1e15, 'bench-grant', undefined, new Date().toISOString());
  await run(['warm-up'], 2_000);
  await store.reapExpiredHolds(pastEveryHold(), new Date().toISOString());
  await admin.xtrim(`{acct:warm-up}:ledger`, 'MAXLEN', 0);
  await each(accts, (a) => admin.xtrim(`{acct:${a}}:ledger`, 'MAXLEN', 0));
  await settled(admin);
  const mem0 = await usedMemory(admin);
  const keys0 = await admin.dbsize();
  await admin.config('RESETSTAT');
  await run(accts, N);
  const mem1 = await usedMemory(admin);
  await each(accts, (a) => admin.xtrim(`{acct:${a}}:ledger`, 'MAXLEN', 0));
  await settled(admin);
  const mem2 = await usedMemory(admin);
  const reaped = await store.reapExpiredHolds(pastEveryHold(), new Date().toISOString());
  const after = commandStats(await admin.info('commandstats'));
  await settled(admin);
  const mem3 = await usedMemory(admin);
  const keys3 = await admin.dbsize();
  // The store's commands: everything but this script's own (INFO, CONFIG, XTRIM, DBSIZE). A script's
  // time includes the commands it calls, which commandstats also counts on their own: those are shown
  // but not added again (a command named in the layout's lua/*.lua runs only inside scripts there).
  const own = /^(info|config|xtrim|dbsize)/;
  const nested = new Set<string>();
  for (const f of readdirSync(resolve(src, 'store/lua'))) {
    for (const cmd of luaCommands(readFileSync(resolve(src, 'store/lua', f), 'utf8'))) nested.add(cmd);
  }
  const commands = [...after]
    .filter(([cmd]) => !own.test(cmd))
    .map(([cmd, s]) => ({ cmd, calls: s.calls, usecPerCall: s.usec / s.calls, usPerReq: s.usec / N, nested: nested.has(cmd) }))
    .sort((a, b) => Number(a.nested) - Number(b.nested) || b.usPerReq - a.usPerReq);
  const usPerReq = commands.filter((c) => !c.nested).reduce((s, c) => s + c.usPerReq, 0);
  await store.close();
  admin.disconnect();
  await server.stop();
  return {
    name,
    src,
    usPerReq,
    commands,
    bytesAfterRequests: (mem1 - mem0) / N,
    bytesAfterTrim: (mem2 - mem0) / N,
    bytesAfterReap: (mem3 - mem0) / N,
    keysAfterReap: keys3 - keys0,
    reaped,
  };
}

try {
  execFileSync('redis-server', ['--version'], { stdio: 'ignore' });
} catch {
  console.log('redis-server not on PATH: skipped');
  process.exit(0);
}

// Rounds alternate the cases, each on a fresh redis-server, so drift on a shared machine (commandstats
// time is wall time inside Redis: a preempted server looks slower) hits every case alike; the round
// with the median CPU per request is reported.
// Each layout twice: every request on one hot account, and every request on an account of its own (the
// most index entries and reaper visits per request a layout can need).
const variants = cases.flatMap(([name, src]) => [
  [`${name}, one account`, src, 1] as const,
  [`${name}, an account per request`, src, N] as const,
]);
const rounds = new Map<string, CaseResult[]>(variants.map(([name]) => [name, []]));
for (let r = 0; r < ROUNDS; r++) for (const [name, src, accounts] of variants) rounds.get(name)!.push(await runCase(name, src, accounts));
const results = variants.map(([name]) => {
  const all = rounds.get(name)!.sort((a, b) => a.usPerReq - b.usPerReq);
  return { ...all[Math.floor(all.length / 2)]!, range: [all[0]!.usPerReq, all.at(-1)!.usPerReq] as const };
});

const f1 = (x: number) => x.toFixed(1);
const redisVersion = execFileSync('redis-server', ['--version'], { encoding: 'utf8' }).trim();
const commit = shortHead();
const L: string[] = [
  '# Redis cost of a live request (hold + settle)',
  '',
  `${redisVersion.split(' ').slice(0, 3).join(' ')} · commit \`${commit}\` · N = ${N} requests, ${IN_FLIGHT} in flight · median of ${ROUNDS} rounds · load average ${loadavg()
    .map((x) => x.toFixed(2))
    .join(' ')} · ${new Date().toISOString()}`,
  '',
  'Regenerate: `node bench/ledger-redis.ts --out bench/results/ledger.md --case before=<old src> --case after=src`',
  "(the header of bench/ledger-redis.ts says how). CPU is redis-server's own time in the commands the store sent",
  '(`INFO commandstats`: the scripts, which include the commands they call, plus the index commands and the',
  "reaper's run), so the client's CPU does not count; a server preempted on a busy machine still looks slower, hence",
  'alternating rounds. Memory is `used_memory` over the baseline, per request: right after the requests (ledger',
  'entries included), after the ledger stream is trimmed (what export + retention leave), after the reaper has',
  "passed the holds' buckets (the hold TTL later in production). Targets (issue 15): ≤ 10 µs, and ≤ 10 bytes",
  'retained once the ledger entry is exported and trimmed.',
  '',
  '| layout | Redis µs / request (range over rounds) | bytes / request after N | after the ledger is trimmed | after the reaper | keys left after the reaper |',
  '|---|--:|--:|--:|--:|--:|',
  ...results.map(
    (r) =>
      `| ${r.name} | ${f1(r.usPerReq)} (${f1(r.range[0])}–${f1(r.range[1])}) | ${f1(r.bytesAfterRequests)} | ${f1(r.bytesAfterTrim)} | ${f1(r.bytesAfterReap)} | ${r.keysAfterReap} |`,
  ),
  '',
];
for (const r of results) {
  L.push(`## ${r.name} (\`${r.src}\`), the median round`, '', '| command | calls | µs / call | µs / request |', '|---|--:|--:|--:|');
  for (const c of r.commands)
    L.push(`| ${c.nested ? `↳ ${c.cmd} (inside scripts)` : c.cmd} | ${c.calls} | ${c.usecPerCall.toFixed(2)} | ${c.usPerReq.toFixed(2)} |`);
  L.push('');
}
const text = L.join('\n');
console.log(text);
if (out) writeFileSync(out, text);
