/**
 * The Redis client handed to rate-limiter-flexible on a single node. Every consume, reward and penalty
 * of RateLimiterRedis runs one script, `rlflxIncr` (its own Lua, registered through `defineCommand`);
 * a test-key chat request runs it twice under load (its token correction rides on the next consume:
 * limits/rate-limiter.ts), three times when the correction goes alone. Through ioredis each run costs a Command, a timeout timer
 * and an autopipeline batch; through the pipe it is one string and shares the pipe's writes with holds
 * and settles (the test key's CPU per request, either way: `bench/results/latest.md`). get() (a MULTI of GET and PTTL: every non-chat request of a key with a token limit) runs one
 * script on the pipe too, so readiness and the calls that depend on it share one connection. What is
 * left (forced expiries, `del`) is rare and stays on ioredis.
 *
 * Calls of INCR_TTL_LUA (the limiter's counter script) on one counter in one event-loop turn are summed
 * into one script run (`sumCounterCalls`): the run's reply, the count after all of them, is handed back to
 * each as the count after its own, what the calls one after another would have answered. Under load a
 * test key's requests of one turn cost its counter one run per phase instead of one each
 * (bench/results/limiter-turns.md).
 *
 * `status` is the pipe's: RateLimiterRedis (with rejectIfRedisNotReady) sends calls to its in-memory
 * insurance limiter while it is not 'ready', as it did with ioredis' own status. A pipe timeout or
 * error rejects the call, which also falls back to the insurance limiter.
 */
import type { Redis } from 'ioredis';
import { luaScript, type LuaScript, type ScriptPipe } from './script-pipe.ts';

type Args = (string | number)[];

/**
 * Each counter call's script (rate-limiter-flexible's `customIncrTtlLuaScript`, limits/rate-limiter.ts): the
 * library's own, without its first command. The library creates a missing counter with `SET k 0 EX <window>
 * NX` before its `INCRBY`; here `INCRBY` creates it and the expiry is set when `PTTL` finds none, which the
 * library's script does too. Same counts, same expiries, same reply; two commands instead of three on a
 * counter that exists (every call but a window's first): 0.81× the redis-server instructions per call by
 * callgrind (`node bench/limiter-script.ts`, `bench/results/limiter-script.md`). Its reply depends on the
 * points only through INCRBY, so calls of one counter can be summed into one run (sumCounterCalls).
 */
export const INCR_TTL_LUA = `local consumed = redis.call('incrby', KEYS[1], ARGV[1])
local ttl = redis.call('pttl', KEYS[1])
if ttl == -1 then
  redis.call('expire', KEYS[1], ARGV[2])
  ttl = 1000 * ARGV[2]
end
return {consumed, ttl}`;

/** One counter's calls of this turn: their points' total and each caller, in the order they came. */
interface CounterTurn {
  key: string;
  /** The script's other arguments (window, the library's cap and duration), the same for every call summed. */
  rest: Args;
  total: number;
  calls: { points: number; resolve(r: unknown): void; reject(e: unknown): void }[];
}

/**
 * Returns the counter script's caller for the pipe: a call joins this turn's run of its counter and is
 * answered with `[count after it, ttl]`. Calls of n counters in a turn are n runs in the turn's one write.
 * A run that fails fails each of its calls, as their own runs would have (the limiter then falls back to
 * its insurance limiter for each). The calls of a turn reach Redis just before the turn's write, after
 * any other command of the turn that was issued earlier: a get() of the same counter in the same turn
 * reads it without them (another instance's calls can come between them anyway).
 */
function sumCounterCalls(pipe: ScriptPipe, script: LuaScript): (args: Args) => Promise<unknown> {
  let turn = new Map<string, CounterTurn>();
  let scheduled = false;
  const runOne = (c: CounterTurn) => {
    const run = pipe.run(script, [c.key], [String(c.total), ...c.rest]);
    if (c.calls.length === 1) {
      const w = c.calls[0]!;
      run.then(w.resolve, w.reject);
      return;
    }
    run.then(
      (reply) => {
        const [count, ttl] = reply as [number, number];
        // The count before this turn's calls, then each call's own points on top, in order.
        let at = count - c.total;
        for (const w of c.calls) {
          at += w.points;
          w.resolve([at, ttl]);
        }
      },
      (err: unknown) => {
        for (const w of c.calls) w.reject(err);
      },
    );
  };
  const flush = () => {
    scheduled = false;
    const counters = turn;
    turn = new Map();
    for (const c of counters.values()) runOne(c);
  };
  return (args) => {
    const key = String(args[0]);
    const points = Number(args[1]);
    const rest = args.slice(2);
    let c = turn.get(key);
    // Integer points only (the library sends nothing else), and the same window for every call summed.
    if (!Number.isSafeInteger(points) || (c && (c.rest.length !== rest.length || c.rest.some((v, i) => String(v) !== String(rest[i]))))) {
      return pipe.run(script, [key], args.slice(1));
    }
    if (!c) {
      c = { key, rest, total: 0, calls: [] };
      turn.set(key, c);
    }
    c.total += points;
    if (!scheduled) {
      scheduled = true;
      pipe.beforeWrite(flush);
    }
    const into = c;
    return new Promise((resolve, reject) => into.calls.push({ points, resolve, reject }));
  };
}

/** The commands RateLimiterRedis chains on `multi()`; exec() answers like ioredis: `[[err, value], …]`. */
export interface LimiterMulti {
  get(key: string): LimiterMulti;
  pttl(key: string): LimiterMulti;
  set(...args: (string | number)[]): LimiterMulti;
  incrby(key: string, n: number | string): LimiterMulti;
  exec(...ignored: unknown[]): Promise<[Error | null, unknown][] | null>;
}

export interface LimiterClient {
  readonly status: 'ready' | 'reconnecting';
  defineCommand(name: string, def: { numberOfKeys: number; lua: string }): void;
  multi(): LimiterMulti;
  del: Redis['del'];
  [command: string]: unknown;
}

/** get()'s read in one script: `false` keeps a missing key's nil in the reply array (a Lua nil would end it). */
const GET_PTTL = luaScript("return {redis.call('GET', KEYS[1]) or false, redis.call('PTTL', KEYS[1])}");

type Op = [name: 'get' | 'pttl' | 'set' | 'incrby', args: (string | number)[]];

/** GET k + PTTL k goes through the pipe as one script; any other chain is replayed on an ioredis MULTI. */
function multiOn(redis: Redis, pipe: ScriptPipe): LimiterMulti {
  const ops: Op[] = [];
  const m: LimiterMulti = {
    get: (key) => (ops.push(['get', [key]]), m),
    pttl: (key) => (ops.push(['pttl', [key]]), m),
    set: (...args) => (ops.push(['set', args]), m),
    incrby: (key, n) => (ops.push(['incrby', [key, n]]), m),
    async exec() {
      const [a, b] = ops;
      if (ops.length === 2 && a![0] === 'get' && b![0] === 'pttl' && a![1][0] === b![1][0]) {
        const [value, ttl] = (await pipe.run(GET_PTTL, [String(a![1][0])], [])) as [string | null, number];
        return [
          [null, value],
          [null, ttl],
        ];
      }
      const multi = redis.multi();
      for (const [name, args] of ops) multi.call(name, ...args);
      return multi.exec();
    },
  };
  return m;
}

export function limiterClient(redis: Redis, pipe: ScriptPipe): LimiterClient {
  const client: LimiterClient = {
    get status() {
      return pipe.connected ? 'ready' : 'reconnecting';
    },
    defineCommand(name, def) {
      const script = luaScript(def.lua);
      const n = def.numberOfKeys;
      if (def.lua === INCR_TTL_LUA && n === 1) {
        const sum = sumCounterCalls(pipe, script);
        client[name] = (...a: (Args | string | number)[]) => sum((a.length === 1 && Array.isArray(a[0]) ? a[0] : a) as Args);
        return;
      }
      // ioredis accepts the arguments spread or as one array; RateLimiterRedis passes one array.
      client[name] = (...a: (Args | string | number)[]) => {
        const args = (a.length === 1 && Array.isArray(a[0]) ? a[0] : a) as Args;
        return pipe.run(script, args.slice(0, n) as string[], args.slice(n));
      };
    },
    multi: () => multiOn(redis, pipe),
    del: redis.del.bind(redis) as Redis['del'],
  };
  return client;
}
