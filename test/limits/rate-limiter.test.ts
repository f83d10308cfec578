// createRateLimits driven directly, without HTTP: a fake RequestContext carries the key, the limiter runs
// on its in-memory counters (no Redis), and the clock used for the settle cut-off is injected.
import t from 'tap';
import { Writable } from 'node:stream';
import { createRateLimits, type RateLimitOptions } from '../../src/limits/rate-limiter.ts';
import { GatewayError } from '../../src/http/errors.ts';
import type { RequestContext } from '../../src/http/context.ts';
import type { KeyRecord, RateLimitOverride } from '../../src/store/types.ts';
import { createMetrics } from '../../src/obs/metrics.ts';
import { createLogger } from '../../src/obs/logger.ts';

let nextKey = 1;
function keyRecord(env: 'test' | 'live', rate_limits: RateLimitOverride | null = null): KeyRecord {
  return {
    id: `key_unit${nextKey++}`,
    account: 'acme',
    env,
    name: 'unit',
    active: true,
    scopes: ['chat', 'models', 'shares'],
    models: [],
    rate_limits,
    created_at: '2026-01-01T00:00:00.000Z',
    last4: 'abcd',
    version: 1,
  };
}

function ctxFor(key: KeyRecord): RequestContext {
  return { key, extraHeaders: undefined, log: {} } as unknown as RequestContext;
}

function setup(over: Partial<RateLimitOptions> = {}) {
  const metrics = createMetrics({ defaults: false });
  const logs: string[] = [];
  const logger = createLogger(
    'info',
    new Writable({
      write(c, _e, cb) {
        logs.push(String(c));
        cb();
      },
    }),
  );
  let clock = 1_000_000;
  const limits = createRateLimits({
    windowSeconds: 60,
    test: { requestsPerMinute: 5, tokensPerMinute: 1000 },
    live: { requestsPerMinute: undefined, tokensPerMinute: undefined },
    redis: undefined,
    metrics,
    logger,
    now: () => clock,
    ...over,
  });
  return {
    limits,
    metrics,
    logs,
    advance: (ms: number) => {
      clock += ms;
    },
  };
}

/** Admits and returns the headers set on the context, or the refusal. */
async function admit(limits: ReturnType<typeof setup>['limits'], key: KeyRecord, estimate?: number) {
  const ctx = ctxFor(key);
  try {
    const admission = await limits.admit(ctx, estimate);
    return { ok: true as const, admission, headers: ctx.extraHeaders ?? {} };
  } catch (err) {
    if (!(err instanceof GatewayError)) throw err;
    return { ok: false as const, err, headers: err.headers ?? {} };
  }
}

/** Lets the un-awaited reward/penalty of a settle land (in-memory: a few microtasks). */
const tick = () => new Promise((r) => setImmediate(r));

t.test('a test key gets the config defaults; request N+1 is refused with the full header set', async (t) => {
  const { limits } = setup();
  const key = keyRecord('test');
  for (let i = 1; i <= 5; i++) {
    const r = await admit(limits, key);
    t.ok(r.ok, `request ${i} admitted`);
    t.equal(r.headers['x-ratelimit-limit-requests'], '5');
    t.equal(r.headers['x-ratelimit-remaining-requests'], String(5 - i));
    t.equal(r.headers['x-ratelimit-limit-tokens'], '1000');
    t.equal(r.headers['x-ratelimit-remaining-tokens'], '1000', 'no estimate: tokens untouched');
    t.match(r.headers['x-ratelimit-reset-requests'], /^(\d+ms|\d+(\.\d{1,3})?s|\d+m\d+(\.\d{1,3})?s)$/);
  }
  const r = await admit(limits, key);
  t.notOk(r.ok, 'request 6 refused');
  if (r.ok) return;
  t.equal(r.err.code, 'rate_limit_exceeded');
  t.equal(r.err.status, 429);
  t.equal(r.headers['x-ratelimit-remaining-requests'], '0');
  t.equal(r.headers['x-ratelimit-limit-requests'], '5');
  const ms = Number(r.headers['retry-after-ms']);
  t.ok(ms > 55_000 && ms <= 60_000, `retry-after-ms ${ms} is the rest of the 60 s window`);
  t.equal(r.headers['retry-after'], String(Math.ceil(ms / 1000)));
  t.match(r.err.message, /5 requests/);
  t.match(r.err.message, /resets in \d/);
});

t.test('keys have independent counters', async (t) => {
  const { limits } = setup({ test: { requestsPerMinute: 1, tokensPerMinute: undefined } });
  const a = keyRecord('test');
  const b = keyRecord('test');
  t.ok((await admit(limits, a)).ok);
  t.notOk((await admit(limits, a)).ok);
  t.ok((await admit(limits, b)).ok, 'b is not limited by a');
});

t.test('settle replaces the estimate with the real usage, both downwards and upwards', async (t) => {
  const { limits } = setup({ test: { requestsPerMinute: 100, tokensPerMinute: 1000 } });
  const key = keyRecord('test');
  const first = await admit(limits, key, 300);
  t.ok(first.ok);
  t.equal(first.headers['x-ratelimit-remaining-tokens'], '700', 'admitted on the estimate');
  if (!first.ok) return;
  first.admission.settle(40);
  await tick();
  t.equal((await admit(limits, key)).headers['x-ratelimit-remaining-tokens'], '960', 'the window holds the real 40, not the 300');

  const second = await admit(limits, key, 100);
  t.equal(second.headers['x-ratelimit-remaining-tokens'], '860');
  if (!second.ok) return;
  second.admission.settle(250); // an upstream that ignored max_tokens: the overrun is counted
  await tick();
  t.equal((await admit(limits, key)).headers['x-ratelimit-remaining-tokens'], '710');

  const third = await admit(limits, key, 10);
  if (!third.ok) return t.fail('admitted');
  third.admission.settle(9.2); // fractional usage counts as whole tokens (rounded up)
  await tick();
  t.equal((await admit(limits, key)).headers['x-ratelimit-remaining-tokens'], '700');
});

t.test('a correction after the admitting window ended is dropped (the next window starts clean)', async (t) => {
  const { limits, advance } = setup({ test: { requestsPerMinute: 100, tokensPerMinute: 1000 } });
  const key = keyRecord('test');
  const a = await admit(limits, key, 300);
  if (!a.ok) return t.fail('admitted');
  t.match(a.headers['x-ratelimit-reset-tokens'], /^(1m0s|59(\.\d+)?s)$/, 'a fresh 60 s window');
  advance(60_001); // the injected clock says the window is over (the in-memory counter itself still runs on real time)
  a.admission.settle(40);
  await tick();
  t.equal((await admit(limits, key)).headers['x-ratelimit-remaining-tokens'], '700', 'the reward of 260 was not applied');

  // Just before the end, the correction still lands.
  const b = await admit(limits, key, 100);
  if (!b.ok) return t.fail('admitted');
  advance(1000);
  b.admission.settle(0);
  await tick();
  t.equal((await admit(limits, key)).headers['x-ratelimit-remaining-tokens'], '700', 'estimate of 100 given back in full');
});

t.test('an estimate above the remaining tokens is refused and not consumed', async (t) => {
  const { limits, metrics } = setup({ test: { requestsPerMinute: 100, tokensPerMinute: 1000 } });
  const key = keyRecord('test');
  const a = await admit(limits, key, 600);
  t.ok(a.ok);
  const b = await admit(limits, key, 500);
  t.notOk(b.ok, '600 + 500 > 1000');
  if (b.ok) return;
  t.equal(b.err.code, 'rate_limit_exceeded');
  t.match(b.err.message, /1000 tokens/);
  t.equal(b.headers['x-ratelimit-remaining-tokens'], '400', 'remaining shown without the refused estimate');
  t.ok(Number(b.headers['retry-after-ms']) > 0);
  await tick();
  const c = await admit(limits, key, 400);
  t.ok(c.ok, 'the refused 500 was given back: exactly 400 fit');
  t.equal(c.headers['x-ratelimit-remaining-tokens'], '0');
  const v = (await metrics.rateLimited.get()).values;
  t.same(
    v.map((x) => [x.labels, x.value]),
    [[{ env: 'test', dimension: 'tokens' }, 1]],
  );
});

t.test('a request refused by the request limit gives its token estimate back', async (t) => {
  const { limits, metrics } = setup({ test: { requestsPerMinute: 1, tokensPerMinute: 1000 } });
  const key = keyRecord('test');
  t.ok((await admit(limits, key, 100)).ok);
  const r = await admit(limits, key, 200);
  t.notOk(r.ok);
  if (r.ok) return;
  t.match(r.err.message, /1 requests/);
  t.equal(r.headers['x-ratelimit-remaining-tokens'], '900');
  await tick();
  const m = await admit(limits, key); // still refused (requests), but shows tokens as they are
  t.equal(m.headers['x-ratelimit-remaining-tokens'], '900', 'the 200 is not counted');
  const v = (await metrics.rateLimited.get()).values;
  t.same(
    v.map((x) => [x.labels, x.value]),
    [[{ env: 'test', dimension: 'requests' }, 2]],
  );
});

t.test('live keys: no limits and no headers unless configured or overridden', async (t) => {
  const { limits } = setup();
  const free = keyRecord('live');
  for (let i = 0; i < 50; i++) {
    const r = await admit(limits, free, 10_000);
    if (!r.ok) return t.fail(`live request ${i} refused`);
    t.same(r.headers, {}, 'no x-ratelimit headers');
  }
  const capped = keyRecord('live', { requests_per_minute: 2 });
  t.ok((await admit(limits, capped)).ok);
  const second = await admit(limits, capped, 10);
  t.ok(second.ok);
  t.same(
    Object.keys(second.headers).sort(),
    ['x-ratelimit-limit-requests', 'x-ratelimit-remaining-requests', 'x-ratelimit-reset-requests'],
    'only the limited dimension is announced',
  );
  t.notOk((await admit(limits, capped)).ok);
});

t.test('the live defaults apply to live keys; an override replaces a default per dimension', async (t) => {
  const { limits, metrics } = setup({
    live: { requestsPerMinute: 2, tokensPerMinute: undefined },
    test: { requestsPerMinute: 1, tokensPerMinute: 50 },
  });
  const live = keyRecord('live');
  t.ok((await admit(limits, live)).ok);
  t.ok((await admit(limits, live)).ok);
  t.notOk((await admit(limits, live)).ok, 'rate_limits.live.requests_per_minute = 2');

  const test = keyRecord('test', { tokens_per_minute: 500 });
  const r = await admit(limits, test, 400);
  t.ok(r.ok, 'the override raises tpm to 500');
  t.equal(r.headers['x-ratelimit-limit-tokens'], '500');
  t.equal(r.headers['x-ratelimit-limit-requests'], '1', 'rpm still from the test defaults');
  t.notOk((await admit(limits, test)).ok);
  const v = (await metrics.rateLimited.get()).values;
  t.same(v.map((x) => [x.labels, x.value]).sort(), [
    [{ env: 'live', dimension: 'requests' }, 1],
    [{ env: 'test', dimension: 'requests' }, 1],
  ]);
});

t.test('rate_limits.test_account: the test keys of one account share it; a 429 names its scope', async (t) => {
  const { limits } = setup({
    test: { requestsPerMinute: 3, tokensPerMinute: 1000 },
    testAccount: { requestsPerMinute: 4, tokensPerMinute: 1500 },
  });
  const a = keyRecord('test');
  const b = { ...keyRecord('test'), account: a.account };
  const other = { ...keyRecord('test'), account: 'elsewhere' };
  t.ok((await admit(limits, a)).ok);
  t.ok((await admit(limits, a)).ok);
  const third = await admit(limits, b);
  t.ok(third.ok);
  t.equal(third.headers['x-ratelimit-remaining-requests'], '1', "the account's remaining, tighter than b's own 2");
  t.equal(third.headers['x-ratelimit-limit-requests'], '4');
  t.ok((await admit(limits, b)).ok, 'the account has its 4th');
  const refused = await admit(limits, b);
  t.notOk(refused.ok);
  if (refused.ok) return;
  t.equal(refused.headers['x-ratelimit-scope'], 'account');
  t.match(refused.err.message, /this account's test keys together/);
  t.notOk((await admit(limits, a)).ok, "a's 3rd: within its own 3, past the account");
  const own = await admit(limits, a);
  t.notOk(own.ok, 'a is past its own 3 and the account');
  if (!own.ok) t.equal(own.headers['x-ratelimit-scope'], 'key', 'the key limit is checked first');
  t.ok((await admit(limits, other)).ok, 'another account is not limited');
  const live = { ...keyRecord('live'), account: a.account };
  t.ok((await admit(limits, live)).ok, 'live keys have no account limit');
});

t.test('two phases: the request before the body, the tokens on the estimate; settle corrects key and account', async (t) => {
  const { limits } = setup({
    test: { requestsPerMinute: 10, tokensPerMinute: 1000 },
    testAccount: { requestsPerMinute: 40, tokensPerMinute: 1200 },
  });
  const a = keyRecord('test');
  const b = { ...keyRecord('test'), account: a.account };
  const ctx = ctxFor(a);
  await limits.admitRequest(ctx);
  t.equal(ctx.extraHeaders!['x-ratelimit-remaining-requests'], '9');
  t.equal(ctx.extraHeaders!['x-ratelimit-remaining-tokens'], undefined, 'no token count before the estimate');
  const admission = await limits.admitTokens(ctx, 800);
  t.equal(ctx.extraHeaders!['x-ratelimit-remaining-tokens'], '200', 'the key: 1000 - 800');
  t.equal(ctx.extraHeaders!['x-ratelimit-remaining-requests'], '9', 'the request headers stay');
  const ctxB = ctxFor(b);
  await limits.admitRequest(ctxB);
  const e = await limits.admitTokens(ctxB, 500).catch((err: unknown) => err as GatewayError);
  t.type(e, GatewayError, "b's 500 would pass the account's 1200");
  t.equal((e as GatewayError).headers?.['x-ratelimit-scope'], 'account');
  admission.settle(100);
  await tick();
  const again = ctxFor(b);
  await limits.admitRequest(again);
  await limits.admitTokens(again, 500);
  t.equal(
    again.extraHeaders!['x-ratelimit-remaining-tokens'],
    '500',
    'the correction reached b: key 1000 - 500; account 1200 - 100 - 500 = 600',
  );
});

t.test('a request refused before its estimate still carries the token headers', async (t) => {
  const { limits } = setup({ test: { requestsPerMinute: 1, tokensPerMinute: 1000 } });
  const key = keyRecord('test');
  await limits.admitRequest(ctxFor(key));
  const e = await limits.admitRequest(ctxFor(key)).catch((err: unknown) => err as GatewayError);
  t.type(e, GatewayError);
  const h = (e as GatewayError).headers!;
  t.equal(h['x-ratelimit-remaining-requests'], '0');
  t.equal(h['x-ratelimit-limit-tokens'], '1000');
  t.equal(h['x-ratelimit-scope'], 'key');
});
