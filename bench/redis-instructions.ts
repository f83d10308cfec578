/**
 * redis-server's instructions per live request (one hold + one settle) on one hot account, counted by
 * valgrind's callgrind (deterministic where CPU µs are not), for several src/ trees and numbers of
 * requests in flight, split by where they go: the Lua VM, the script glue (eval.c, script.c,
 * script_lua.c), the Redis commands and data structures, command dispatch, networking and the event
 * loop, the allocator, libc. Answers "what does Redis spend per live request, before and after group
 * commit": at 1 in flight every batch is one request, at 64 batches form by themselves.
 *   node bench/redis-instructions.ts --ref 8a74a09 --ref . [--n 4000] [--warmup 600] [--rate 2500] \
 *     [--in-flight 1,4,16,64] [--redis-config 'hash-max-listpack-entries 64'] [--stagger] \
 *     [--out bench/results/redis-instructions.md] [--keep]
 * `--ref .` is the working tree's src/, copied when the tool starts; another ref is exported with
 * `git archive <ref> src` (both under $TMPDIR/redis-instr-*, sharing node_modules by a symlink, removed
 * at the end unless --keep). Per ref and in-flight level: a fresh redis-server under
 * `valgrind --tool=callgrind --toggle-collect=serverCron --collect-atstart=yes` (the 10 Hz timer left out:
 * under valgrind a run lasts long enough for it to be a fifth of the count), the store from that ref's
 * src/ driven as bench/ledger-redis.ts does, a warm-up, `callgrind_control --zero`, N hold + settle pairs
 * with that many in flight, a dump, and `INFO commandstats` (script calls per request). Only user-space
 * instructions count: the kernel's side of the socket syscalls is not in the figures. `--rate`: the
 * requests per second the holds' clock advances by, so hold buckets fill as in production (below).
 * `--redis-config 'name value'` (repeatable): a server setting for every run, as redis.conf would set it
 * (docs/operations.md weighs `hash-max-listpack-entries` for accounts of a few to fifty requests a second).
 * `--leases`: the working tree's store (`--ref .`) with `leases: true` (credit.leases, docs/ledger.md "Leases").
 * `--packed` (with --leases): the working tree's store measured a second time with `debitEntries: 'packed'`
 * (store.debit_entries, docs/ledger.md "Packed passes"), beside the same store without it.
 * `--stagger`: half the requests in flight start one step late, so every batch holds for one half and
 * settles for the other (a gateway's turns under load), not holds only and then settles only.
 * Debian's redis-server is stripped: functions are grouped by name (its dynamic symbols), and a static
 * function callgrind shows as an address is put in the Lua VM when it lies in the vendored Lua's address
 * range, else with the exported function before it (same object file: an approximation). A binary with
 * debug info is grouped by source file instead. valgrind slows Redis ~50×; a run of 4,000 requests
 * still takes under a minute.
 */
import { execFileSync } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, readFileSync, realpathSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { Redis } from 'ioredis';
import type { Store } from '../src/store/types.ts';
import { describeRef, shortHead } from './git.ts';
import { liveRequest } from './live-request.ts';
import { freePort, startCallgrindRedis } from './procs.ts';
import { commandStats } from './redis-stats.ts';

const { values } = parseArgs({
  options: {
    ref: { type: 'string', multiple: true, default: ['.'] },
    n: { type: 'string', default: '4000' },
    warmup: { type: 'string', default: '600' },
    rate: { type: 'string', default: '2500' },
    'in-flight': { type: 'string', default: '1,4,16,64' },
    out: { type: 'string' },
    keep: { type: 'boolean', default: false },
    'redis-config': { type: 'string', multiple: true, default: [] },
    stagger: { type: 'boolean', default: false },
    leases: { type: 'boolean', default: false },
    packed: { type: 'boolean', default: false },
  },
});
const N = Number(values.n);
const WARM = Number(values.warmup);
const RATE = Number(values.rate);
const LEVELS = values['in-flight'].split(',').map(Number);
const STAGGER = values.stagger;
/** redis-server's own arguments for each `--redis-config 'name value'`: `--name value`. */
const REDIS_CONFIG = values['redis-config'].flatMap((c) => {
  const [name, ...value] = c.trim().split(/\s+/);
  if (!name || value.length === 0) throw new Error(`--redis-config wants 'name value', got '${c}'`);
  return [`--${name}`, ...value];
});
const t0 = Date.now();
const sh = (cmd: string, args: string[]) => execFileSync(cmd, args, { encoding: 'utf8', maxBuffer: 1 << 28 });
const dir = mkdtempSync(join(tmpdir(), 'redis-instr-'));

/** A ref's src/ in a directory of its own (the working tree's copied, so edits during the run do not count). */
function srcOf(ref: string): { src: string; label: string } {
  const { sha, label } = describeRef(ref === '.' ? undefined : ref);
  const root = join(dir, sha ?? 'worktree');
  mkdirSync(root);
  if (ref === '.') cpSync('src', join(root, 'src'), { recursive: true });
  else execFileSync('sh', ['-c', 'git archive --format=tar "$1" src | tar -x -C "$2"', 'sh', sha ?? ref, root]);
  symlinkSync(resolve('node_modules'), join(root, 'node_modules'));
  return { src: join(root, 'src'), label: ref === '.' ? `. = ${label}` : label };
}

// ---- where an instruction goes -------------------------------------------------------------------
const GROUPS = ['Lua VM', 'script glue', 'commands & data', 'dispatch', 'networking', 'allocator', 'libc', 'other'] as const;
type Group = (typeof GROUPS)[number];
const GROUP_NOTES: Record<Group, string> = {
  'Lua VM': 'deps/lua and its libraries (cjson, cmsgpack, bit, struct): lua_*, luaL_*, luaV_*, luaH_*, luaS_*…',
  'script glue': "eval.c, script.c, script_lua.c, call_reply.c: EVALSHA's lookup, KEYS/ARGV to Lua, redis.call, replies to and from Lua",
  'commands & data': 't_hash, t_stream, t_string, listpack, rax, dict, db, object, notify, util conversions',
  dispatch: 'server.c: processCommand, call, command lookup and stats',
  networking: 'networking.c, ae.c, anet.c, connection.c and the user side of socket syscalls (query parsing, reply buffers, writes)',
  allocator: 'jemalloc, zmalloc',
  libc: 'memcpy, memset, strtod, snprintf… (kernel time of syscalls is not counted)',
  other: 'sds, the rest',
};
const LUA = /^(lua[A-Z]?_|luaopen_|mp_|strbuf_|fpconv_|memrevifle$|table_is_an_array$|(json|struct|bit)_)/;
const BY_FILE: [RegExp, Group][] = [
  [/deps\/lua\//, 'Lua VM'],
  [/\/(eval|script|script_lua|call_reply|resp_parser|function_lua|functions)\.c$/, 'script glue'],
  [/\/(t_\w+|listpack|rax|dict|db|object|notify|util|siphash|quicklist|intset|ziplist|expire|lazyfree|keyspace)\.c$/, 'commands & data'],
  [/\/(server|commands|acl|latency|slowlog|multi|tracking)\.c$/, 'dispatch'],
  [/\/(networking|ae|ae_epoll|anet|connection|socket|timeout)\.c$/, 'networking'],
  [/\/(zmalloc\.c|jemalloc)/, 'allocator'],
];
const BY_NAME: [RegExp, Group][] = [
  [LUA, 'Lua VM'],
  [/^(lua[A-Z]|ldb|eval|script|freeLuaRedisArgv|callReply|parseReply|resp|redisProtocolToLua|fcall|function)/, 'script glue'],
  [/^z(try)?(malloc|calloc|realloc|free|strdup)|^zmalloc|^zfree|^extend_to_usable/, 'allocator'],
  [
    /^(readQuery|processInput|processMultibulk|processInline|_?addReply|setDeferred|prepareClientToWrite|clientHasPendingReplies|_?writeToClient|writevToClient|handleClients|conn[A-Z]|anet|ae[A-Z]|beforeSleep|afterSleep|resetClient|freeClientArgv|commandProcessed|clientInstallWriteHandler|putClientInPendingWriteQueue|trimClientQueryBuffer|postExecutionUnitOperations|callHandler|connSocket|clientsCron|IOThread|handleBlockedClients|processEventsWhileBlocked|checkClientPauseTimeoutAndReturnIfPaused|whileBlockedCron|getClientType|resetReusableQueryBuf)/,
    'networking',
  ],
  [
    /^(call|processCommand|lookupCommand|propagate|alsoPropagate|updateCommandLatency|commandCheck|blockedBeforeSleep|ACL|trackingHandle|mustObeyClient|isInsideYieldingLongCommand|updateCachedTime|getMonotonicUs|monotonic|ustime|mstime)/,
    'dispatch',
  ],
  [
    /^(h[a-z]+Command|hashType|x[a-z]+Command|stream|rax|lp[A-Z]|listpack|dict|lookupKey|db[A-Z]|setKey|signalModifiedKey|notifyKeyspaceEvent|keyspaceEvent|createObject|create\w*StringObject|decrRefCount|incrRefCount|tryObjectEncoding|getLongLong|getLongDouble|getDouble|string2|ll2string|ull2string|d2string|ld2string|siphash|keyHashSlot|getExpire|setExpire|removeExpire|expireIfNeeded|keyIsExpired|checkType|objectSetLRUOrLFU|getDecodedObject|equalStringObjects|compareStringObjects|digits10|sdigits10|stringObjectLen|[a-z]+Command$)/,
    'commands & data',
  ],
];
const libcSyscall = /^(__libc_|__GI_)?(read|write|writev|recv|send|epoll_wait|epoll_ctl|accept4?)$/;

interface Sym {
  addr: number;
  size: number;
  name: string;
}
/** The binary's dynamic function symbols by address, and the vendored Lua's address range. */
function symbolTable(bin: string): { syms: Sym[]; lua: [number, number] } {
  const syms = sh('nm', ['-D', '-S', '--defined-only', bin])
    .split('\n')
    .map((l) => l.trim().split(/\s+/))
    .filter((f) => f.length === 4 && /^[TtWi]$/.test(f[2]!))
    .map((f) => ({ addr: parseInt(f[0]!, 16), size: parseInt(f[1]!, 16), name: f[3]! }))
    .sort((a, b) => a.addr - b.addr);
  const first = syms.findIndex((s) => LUA.test(s.name));
  const last = syms.findLastIndex((s) => LUA.test(s.name));
  const before = syms[first - 1];
  return {
    syms,
    lua: first < 0 ? [0, 0] : [before ? before.addr + before.size : 0, syms[last + 1]?.addr ?? Infinity],
  };
}

interface Fn {
  name: string;
  file: string;
  obj: string;
  self: number;
  calls: number;
  callers: { name: string; obj: string; ir: number }[];
  group: Group;
}

/**
 * Per function: self instructions, calls and callers, read from the callgrind file itself (callgrind_annotate
 * --inclusive=no adds the inclusive cost of a call made before `--zero`, `calls=0`, to the caller's own).
 */
function annotate(file: string, redisBin: string): { total: number; fns: Fn[]; stripped: boolean } {
  const { syms, lua } = symbolTable(redisBin);
  const names = { ob: new Map<string, string>(), fl: new Map<string, string>(), fn: new Map<string, string>() };
  const kindOf: Record<string, keyof typeof names> = {
    ob: 'ob',
    cob: 'ob',
    fl: 'fl',
    fi: 'fl',
    fe: 'fl',
    cfi: 'fl',
    cfl: 'fl',
    fn: 'fn',
    cfn: 'fn',
  };
  const cur: Record<string, string> = {};
  const byKey = new Map<string, Fn>();
  const fnOf = (obj: string, name: string, src: string) => {
    name = name.replace(/'\d+$/, '');
    const key = `${obj}\0${name}`;
    let f = byKey.get(key);
    if (!f) byKey.set(key, (f = { name, file: src, obj, self: 0, calls: 0, callers: [], group: 'other' }));
    return f;
  };
  let total = 0;
  let totals = 0;
  let call: { to: Fn; count: number } | undefined;
  for (const l of readFileSync(file, 'utf8').split('\n')) {
    const spec = /^(c?ob|fl|fi|fe|cfi|cfl|c?fn)=(?:\((\d+)\))? ?(.*)$/.exec(l);
    if (spec) {
      const [, k, id, text] = spec as unknown as [string, string, string | undefined, string];
      const map = names[kindOf[k]!];
      if (id !== undefined && text) map.set(id, text);
      cur[k === 'cfl' ? 'cfi' : k] = id !== undefined ? map.get(id)! : text;
      if (k === 'fn') ((cur.cob = cur.ob!), (cur.cfi = cur.fl!));
      continue;
    }
    if (l.startsWith('totals:')) totals = Number(l.slice(7));
    const calls = /^calls=(\d+)/.exec(l);
    if (calls) {
      call = { to: fnOf(cur.cob ?? cur.ob!, cur.cfn!, cur.cfi ?? cur.fl!), count: Number(calls[1]) };
      continue;
    }
    const cost = /^[-+*\d]\S* (\d+)/.exec(l);
    if (cost) {
      const ir = Number(cost[1]);
      const me = fnOf(cur.ob!, cur.fn!, cur.fl!);
      if (call) {
        call.to.calls += call.count;
        const edge = call.to.callers.find((c) => c.name === me.name && c.obj === me.obj);
        if (edge) edge.ir += ir;
        else call.to.callers.push({ name: me.name, obj: me.obj, ir });
        ((call = undefined), (cur.cob = cur.ob!), (cur.cfi = cur.fl!));
      } else {
        me.self += ir;
        total += ir;
      }
    }
  }
  const fns = [...byKey.values()];
  for (const f of fns) f.callers.sort((a, b) => b.ir - a.ir);
  if (Math.abs(totals - total) > totals / 1000) console.error(`warning: functions add up to ${total} of ${totals} instructions`);
  const stripped = !fns.some((f) => f.obj === redisBin && f.file !== '???');
  const isRedis = (obj: string) => obj === redisBin;
  /** For a static function's address in redis-server: 'Lua', or the exported function before it. */
  const nearest = (name: string) => {
    if (!/^0x[0-9a-f]+$/.test(name)) return name;
    const addr = parseInt(name, 16);
    if (addr >= lua[0] && addr < lua[1]) return 'Lua';
    return syms.findLast((s) => s.addr <= addr)?.name ?? '?';
  };
  for (const f of fns) {
    f.group = ((): Group => {
      if (/jemalloc/.test(f.obj)) return 'allocator';
      if (/\/libc\.so/.test(f.obj)) return libcSyscall.test(f.name) ? 'networking' : 'libc';
      if (!isRedis(f.obj)) return 'other';
      if (f.file !== '???') return BY_FILE.find(([re]) => re.test(f.file))?.[1] ?? 'other';
      const near = nearest(f.name);
      if (near !== f.name) f.name = `${f.name} (${near === 'Lua' ? 'Lua' : `after ${near}`})`;
      return near === 'Lua' ? 'Lua VM' : (BY_NAME.find(([re]) => re.test(near))?.[1] ?? 'other');
    })();
    for (const c of f.callers) {
      const near = isRedis(c.obj) ? nearest(c.name) : c.name;
      if (near !== c.name) c.name = `${c.name} (${near === 'Lua' ? 'Lua' : `after ${near}`})`;
    }
  }
  return { total, fns, stripped };
}

// ---- one run: a ref's store on a callgrind'ed redis-server -----------------------------------------
interface Run {
  label: string;
  inFlight: number;
  irPerReq: number;
  groups: Record<Group, number>;
  scriptCallsPerReq: number;
  otherCommands: string;
  readsPerReq: number;
  writesPerReq: number;
  top: Fn[];
  stripped: boolean;
  /** The server's hash-max-listpack-entries: a hold bucket up to this many fields is a listpack. */
  listpackEntries: number;
}

async function measure(src: string, label: string, inFlight: number, redisBin: string, leases: boolean, packed: boolean): Promise<Run> {
  const out = join(dir, `callgrind-${label.slice(0, 7).replace(/\W/g, '')}-${inFlight}.out`);
  const port = await freePort();
  const server = await startCallgrindRedis(port, out, `${out}.log`, REDIS_CONFIG);
  const url = `redis://127.0.0.1:${port}`;
  const admin = new Redis(url);
  const mod = (await import(resolve(src, 'store/redis-store.ts'))) as typeof import('../src/store/redis-store.ts');
  // The gateway's defaults: a 660 s hold TTL, 10 s hold buckets (hold-bucket.ts bucketMsFor).
  const [holdTtlMs, bucketMs] = [660_000, 10_000];
  const store: Store = await mod.createRedisStore({
    url,
    commandTimeoutMs: 120_000,
    settledTtlSeconds: 4260,
    holdTtlMs,
    bucketMs,
    leases,
    ...(packed && { debitEntries: 'packed' as const }),
  });
  const ACCT = 'bench';
  await store.grant(ACCT, 1e15, 'bench-grant', undefined, new Date().toISOString());
  // As bench/ledger-redis.ts: the hold's expiry as the gateway sets it (now + the TTL), a settle with a full
  // ledger entry; but "now" is a clock that advances 1/RATE s per request from just after a bucket's start,
  // so how many holds share a bucket depends on RATE, not on how fast Redis runs under valgrind: a bucket's
  // first fields, up to hash-max-listpack-entries (512 by default), are a listpack, searched field by
  // field, then it is a hashtable.
  const listpackEntries = Number(((await admin.config('GET', 'hash-max-listpack-entries')) as string[])[1]);
  const t0 = Math.ceil(Date.now() / bucketMs) * bucketMs + 1;
  let seq = 0;
  const pair = () => {
    const now = t0 + Math.floor((seq * 1000) / RATE);
    return liveRequest(store, ACCT, `req_${String(seq++).padStart(22, '0')}`, now, holdTtlMs);
  };
  const run = async (count: number) => {
    let left = count;
    await Promise.all(
      Array.from({ length: inFlight }, async (_, i) => {
        // --stagger: every other request starts one step late (a hold of 0 in the first batch, not counted
        // as a request; its one batch is in the count), so each turn carries one half's holds and the other half's settles, as a gateway's
        // turns under load do, instead of all holds, then all settles.
        if (STAGGER && i % 2 === 1) await store.hold(ACCT, `stagger_${seq}_${i}`, 0, t0 + holdTtlMs);
        while (left-- > 0) await pair();
      }),
    );
  };
  const ctl = (...x: string[]) => execFileSync('callgrind_control', [...x, String(server.pid)], { timeout: 300_000 });
  try {
    await run(WARM);
    await admin.config('RESETSTAT');
    ctl('--zero');
    await run(N);
    ctl('--dump=requests');
    const stats = commandStats(await admin.info('commandstats'));
    const calls = (c: string) => stats.get(c)?.calls ?? 0;
    const { total, fns, stripped } = annotate(`${out}.1`, redisBin);
    const groups = Object.fromEntries(GROUPS.map((g) => [g, 0])) as Record<Group, number>;
    for (const f of fns) groups[f.group] += f.self / N;
    if (fns.some((f) => f.name === 'serverCron' && f.calls > 0)) console.error('warning: serverCron was counted');
    const callsOf = (re: RegExp) => fns.filter((f) => re.test(f.name)).reduce((s, f) => s + f.calls, 0) / N;
    return {
      label,
      inFlight,
      irPerReq: total / N,
      groups,
      scriptCallsPerReq: (calls('evalsha') + calls('eval')) / N,
      otherCommands: [...stats]
        .filter(([c]) => !/^(evalsha|eval|config|info)$/.test(c))
        .map(([c, s]) => `${c} ${s.calls}`)
        .join(', '),
      readsPerReq: callsOf(/^readQueryFromClient$/),
      writesPerReq: callsOf(/^writeToClient$/),
      top: fns.sort((a, b) => b.self - a.self).slice(0, 15),
      stripped,
      listpackEntries,
    };
  } finally {
    await store.close();
    admin.disconnect();
    await server.stop(120_000);
  }
}

// ---- all refs × levels, then the report ------------------------------------------------------------
const redisBin = realpathSync(sh('sh', ['-c', 'command -v redis-server']).trim());
const runs: Run[] = [];
try {
  const trees = values.ref.flatMap((ref) => {
    const leases = values.leases && ref === '.';
    const tree = srcOf(ref);
    const one = { ...tree, label: leases ? `${tree.label}, leases` : tree.label, leases, packed: false };
    return leases && values.packed ? [one, { ...one, label: `${one.label}, packed`, packed: true }] : [one];
  });
  for (const inFlight of LEVELS) {
    for (const { src, label, leases, packed } of trees) {
      const r = await measure(src, label, inFlight, redisBin, leases, packed);
      console.error(`${label} @${inFlight}: ${Math.round(r.irPerReq)} Ir/request, ${r.scriptCallsPerReq.toFixed(3)} script calls/request`);
      runs.push(r);
    }
  }
} finally {
  if (values.keep) console.error(`kept ${dir}`);
  else rmSync(dir, { recursive: true, force: true });
}

const k = (x: number) => (x / 1000).toFixed(1);
const LP = runs[0]?.listpackEntries ?? 512;
const labels = [...new Set(runs.map((r) => r.label))];
const L: string[] = [
  '# redis-server instructions per live request (hold + settle), by callgrind',
  '',
  `\`node bench/redis-instructions.ts ${process.argv.slice(2).join(' ')}\``,
  '',
  `${new Date().toISOString()} · HEAD \`${shortHead()}\` · ${sh('redis-server', ['--version']).split(' ').slice(0, 3).join(' ')} · ${sh('valgrind', ['--version']).trim()} · N = ${N} requests (after ${WARM} warm-up) on one account per run · the tool took ${((Date.now() - t0) / 60_000).toFixed(1)} min`,
  '',
  'Trees:',
  ...labels.map(
    (l, i) => `- ${String.fromCharCode(65 + i)}: ${l}${l.startsWith('. =') ? ' (the working tree as copied when the tool started)' : ''}`,
  ),
  '',
  "Thousands of instructions (kIr) per request executed by redis-server, user space only (the kernel's side of",
  'its syscalls is not counted), serverCron left out (`--toggle-collect=serverCron`). Script calls: EVALSHA + EVAL',
  'per request from `INFO commandstats` (2 = a hold and a settle call each; fewer = batches; mean batch = 2 / that); reads and writes: calls',
  "of readQueryFromClient and writeToClient per request. Hold TTL 660 s and 10 s hold buckets (the gateway's defaults); the",
  `holds' clock advances as at ${RATE} requests/s (\`--rate\`) whatever the speed under valgrind, so a bucket gets ${RATE * 10} holds:`,
  `its first ${LP} are a listpack, searched field by field (\`hash-max-listpack-entries\`${REDIS_CONFIG.length > 0 ? `; server settings: \`${values['redis-config'].join('`, `')}\`` : ''}), then a hashtable.` +
    (RATE * 10 <= LP
      ? ' A bucket never leaves the listpack at this rate.'
      : WARM >= LP
        ? ' The warm-up covers them: the counted requests find a hashtable.'
        : ` With ${WARM} warm-up requests, ${LP - WARM} counted ones find the listpack.`),
  runs[0]?.stripped
    ? "redis-server is stripped: functions are grouped by name, and a static function (an address) goes to the Lua VM in the vendored Lua's address range, else with the exported function before it (an approximation)."
    : 'Grouped by source file (debug info).',
  '',
  `| in flight | tree | kIr / request | script calls / request | mean batch | reads / request | writes / request | ${GROUPS.join(' | ')} |`,
  `|--:|---|--:|--:|--:|--:|--:|${GROUPS.map(() => '--:').join('|')}|`,
  ...runs.map(
    (r) =>
      `| ${r.inFlight} | ${String.fromCharCode(65 + labels.indexOf(r.label))} | **${k(r.irPerReq)}** | ${r.scriptCallsPerReq.toFixed(3)} | ${(2 / r.scriptCallsPerReq).toFixed(1)} | ${r.readsPerReq.toFixed(3)} | ${r.writesPerReq.toFixed(3)} | ${GROUPS.map((g) => k(r.groups[g])).join(' | ')} |`,
  ),
  '',
  'Groups: ' + GROUPS.map((g) => `**${g}**: ${GROUP_NOTES[g]}`).join('; ') + '.',
  '',
];
if (labels.length > 1) {
  L.push('Each tree against A (instructions per request, ratio):', '');
  for (const inFlight of LEVELS) {
    const base = runs.find((r) => r.inFlight === inFlight && r.label === labels[0])!;
    const rest = runs.filter((r) => r.inFlight === inFlight && r !== base);
    L.push(
      `- ${inFlight} in flight: ${rest.map((r) => `${String.fromCharCode(65 + labels.indexOf(r.label))} ${(r.irPerReq / base.irPerReq).toFixed(3)}`).join(', ')}`,
    );
  }
  L.push('');
}
// Fixed per script call vs per request: kIr/request = a + b · calls/request, least squares over the levels.
for (const label of labels) {
  const xs = runs.filter((r) => r.label === label);
  const mx = xs.reduce((s, r) => s + r.scriptCallsPerReq, 0) / xs.length;
  const my = xs.reduce((s, r) => s + r.irPerReq, 0) / xs.length;
  const sxx = xs.reduce((s, r) => s + (r.scriptCallsPerReq - mx) ** 2, 0);
  if (xs.length < 2 || sxx < 0.01) continue;
  const b = xs.reduce((s, r) => s + (r.scriptCallsPerReq - mx) * (r.irPerReq - my), 0) / sxx;
  const a = my - b * mx;
  const hi = xs.at(-1)!;
  L.push(
    `Fixed per script call vs per request, a least-squares line for ${String.fromCharCode(65 + labels.indexOf(label))} over the levels: kIr/request ≈ ${k(a)} per request + ${k(b)} per script call (with its reads, writes and wake-ups); at ${hi.inFlight} in flight the per-call part is ${k(b * hi.scriptCallsPerReq)} of ${k(hi.irPerReq)} (${((100 * b * hi.scriptCallsPerReq) / hi.irPerReq).toFixed(0)} %). A rough model: the line gives ${xs.map((r) => k(a + b * r.scriptCallsPerReq)).join(', ')} where ${xs.map((r) => k(r.irPerReq)).join(', ')} were measured (the per-request part itself depends on the batch size).`,
    '',
  );
}
for (const r of runs.filter((x) => x.inFlight === Math.max(...LEVELS))) {
  L.push(
    `## Top 15 functions (self), ${String.fromCharCode(65 + labels.indexOf(r.label))} at ${r.inFlight} in flight`,
    '',
    `Other commands Redis saw while counting: ${r.otherCommands || 'none'}.`,
    '',
    '| function | group | Ir / request | calls / request | top callers |',
    '|---|---|--:|--:|---|',
  );
  for (const f of r.top) {
    const callers = [...new Set(f.callers.map((c) => c.name))].slice(0, 2).join(', ');
    L.push(`| \`${f.name}\` | ${f.group} | ${Math.round(f.self / N)} | ${(f.calls / N).toFixed(2)} | ${callers} |`);
  }
  L.push('');
}
const text = L.join('\n');
console.log(text);
if (values.out) writeFileSync(values.out, text);
