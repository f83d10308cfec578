// Token corrections on real Redis, two instances sharing the counters (two gateways): a correction rides
// on its key's next admission (one counter script instead of a second one), and one that no admission
// picks up is sent by itself within CORRECTION_FLUSH_MS, so the other instance sees it too.
import t from 'tap';
import { Writable } from 'node:stream';
import { Redis } from 'ioredis';
import { createRateLimits, CORRECTION_FLUSH_MS } from '../../src/limits/rate-limiter.ts';
import type { RequestContext } from '../../src/http/context.ts';
import type { KeyRecord } from '../../src/store/types.ts';
import type { Limits } from '../../src/limits/limits.ts';
import { createMetrics } from '../../src/obs/metrics.ts';
import { createLogger } from '../../src/obs/logger.ts';
import { startRedis } from '../helpers/redis.ts';
import { waitFor } from '../helpers/wait.ts';

const redis = await startRedis(t);

const key: KeyRecord = {
  id: 'key_corrections1',
  account: 'acme',
  env: 'test',
  name: 'unit',
  active: true,
  scopes: ['chat'],
  models: [],
  rate_limits: null,
  created_at: '2026-01-01T00:00:00.000Z',
  last4: 'abcd',
  version: 1,
};

/** Counter scripts redis-server has run (RateLimiterRedis runs one per consume, reward or penalty). */
async function scriptCalls(client: Redis): Promise<number> {
  const info = await client.info('commandstats');
  let n = 0;
  for (const m of info.matchAll(/^cmdstat_(?:evalsha|eval):calls=(\d+)/gm)) n += Number(m[1]);
  return n;
}

if (redis) {
  const instance = async (t: { teardown(fn: () => unknown): void }): Promise<Limits> => {
    const client = new Redis(redis.url);
    // Not ready yet, rate-limiter-flexible would count in its in-memory insurance limiter instead.
    await client.ping();
    const limits = createRateLimits({
      windowSeconds: 60,
      test: { requestsPerMinute: undefined, tokensPerMinute: 1000 },
      live: { requestsPerMinute: undefined, tokensPerMinute: undefined },
      redis: client,
      metrics: createMetrics({ defaults: false }),
      logger: createLogger('silent', new Writable({ write: (_c, _e, cb) => cb() })),
    });
    t.teardown(async () => {
      await limits.close?.();
      client.disconnect();
    });
    return limits;
  };
  const remaining = async (limits: Limits, estimate?: number) => {
    const ctx = { key, extraHeaders: undefined, log: {} } as unknown as RequestContext;
    const admission = await limits.admit(ctx, estimate);
    return { admission, remaining: Number(ctx.extraHeaders!['x-ratelimit-remaining-tokens']) };
  };

  t.test('the next admission carries the correction: its headers include it, and no separate script runs', async (t) => {
    await redis.client.del('tg:rl:tok:key_corrections1');
    const a = await instance(t);
    const first = await remaining(a, 300);
    t.equal(first.remaining, 700);
    await redis.client.config('RESETSTAT');
    first.admission.settle(40);
    const second = await remaining(a, 100);
    t.equal(second.remaining, 860, '1000 - 40 used - 100 estimated');
    second.admission.settle(100);
    await new Promise((r) => setTimeout(r, CORRECTION_FLUSH_MS * 3));
    t.equal(await scriptCalls(redis.client), 1, 'one script: the second consume, the first correction inside it');
  });

  t.test('a correction no admission picks up is sent alone, and another instance sees it', async (t) => {
    await redis.client.del('tg:rl:tok:key_corrections1');
    const a = await instance(t);
    const b = await instance(t);
    const first = await remaining(a, 300);
    t.equal((await remaining(b)).remaining, 700, 'b sees the estimate');
    first.admission.settle(40);
    await waitFor(async () => (await remaining(b)).remaining === 960, 2000, "a's correction reaching b");
    t.pass('b sees the real 40 without any further request on a');
  });

  t.test('close sends what is queued', async (t) => {
    await redis.client.del('tg:rl:tok:key_corrections1');
    const a = await instance(t);
    const first = await remaining(a, 500);
    first.admission.settle(0);
    await a.close!();
    t.equal(Number(await redis.client.get('tg:rl:tok:key_corrections1')), 0, 'the estimate of 500 given back');
  });
}
