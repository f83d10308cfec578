// The rate limiter's counter script (store/limiter-client.ts INCR_TTL_LUA, two commands where the library's own
// takes three) against rate-limiter-flexible's, on a real redis-server: the same replies, counts and
// expiries for any run of consumes and rewards, fresh counters included; and the limiter really sends ours.
import { createHash } from 'node:crypto';
import { Writable } from 'node:stream';
import t from 'tap';
import { RateLimiterRedis } from 'rate-limiter-flexible';
import { createRateLimits } from '../../src/limits/rate-limiter.ts';
import { INCR_TTL_LUA } from '../../src/store/limiter-client.ts';
import type { RequestContext } from '../../src/http/context.ts';
import { createLogger } from '../../src/obs/logger.ts';
import { createMetrics } from '../../src/obs/metrics.ts';
import { startRedis } from '../helpers/redis.ts';

const redis = await startRedis(t);
if (redis) {
  const r = redis.client;
  // The library's script, as it hands it to defineCommand when no custom one is given.
  let libraryLua = '';
  new RateLimiterRedis({
    storeClient: { defineCommand: (_name: string, def: { lua: string }) => void (libraryLua = def.lua) },
    points: 10,
    duration: 60,
  });
  t.ok(libraryLua.includes("redis.call('set'"), "the library's script creates a counter with SET … NX");
  const sha = (lua: string) => createHash('sha1').update(lua).digest('hex');

  t.test('the same replies, counts and expiries as the library script', async (t) => {
    await r.flushdb();
    let seed = 7;
    const rnd = () => ((seed = (seed * 1103515245 + 12345) % 2147483648), seed / 2147483648);
    for (let i = 0; i < 300; i++) {
      const counter = `c${Math.floor(rnd() * 12)}`;
      const points = String(Math.floor(rnd() * 40) - 10); // rewards (negative) too, as token corrections send
      const window = String(1 + Math.floor(rnd() * 120));
      if (rnd() < 0.05) await r.del(`lib:${counter}`, `ours:${counter}`); // a window that ended
      const lib = (await r.eval(libraryLua, 1, `lib:${counter}`, points, window, '1099511627776', '60')) as [number, number];
      const ours = (await r.eval(INCR_TTL_LUA, 1, `ours:${counter}`, points, window, '1099511627776', '60')) as [number, number];
      t.equal(ours[0], lib[0], `call ${i}: the same count`);
      t.ok(Math.abs(ours[1] - lib[1]) <= 50, `call ${i}: the same time left (${ours[1]} vs ${lib[1]} ms)`);
      t.equal(await r.get(`ours:${counter}`), await r.get(`lib:${counter}`), `call ${i}: the same stored value`);
      t.ok((await r.pttl(`ours:${counter}`)) > 0, `call ${i}: the counter always has an expiry`);
    }
  });

  t.test('the limiter sends this script, not the library one', async (t) => {
    await r.script('FLUSH');
    const limits = createRateLimits({
      windowSeconds: 60,
      test: { requestsPerMinute: 5, tokensPerMinute: 1000 },
      live: { requestsPerMinute: undefined, tokensPerMinute: undefined },
      redis: r,
      metrics: createMetrics({ defaults: false }),
      logger: createLogger('fatal', new Writable({ write: (_c, _e, cb) => cb() })),
    });
    const key = { id: 'key_incr', account: 'acme', env: 'test', rate_limits: null };
    const ctx = { key, extraHeaders: undefined, log: {} } as unknown as RequestContext;
    await limits.admit(ctx, 10);
    t.strictSame(await r.script('EXISTS', sha(INCR_TTL_LUA), sha(libraryLua)), [1, 0]);
    t.equal(ctx.extraHeaders?.['x-ratelimit-remaining-requests'], '4', 'and counts with it');
  });
}
