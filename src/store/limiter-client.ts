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
 * `status` is the pipe's: RateLimiterRedis (with rejectIfRedisNotReady) sends calls to its in-memory
 * insurance limiter while it is not 'ready', as it did with ioredis' own status. A pipe timeout or
 * error rejects the call, which also falls back to the insurance limiter.
 */
import type { Redis } from 'ioredis';
import { luaScript, type ScriptPipe } from './script-pipe.ts';

type Args = (string | number)[];

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
