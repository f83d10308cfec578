/**
 * The Redis client handed to rate-limiter-flexible on a single node. Every consume, reward and penalty
 * of RateLimiterRedis runs one script, `rlflxIncr` (its own Lua, registered through `defineCommand`);
 * a test-key chat request runs it three times. Through ioredis each run costs a Command, a timeout timer
 * and an autopipeline batch; through the pipe the test key's gateway CPU went from ~230 to ~130 µs per
 * request (alternating runs, `bench/README.md`), and the script shares the pipe's writes with holds and
 * settles. The rest of what the library may ask for (`multi` for get() and forced expiries, `del`) is
 * rare and stays on ioredis.
 *
 * `status` is the pipe's: RateLimiterRedis (with rejectIfRedisNotReady) sends calls to its in-memory
 * insurance limiter while it is not 'ready', as it did with ioredis' own status. A pipe timeout or
 * error rejects the call, which also falls back to the insurance limiter.
 */
import type { Redis } from 'ioredis';
import { luaScript, type ScriptPipe } from './script-pipe.ts';

type Args = (string | number)[];

export interface LimiterClient {
  readonly status: 'ready' | 'reconnecting';
  defineCommand(name: string, def: { numberOfKeys: number; lua: string }): void;
  multi: Redis['multi'];
  del: Redis['del'];
  [command: string]: unknown;
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
    multi: redis.multi.bind(redis) as Redis['multi'],
    del: redis.del.bind(redis) as Redis['del'],
  };
  return client;
}
