// Request limit of a test key over real HTTP and a real Redis (SPEC §1.5, §2a): N pass with the
// x-ratelimit-* headers, N+1.. get 429 rate_limit_exceeded with retry-after(-ms), the window frees them.
import t from 'tap';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  RATE_HEADERS,
  chat,
  chatBody,
  metric,
  models,
  parseDuration,
  rateHeaders,
  requestLogs,
  startLimitsStack,
} from './limits-fixture.ts';

const WINDOW_MS = 3000;
const stack = await startLimitsStack(t, { window_seconds: WINDOW_MS / 1000, test: { requests_per_minute: 3, tokens_per_minute: 5000 } });
if (stack) {
  const { redis, sim, gw } = stack;

  t.test('N requests pass with headers (chat and models); N+1.. get 429 with the OpenAI envelope; the window frees them', async (t) => {
    const { key, id } = await gw.createKey({ account: 'acme', env: 'test' });

    const a = await chat(gw, key);
    t.equal(a.status, 200, 'chat 1');
    t.same(Object.keys(rateHeaders(a.headers)).sort(), RATE_HEADERS, 'all six x-ratelimit-* headers on a successful chat');
    t.equal(a.headers.get('x-ratelimit-limit-requests'), '3');
    t.equal(a.headers.get('x-ratelimit-remaining-requests'), '2');
    t.equal(a.headers.get('x-ratelimit-limit-tokens'), '5000');
    t.ok(Number(a.headers.get('x-ratelimit-remaining-tokens')) < 5000, 'the chat consumed tokens');
    for (const h of ['x-ratelimit-reset-requests', 'x-ratelimit-reset-tokens']) {
      const ms = parseDuration(a.headers.get(h));
      t.ok(ms > 0 && ms <= WINDOW_MS, `${h} = ${a.headers.get(h)} is OpenAI's duration format within the ${WINDOW_MS} ms window`);
    }
    t.notOk(a.headers.has('retry-after'), 'no retry-after on a success');

    const b = await models(gw, key);
    t.equal(b.status, 200, 'models counts as a request too');
    t.same(Object.keys(rateHeaders(b.headers)).sort(), RATE_HEADERS, 'all six x-ratelimit-* headers on /v1/models');
    t.equal(b.headers.get('x-ratelimit-remaining-requests'), '1');
    t.ok(
      Number(b.headers.get('x-ratelimit-remaining-tokens')) >= Number(a.headers.get('x-ratelimit-remaining-tokens')),
      '/v1/models consumes no tokens',
    );

    const c = await chat(gw, key, undefined, { 'x-sim-tokens': '3' });
    t.equal(c.status, 200, 'chat 3');
    t.equal(c.headers.get('x-ratelimit-remaining-requests'), '0');
    const upstreamBefore = sim.requests.length;

    const d = await chat(gw, key);
    t.equal(d.status, 429, 'chat 4 refused');
    t.same(
      d.body,
      { error: { message: d.body.error.message, type: 'rate_limit_error', code: 'rate_limit_exceeded', param: null } },
      'OpenAI envelope',
    );
    t.match(d.body.error.message, /3 requests/, 'says which limit');
    t.match(d.body.error.message, new RegExp(`per ${WINDOW_MS / 1000}s window`));
    t.match(d.body.error.message, /resets in (\d+ms|\d+(\.\d+)?s)/, 'says when it resets');
    const retryMs = Number(d.headers.get('retry-after-ms'));
    t.ok(retryMs > 0 && retryMs <= WINDOW_MS, `retry-after-ms ${retryMs} within the window`);
    t.equal(d.headers.get('retry-after'), String(Math.ceil(retryMs / 1000)), 'retry-after in whole seconds, rounded up');
    t.same(Object.keys(rateHeaders(d.headers)).sort(), [...RATE_HEADERS, 'x-ratelimit-scope'], 'all six x-ratelimit-* headers on the 429');
    t.equal(d.headers.get('x-ratelimit-scope'), 'key', 'and which limit refused it (SPEC §1.5)');
    t.equal(d.headers.get('x-ratelimit-remaining-requests'), '0');
    t.equal(d.headers.get('x-ratelimit-limit-requests'), '3');
    const resetMs = parseDuration(d.headers.get('x-ratelimit-reset-requests'));
    t.ok(Math.abs(resetMs - retryMs) <= 1, `x-ratelimit-reset-requests (${resetMs}) agrees with retry-after-ms (${retryMs})`);
    const inMessage = parseDuration(/resets in (\S+?)\.?$/.exec(d.body.error.message)?.[1]);
    t.ok(Math.abs(inMessage - retryMs) <= 1, 'the message names the same reset time');
    t.ok(d.headers.get('x-request-id'), 'x-request-id on the 429');

    const e = await models(gw, key);
    t.equal(e.status, 429, '/v1/models refused as well');
    t.equal(e.body.error.code, 'rate_limit_exceeded');
    t.equal(sim.requests.length, upstreamBefore, 'refused requests never reach the upstream');

    const log = requestLogs(gw).filter((l) => l.key_id === id);
    t.same(
      log.map((l) => l.status),
      [200, 200, 200, 429, 429],
      'one log line per request with its status',
    );
    t.equal(log[3]!.error_code, 'rate_limit_exceeded');

    await sleep(retryMs + 50);
    const f = await chat(gw, key);
    t.equal(f.status, 200, 'after retry-after-ms the key passes again');
    t.equal(f.headers.get('x-ratelimit-remaining-requests'), '2', 'a fresh window');
    t.equal(
      f.headers.get('x-ratelimit-remaining-tokens'),
      a.headers.get('x-ratelimit-remaining-tokens'),
      'the token window started over too (same body, same estimate as chat 1)',
    );
  });

  t.test('every authenticated /v1 request counts, including ones refused by validation (SPEC §2a)', async (t) => {
    const { key } = await gw.createKey({ account: 'acme', env: 'test', models: ['sim-free'], rate_limits: { requests_per_minute: 3 } });
    const refusedByRoute = [
      await chat(gw, key, chatBody({ model: 'no-such-model' })), // 404 model_not_found
      await chat(gw, key, { model: 'sim-free' }), // 422: messages missing
      await chat(gw, key, chatBody({ model: 'sim-small' })), // 403: not in the key's allow-list
    ];
    t.same(
      refusedByRoute.map((r) => r.status),
      [404, 422, 403],
      'authenticated, then refused by the route',
    );
    t.same(
      refusedByRoute.map((r) => r.headers.get('x-ratelimit-remaining-requests')),
      ['2', '1', '0'],
      'each one counted, with its x-ratelimit-* headers',
    );
    const r = await models(gw, key);
    t.equal(r.status, 429, 'the key made 3 authenticated /v1 requests against a limit of 3: the 4th is refused');
    const bad = await chat(gw, key, chatBody({ model: 'no-such-model' }));
    t.equal(bad.status, 429, 'past the limit, a request the route would refuse gets the 429');
    t.equal(bad.body.error.code, 'rate_limit_exceeded');
    const unauth = await chat(gw, `svc-test-${'1'.repeat(32)}`);
    t.equal(unauth.status, 401, "an unauthenticated request is not the key's: 401, not 429");
  });

  t.test('tollgate_rate_limited_total counts refusals by env and dimension', async (t) => {
    const before = await metric(gw, 'tollgate_rate_limited_total', { env: 'test', dimension: 'requests' });
    const { key } = await gw.createKey({ account: 'acme', env: 'test', rate_limits: { requests_per_minute: 1 } });
    t.equal((await models(gw, key)).status, 200);
    t.equal((await models(gw, key)).status, 429);
    t.equal((await models(gw, key)).status, 429);
    t.equal(await metric(gw, 'tollgate_rate_limited_total', { env: 'test', dimension: 'requests' }), before + 2);
    const text = await (await fetch(`${gw.adminUrl}/metrics`)).text();
    t.notMatch(text, /key_[A-Za-z0-9]/, 'no key id in any label');
    t.match(text, /tollgate_rate_limiter_seconds_count \d+/, 'limiter latency is measured');
  });

  t.test('a burst on one key: exactly N admitted, each with its own remaining count (calls of a turn are summed)', async (t) => {
    const N = 10;
    const { key, id } = await gw.createKey({
      account: 'acme',
      env: 'test',
      rate_limits: { requests_per_minute: N, tokens_per_minute: 1_000_000 },
    });
    const replies = await Promise.all(Array.from({ length: 3 * N }, () => chat(gw, key)));
    const ok = replies.filter((r) => r.status === 200);
    t.equal(ok.length, N, `${N} of ${3 * N} admitted`);
    t.equal(replies.filter((r) => r.status === 429).length, 2 * N, 'the rest refused');
    t.same(
      ok.map((r) => Number(r.headers.get('x-ratelimit-remaining-requests'))).sort((a, b) => a - b),
      Array.from({ length: N }, (_, i) => i),
      'the admitted ones saw N-1 … 0 remaining, each count once',
    );
    t.equal(await redis.client.get(`tg:rl:req:${id}`), String(3 * N), 'every request counted');
  });

  t.test('the counters live in Redis under tg:rl:req:<key id>, expiring with the window', async (t) => {
    const { key, id } = await gw.createKey({ account: 'acme', env: 'test', rate_limits: { requests_per_minute: 10 } });
    for (let i = 0; i < 4; i++) t.equal((await models(gw, key)).status, 200);
    t.equal(await redis.client.get(`tg:rl:req:${id}`), '4');
    const ttl = await redis.client.pttl(`tg:rl:req:${id}`);
    t.ok(ttl > 0 && ttl <= WINDOW_MS, `TTL ${ttl} ms is the window`);
    t.equal(await redis.client.get(`tg:rl:tok:${id}`), null, '/v1/models does not count tokens');
  });
}
