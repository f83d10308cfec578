// Redis outage (SPEC §1.5, §5): while Redis is down every instance keeps enforcing the limits on its own
// in-memory counters (rate-limiter-flexible's insurance limiter), fast, with the fallback gauge at 1 and
// a log line; when Redis returns (empty) the shared counters take over again and the gauge drops to 0.
import t from 'tap';
import { startRedis } from '../helpers/redis.ts';
import { startGateway } from '../helpers/gateway.ts';
import { startSimulator } from '../../src/simulator/simulator.ts';
import { chat, metric, models, until, type Reply } from './limits-fixture.ts';

const N = 3;
// Long enough that the in-memory windows opened during the outage do not roll over mid-test; the
// cached key (auth.cache_ttl_ms 10 s, the maximum) must stay cached for the whole outage.
const WINDOW_S = 8;
const HANG_MS = 3000;
const redis = await startRedis(t, { restartable: true });
if (redis) {
  t.test('outage: per-instance limits, no hang, gauge and log; recovery to shared counters', async (t) => {
    const sim = await startSimulator();
    t.teardown(() => sim.close());
    const config = {
      store: { command_timeout_ms: 1000 },
      auth: { cache_ttl_ms: 10_000 },
      rate_limits: { window_seconds: WINDOW_S, test: { requests_per_minute: N, tokens_per_minute: 100_000 } },
    };
    const gw1 = await startGateway(t, { redisUrl: redis.url, upstreamUrl: sim.url, config });
    const gw2 = await startGateway(t, { redisUrl: redis.url, upstreamUrl: sim.url, config });
    const { key, id } = await gw1.createKey({ account: 'acme', env: 'test' });
    const gauge = (gw: typeof gw1) => metric(gw, 'tollgate_rate_limiter_fallback');
    const bounded = (r: Reply, what: string) => t.ok(r.ms < HANG_MS, `${what} answered in ${r.ms.toFixed(0)} ms (< ${HANG_MS})`);

    // Both instances cache the key while Redis is up (one request each: 2 of N in the shared window).
    t.equal((await models(gw1, key)).status, 200);
    t.equal((await models(gw2, key)).status, 200);
    t.equal(await redis.client.get(`tg:rl:req:${id}`), '2', 'shared counter before the outage');
    t.equal(await gauge(gw1), 0, 'gauge 0 while Redis is up');

    await redis.stop();

    // Instance 1: N passes from its own memory (the Redis count of 2 is out of reach), then 429.
    for (let i = 1; i <= N; i++) {
      const r = i === 2 ? await chat(gw1, key) : await models(gw1, key);
      t.equal(r.status, 200, `outage: instance 1 request ${i} of ${N} passes (${i === 2 ? 'chat' : 'models'})`);
      t.equal(r.headers.get('x-ratelimit-remaining-requests'), String(N - i), 'counted in memory');
      bounded(r, `instance 1 request ${i}`);
    }
    const refused = await models(gw1, key);
    t.equal(refused.status, 429, 'outage: instance 1 refuses request N+1');
    t.equal(refused.body?.error?.code, 'rate_limit_exceeded');
    const ra = Number(refused.headers.get('retry-after-ms'));
    t.ok(ra > 0 && ra <= WINDOW_S * 1000, `retry-after-ms ${ra} from the in-memory window`);
    bounded(refused, 'the 429');

    // Instance 2 has its own memory: N more pass there, then 429.
    for (let i = 1; i <= N; i++)
      t.equal((await models(gw2, key)).status, 200, `outage: instance 2 request ${i} passes (per-instance counters)`);
    const refused2 = await models(gw2, key);
    t.equal(refused2.status, 429, 'outage: instance 2 refuses its request N+1');
    bounded(refused2, 'instance 2 429');

    t.equal(await gauge(gw1), 1, 'tollgate_rate_limiter_fallback = 1 on instance 1');
    t.equal(await gauge(gw2), 1, 'and on instance 2');
    const warned = gw1.logs.map((l) => JSON.parse(l)).filter((l) => /rate limiter/i.test(l.msg) && /unreachable|memory/i.test(l.msg));
    t.equal(warned.length, 1, 'one log line says the limiter fell back to memory');
    t.equal(warned[0]?.level, 40, 'at warn level');

    await redis.start();
    t.equal(await redis.client.dbsize(), 0, 'the restarted Redis is empty');
    // The gateway's own client reconnects on its backoff; the gauge follows the client's state at the
    // next admission, so poll with requests until instance 1 says it is back on Redis.
    const count = async () => Number(await redis.client.get(`tg:rl:req:${id}`));
    const back = await until(
      'instance 1 back on Redis',
      async () => {
        const r = await models(gw1, key);
        bounded(r, 'a request during recovery');
        return (await gauge(gw1)) === 0 ? r : undefined;
      },
      8000,
      200,
    );
    // Increments sent just as Redis went away may be replayed by ioredis on reconnect, so the fresh
    // window can already hold a few; whatever it holds is what rules.
    const c = await count();
    t.ok(c >= 1, `the admission that saw Redis back was counted in Redis (count ${c})`);
    t.equal(back.status, c <= N ? 200 : 429, 'and its status follows the shared count');
    t.pass('gauge back to 0 on instance 1');
    t.ok(
      gw1.logs.some((l) => /Redis back/.test(JSON.parse(l).msg)),
      'a log line says the shared counters are back',
    );

    // Shared again: instance 2 continues the count instance 1 started in Redis, and every status
    // follows the one shared count (<= N passes, past it 429) whichever instance answers.
    await until(
      'instance 2 counting in Redis again',
      async () => {
        const c = await count();
        await models(gw2, key);
        return (await count()) > c ? true : undefined;
      },
      8000,
      200,
    );
    for (let i = 0; i < N; i++) {
      const gw = i % 2 ? gw1 : gw2;
      const r = await models(gw, key);
      const c = await count();
      t.equal(r.status, c <= N ? 200 : 429, `shared count ${c} on instance ${i % 2 ? 1 : 2} → ${r.status}`);
      t.equal(r.headers.get('x-ratelimit-remaining-requests'), String(Math.max(0, N - c)));
    }
    t.ok((await count()) > N, 'the shared window ran out across both instances');
    t.equal(await gauge(gw2), 0, 'gauge back to 0 on instance 2');
  });

  t.test('a hung Redis (CLIENT PAUSE): answers within the command timeouts, limits enforced in memory', async (t) => {
    const sim = await startSimulator();
    t.teardown(() => sim.close());
    const config = {
      store: { command_timeout_ms: 300 },
      rate_limits: { window_seconds: WINDOW_S, test: { requests_per_minute: N, tokens_per_minute: 100_000 } },
    };
    const gw = await startGateway(t, { redisUrl: redis.url, upstreamUrl: sim.url, config });
    const { key, id } = await gw.createKey({ account: 'acme', env: 'test' });
    t.equal((await models(gw, key)).status, 200, 'key cached, 1 counted in Redis');
    const pauseMs = 4000;
    const pausedAt = Date.now();
    await redis.client.call('CLIENT', 'PAUSE', String(pauseMs), 'ALL');
    const statuses: number[] = [];
    for (let i = 0; i <= N; i++) {
      const r = await models(gw, key);
      statuses.push(r.status);
      t.ok(r.ms < HANG_MS, `request ${i + 1} during the hang answered in ${r.ms.toFixed(0)} ms`);
    }
    t.ok(Date.now() - pausedAt < pauseMs, 'all of them while Redis was still paused');
    t.same(statuses, [200, 200, 200, 429], 'N pass on the in-memory counters, then 429');
    // Redis is connected ("ready") but does not answer: the insurance limiter is in use all the same.
    t.equal(await metric(gw, 'tollgate_rate_limiter_fallback'), 1, 'the fallback gauge says the limiter runs in memory');
    t.equal(gw.logs.filter((l) => /rate limiter: Redis unreachable/.test(JSON.parse(l).msg)).length, 1, 'one log line says so');
    await until('Redis answering again', async () => ((await redis.client.ping()) === 'PONG' ? true : undefined), pauseMs + 2000, 100);
    // The increments that timed out were already on the wire: Redis runs them when it wakes up, so the
    // hang's requests count in memory and (late) in Redis too. Whatever the count, it is the one that rules.
    const c0 = Number(await redis.client.get(`tg:rl:req:${id}`));
    t.comment(`shared count after the hang: ${c0} (1 before + ${N + 1} late increments expected)`);
    const r = await models(gw, key);
    const c1 = Number(await redis.client.get(`tg:rl:req:${id}`));
    t.equal(c1, c0 + 1, 'the next request is counted in Redis again');
    t.equal(r.status, c1 <= N ? 200 : 429, 'and its status follows the shared count');
    t.equal(r.headers.get('x-ratelimit-remaining-requests'), String(Math.max(0, N - c1)));
    t.equal(await metric(gw, 'tollgate_rate_limiter_fallback'), 0, 'gauge back to 0 once Redis answers');
  });

  t.test('the gauge does not flap back to 0 while Redis is down (a read-only admission is no sign of Redis)', async (t) => {
    const config = {
      store: { command_timeout_ms: 1000 },
      auth: { cache_ttl_ms: 10_000 },
      rate_limits: { window_seconds: WINDOW_S, test: { requests_per_minute: N, tokens_per_minute: 100_000 } },
    };
    const gw = await startGateway(t, { redisUrl: redis.url, config });
    const { key: testKey } = await gw.createKey({ account: 'acme', env: 'test' });
    // A live key limited on tokens only: /v1/models reads its token window and counts nothing.
    const { key: tokOnly } = await gw.createKey({ account: 'acme', env: 'live', rate_limits: { tokens_per_minute: 5000 } });
    t.equal((await models(gw, testKey)).status, 200);
    t.equal((await models(gw, tokOnly)).status, 200);
    await redis.stop();
    t.teardown(() => redis.start());
    t.equal((await models(gw, testKey)).status, 200);
    t.equal(await metric(gw, 'tollgate_rate_limiter_fallback'), 1, 'fallback after a counted admission');
    const r = await models(gw, tokOnly);
    t.equal(r.status, 200);
    t.equal(r.headers.get('x-ratelimit-limit-tokens'), '5000');
    t.ok(r.ms < HANG_MS, 'answered without hanging');
    t.equal(await metric(gw, 'tollgate_rate_limiter_fallback'), 1, 'still 1: Redis is still down');
    t.notOk(
      gw.logs.some((l) => /Redis back/.test(JSON.parse(l).msg)),
      'no "Redis back" log line while it is down',
    );
    await redis.start();
  });
}
