// rate-limiter-flexible on the script pipe: its counter script and get() through the pipe, the rest on
// ioredis, readiness from the pipe (so an outage falls back to the insurance limiter as it did on ioredis).
import t, { type Test } from 'tap';
import { Redis } from 'ioredis';
import { RateLimiterMemory, RateLimiterRedis } from 'rate-limiter-flexible';
import { INCR_TTL_LUA, limiterClient } from '../../src/store/limiter-client.ts';
import { createScriptPipe, type ScriptPipe } from '../../src/store/script-pipe.ts';
import { startRedis } from '../helpers/redis.ts';
import { waitFor } from '../helpers/wait.ts';

/** The pipe, counting its script runs; `failNext` makes the next run fail as a lost connection would. */
function countRuns(pipe: ScriptPipe): ScriptPipe & { runs: number; failNext: boolean } {
  const counted = {
    ...pipe,
    runs: 0,
    failNext: false,
    get connected() {
      return pipe.connected;
    },
    ready: pipe.ready,
    close: () => pipe.close(),
    run: (...a: Parameters<ScriptPipe['run']>) => {
      counted.runs++;
      if (counted.failNext) {
        counted.failNext = false;
        return Promise.reject(new Error('connection lost'));
      }
      return pipe.run(...a);
    },
  };
  return counted;
}

/** A script pipe (its runs counted) and an ioredis client on the server at url, both closed with the test. */
async function clients(t: Test, url: string) {
  const u = new URL(url);
  const pipe = createScriptPipe({
    target: { host: u.hostname, port: Number(u.port), db: Number(u.pathname.slice(1) || 0) },
    commandTimeoutMs: 2000,
  });
  t.teardown(() => pipe.close());
  await pipe.ready;
  const io = new Redis(url, { lazyConnect: true });
  t.teardown(() => io.disconnect());
  await io.connect();
  return { counted: countRuns(pipe), io };
}

t.test('consume, reward, penalty and get run through the pipe; forced expiries through ioredis; counts land in Redis', async (t) => {
  const redis = await startRedis(t);
  if (!redis) return;
  const { counted, io } = await clients(t, redis.url);
  const limiter = new RateLimiterRedis({
    storeClient: limiterClient(io, counted),
    keyPrefix: 'lc',
    points: 100,
    duration: 60,
    rejectIfRedisNotReady: true,
  });

  t.equal((await limiter.consume('k', 3)).consumedPoints, 3);
  t.equal((await limiter.consume('k', 4)).consumedPoints, 7);
  await limiter.penalty('k', 5);
  await limiter.reward('k', 2);
  t.equal(counted.runs, 4, 'two consumes, a penalty and a reward: four script runs on the pipe');
  t.equal(await redis.client.get('lc:k'), '10', 'the counter is in Redis: 3 + 4 + 5 - 2');
  const ttl = await redis.client.pttl('lc:k');
  t.ok(ttl > 0 && ttl <= 60_000, `with the window's expiry (${ttl} ms)`);
  const got = await limiter.get('k');
  t.equal(got?.consumedPoints, 10, 'get() reads it back');
  t.ok(got!.msBeforeNext > 0 && got!.msBeforeNext <= ttl, `with the time left in the window (${got!.msBeforeNext} ms)`);
  t.equal(counted.runs, 5, 'in one script run on the pipe');
  t.equal(await limiter.get('never-used'), null, 'a key never counted reads as null, not as 0 points');
  t.equal(counted.runs, 6);

  // Forced expiries (set) are not on the pipe: replayed on an ioredis MULTI.
  await limiter.set('forced', 7, 30);
  t.equal(counted.runs, 6, 'set() does not use the pipe');
  t.equal(await redis.client.get('lc:forced'), '7', 'set() wrote the counter through ioredis');
  const forcedTtl = await redis.client.pttl('lc:forced');
  t.ok(forcedTtl > 25_000 && forcedTtl <= 30_000, `with its forced expiry (${forcedTtl} ms)`);

  // get() no longer needs ioredis at all: with it gone, the read still answers at once (before, it waited
  // in ioredis' offline queue while the pipe, and so the limiter's readiness, said "ready").
  io.disconnect();
  t.equal((await limiter.get('k'))?.consumedPoints, 10, 'get() answers with ioredis disconnected');
});

t.test("readiness is the pipe's: while it is down, calls go to the insurance limiter", async (t) => {
  const redis = await startRedis(t, { restartable: true });
  if (!redis) return;
  const pipe = createScriptPipe({ target: { host: '127.0.0.1', port: redis.port }, commandTimeoutMs: 2000 });
  t.teardown(() => pipe.close());
  await pipe.ready;
  const io = new Redis({ host: '127.0.0.1', port: redis.port, lazyConnect: true, maxRetriesPerRequest: 1 });
  io.on('error', () => {});
  t.teardown(() => io.disconnect());
  await io.connect();
  const client = limiterClient(io, pipe);
  const insurance = new RateLimiterMemory({ keyPrefix: 'lc', points: 100, duration: 60 });
  const limiter = new RateLimiterRedis({
    storeClient: client,
    keyPrefix: 'lc',
    points: 100,
    duration: 60,
    rejectIfRedisNotReady: true,
    insuranceLimiter: insurance,
  });
  t.equal(client.status, 'ready');
  t.equal((await limiter.consume('k', 1)).consumedPoints, 1, 'counted in Redis');

  await redis.stop();
  await waitFor(() => client.status !== 'ready', 3000);
  t.equal(client.status, 'reconnecting', 'not ready once the pipe lost its connection');
  t.equal((await limiter.consume('k', 5)).consumedPoints, 5, 'the call is served by the insurance limiter, from zero');
  t.equal((await insurance.get('k'))?.consumedPoints, 5, 'which holds the count');
});

t.test("a turn's calls of one counter are one run; each is answered as if the calls ran one after another", async (t) => {
  const redis = await startRedis(t);
  if (!redis) return;
  const { counted, io } = await clients(t, redis.url);
  const client = limiterClient(io, counted);
  const limiter = (prefix: string, duration = 60) =>
    new RateLimiterRedis({ storeClient: client, keyPrefix: prefix, points: 1000, duration, customIncrTtlLuaScript: INCR_TTL_LUA });
  const a = limiter('sum');
  const b = limiter('sum-b', 30);

  // One turn: five calls on counter k (a reward among them), one on j, one on k of a limiter with another window.
  const turn = await Promise.all([
    a.consume('k', 3),
    a.consume('k', 4),
    a.reward('k', 2),
    a.consume('j', 5),
    a.penalty('k', 6),
    a.consume('k', 1),
    b.consume('k', 9),
  ]);
  t.same(
    turn.map((r) => r.consumedPoints),
    [3, 7, 5, 5, 11, 12, 9],
    "each call's count is the count after it, in the order the calls were made",
  );
  t.equal(counted.runs, 3, 'one run per counter: sum:k, sum:j and sum-b:k');
  t.equal(await redis.client.get('sum:k'), '12', 'Redis holds the sum: 3 + 4 - 2 + 6 + 1');
  t.equal(await redis.client.get('sum:j'), '5');
  t.equal(await redis.client.get('sum-b:k'), '9');
  const [ttlA, ttlB] = [await redis.client.pttl('sum:k'), await redis.client.pttl('sum-b:k')];
  t.ok(ttlA > 55_000 && ttlA <= 60_000, `the window's expiry was set once (${ttlA} ms)`);
  t.ok(ttlB > 25_000 && ttlB <= 30_000, `the other limiter's counter has its own window (${ttlB} ms)`);
  t.ok(
    turn.every((r) => r.msBeforeNext > 0 && r.msBeforeNext <= 60_000),
    'each answer carries the time left',
  );

  // The next turn starts from what the last left; calls across turns are runs of their own.
  counted.runs = 0;
  t.equal((await a.consume('k', 1)).consumedPoints, 13);
  t.equal((await a.consume('k', 1)).consumedPoints, 14);
  t.equal(counted.runs, 2, 'two turns, two runs');

  // A run that fails fails each of its calls (the limiter's insurance, if any, then serves each).
  counted.runs = 0;
  counted.failNext = true;
  const failed = await Promise.allSettled([a.consume('k', 1), a.consume('k', 1), a.consume('k', 1)]);
  t.same(
    failed.map((r) => r.status),
    ['rejected', 'rejected', 'rejected'],
    'all three calls of the failed run are rejected',
  );
  t.equal(counted.runs, 1, 'they were one run');
  t.equal(await redis.client.get('sum:k'), '14', 'and nothing of it was counted');
});
