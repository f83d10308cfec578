/**
 * Rate limits (SPEC §1.5, §2a, §13) on rate-limiter-flexible: fixed windows (default one minute) for
 * requests and for tokens — one window per dimension — per key and, for test keys, per account
 * (`rate_limits.test_account`: all test keys of one account together, so more keys buy no more traffic).
 * Test keys get the config defaults, live keys the optional live defaults, and any key may carry an
 * override. The request limit counts every authenticated /v1 request; the token limit admits metered
 * requests on their estimate (prompt estimate + max output) and is corrected with the real usage at
 * settle, so a window's total is what was used.
 *
 * Two phases on a metered route (SPEC §13 "admission before work"): `admitRequest` before the body is
 * read (the request dimension of key and account: one round trip), `admitTokens` once the estimate is
 * known (the token dimension of key and account: one round trip). Other routes take both at once
 * (`admit`). A correction rides on the counter's next token admission (one counter script instead of
 * two) or, when none comes within CORRECTION_FLUSH_MS, is sent by itself: this instance's decisions and
 * headers always include it; another instance sees it that much later.
 *
 * Counters live in Redis (shared by every instance: one Lua script per counter, all of one phase in one
 * round trip, on the script pipe on a single node: store/limiter-client.ts). While Redis is unreachable
 * each instance enforces the same limits in memory (rate-limiter-flexible's insurance limiter), with a
 * gauge and a log line saying so.
 */
import { RateLimiterMemory, RateLimiterRedis, type RateLimiterAbstract, type RateLimiterRes } from 'rate-limiter-flexible';
import type { Cluster, Redis } from 'ioredis';
import { INCR_TTL_LUA, type LimiterClient } from '../store/limiter-client.ts';
import { GatewayError } from '../http/errors.ts';
import type { RequestContext } from '../http/context.ts';
import type { Logger } from '../obs/logger.ts';
import { bound, type Metrics } from '../obs/metrics.ts';
import type { KeyRecord } from '../store/types.ts';
import type { LimitSpec } from '../config/schema.ts';
import { formatDuration } from './duration.ts';
import type { Admission, Limits } from './limits.ts';

export interface RateLimitOptions {
  windowSeconds: number;
  test: LimitSpec;
  live: LimitSpec;
  /** All test keys of one account together (rate_limits.test_account); undefined → no account limit. */
  testAccount?: LimitSpec;
  /** The Redis client for shared counters (Store.redis); undefined → in-memory only (embedded store). */
  redis: Redis | Cluster | LimiterClient | undefined;
  metrics: Metrics;
  logger: Logger;
  now?: () => number;
}

/**
 * The limiters never reject by themselves: each key has its own limit, so they count with a ceiling
 * no key reaches and this module compares the count with the key's limit.
 */
const UNCAPPED = 2 ** 40;
const NOTHING: Admission = { settle() {} };
/**
 * How long a token correction may wait for its counter's next admission before it is sent alone. Under
 * load the next admission comes first and carries it (bench/README.md, "What changed the numbers").
 */
export const CORRECTION_FLUSH_MS = 20;

type Dimension = 'requests' | 'tokens';
/** Which limit a counter enforces; a 429 names it in `x-ratelimit-scope`. */
type Scope = 'key' | 'account';

/** Token corrections of one counter not yet sent, and the end of the window they belong to. */
interface Pending {
  tok: RateLimiterAbstract;
  id: string;
  delta: number;
  windowEnd: number;
}

/** The in-memory twin; reports each use when it stands in for Redis, so a hung Redis is seen too. */
class Insurance extends RateLimiterMemory {
  onUse: () => void = () => {};
  override consume(key: string | number, points?: number, options?: { [key: string]: unknown }) {
    this.onUse();
    return super.consume(key, points, options);
  }
  override get(key: string | number, options?: { [key: string]: unknown }) {
    this.onUse();
    return super.get(key, options);
  }
}

function limiter(o: RateLimitOptions, prefix: string, onInsurance: () => void): RateLimiterAbstract {
  const base = { points: UNCAPPED, duration: o.windowSeconds };
  if (!o.redis) return new RateLimiterMemory({ ...base, keyPrefix: prefix });
  const insurance = new Insurance({ ...base, keyPrefix: prefix });
  insurance.onUse = onInsurance;
  return new RateLimiterRedis({
    ...base,
    storeClient: o.redis,
    customIncrTtlLuaScript: INCR_TTL_LUA,
    keyPrefix: prefix,
    insuranceLimiter: insurance,
    rejectIfRedisNotReady: true,
  });
}

/** One counter pair (key or account) as one admission sees it. */
interface Side {
  scope: Scope;
  /** The counter id: the key id, or the account name. */
  id: string;
  rpm: number | undefined;
  tpm: number | undefined;
  req: RateLimiterAbstract;
  tok: RateLimiterAbstract;
  /** Results of this admission's calls. */
  r?: RateLimiterRes | undefined;
  t?: RateLimiterRes | null | undefined;
  taken?: Pending | undefined;
  /** Tokens given back after a refusal (the headers show what remains without them). */
  refunded?: number;
}

/** What one admission counts: the request, the tokens (consumed, only read for headers, or neither). */
interface Phase {
  requests: boolean;
  tokens: 'consume' | 'get' | 'none';
  estimate: number | undefined;
}

export function createRateLimits(o: RateLimitOptions): Limits {
  const now = o.now ?? Date.now;
  let fallback = false;
  // Bumped whenever the insurance limiter stands in for Redis (down, or hung past the command timeout).
  let insuranceUses = 0;
  const onInsurance = () => void insuranceUses++;
  const keyReq = limiter(o, 'tg:rl:req', onInsurance);
  const keyTok = limiter(o, 'tg:rl:tok', onInsurance);
  const acctReq = limiter(o, 'tg:rl:acct:req', onInsurance);
  const acctTok = limiter(o, 'tg:rl:acct:tok', onInsurance);
  const windowMs = o.windowSeconds * 1000;
  const latency = bound(o.metrics.limiterLatency);
  // Corrections not yet sent, per counter: the key's token counters by key id, the accounts' by account.
  // Keyed by the ids themselves (strings each request reuses), never by a string built per request,
  // which V8 would internalize at each lookup (bench/results/instructions-vs-bare.md).
  const pendingKeys = new Map<string, Pending>();
  const pendingAccounts = new Map<string, Pending>();
  const pendingOf = (tok: RateLimiterAbstract) => (tok === keyTok ? pendingKeys : pendingAccounts);
  let flushTimer: NodeJS.Timeout | undefined;

  /** Sends one counter's correction by itself (reward or penalty); dropped once its window is over. */
  function send(p: Pending): Promise<unknown> {
    if (p.delta === 0 || now() >= p.windowEnd) return Promise.resolve();
    const call = p.delta < 0 ? p.tok.reward(p.id, -p.delta) : p.tok.penalty(p.id, p.delta);
    return call.catch((err: unknown) => o.logger.warn({ err: (err as Error).message }, 'rate limiter: token correction failed'));
  }

  function flush(): Promise<unknown> {
    flushTimer = undefined;
    const sends = [...pendingKeys.values(), ...pendingAccounts.values()].map(send);
    pendingKeys.clear();
    pendingAccounts.clear();
    return Promise.all(sends);
  }

  /** Queues a correction for the counter's next token admission, or for the flush timer. */
  function correct(tok: RateLimiterAbstract, id: string, delta: number, windowEnd: number): void {
    const pending = pendingOf(tok);
    const p = pending.get(id);
    // Ends computed by two admissions of one window differ by milliseconds, of two windows by about a window.
    if (p && Math.abs(p.windowEnd - windowEnd) < windowMs / 2) {
      p.delta += delta;
      p.windowEnd = Math.min(p.windowEnd, windowEnd);
    } else {
      if (p) void send(p);
      pending.set(id, { tok, id, delta, windowEnd });
    }
    flushTimer ??= setTimeout(() => void flush(), CORRECTION_FLUSH_MS).unref();
  }

  /** Takes the counter's queued correction if its window is still current. */
  function takeCorrection(tok: RateLimiterAbstract, id: string): Pending | undefined {
    const pending = pendingOf(tok);
    const p = pending.get(id);
    if (!p) return undefined;
    pending.delete(id);
    return now() < p.windowEnd ? p : undefined;
  }

  /** The key's own limits and, for a test key, its account's. */
  function sidesOf(key: KeyRecord): Side[] {
    const d = key.env === 'test' ? o.test : o.live;
    const sides: Side[] = [
      {
        scope: 'key',
        id: key.id,
        rpm: key.rate_limits?.requests_per_minute ?? d.requestsPerMinute,
        tpm: key.rate_limits?.tokens_per_minute ?? d.tokensPerMinute,
        req: keyReq,
        tok: keyTok,
      },
    ];
    const a = key.env === 'test' ? o.testAccount : undefined;
    if (a && (a.requestsPerMinute !== undefined || a.tokensPerMinute !== undefined)) {
      sides.push({ scope: 'account', id: key.account, rpm: a.requestsPerMinute, tpm: a.tokensPerMinute, req: acctReq, tok: acctTok });
    }
    return sides;
  }

  /** Degraded when the last call was served by the insurance limiter: Redis down, or hung (still "ready"). */
  function setFallback(down: boolean): void {
    if (down === fallback) return;
    fallback = down;
    o.metrics.limiterFallback.set(down ? 1 : 0);
    if (down) o.logger.warn('rate limiter: Redis unreachable, enforcing limits per instance in memory');
    else o.logger.info('rate limiter: Redis back, shared counters in use');
  }

  /**
   * The `x-ratelimit-*` headers of one dimension: the side with the least left (the key's own numbers
   * until its account's are the tighter ones), so a client paces itself on the limit that binds.
   */
  function headersFor(dim: Dimension, sides: Side[], out: Record<string, string>): void {
    let best: { limit: number; left: number; resetMs: number } | undefined;
    for (const s of sides) {
      const limit = dim === 'requests' ? s.rpm : s.tpm;
      const res = dim === 'requests' ? s.r : s.t;
      if (limit === undefined || res === undefined) continue;
      const left = res === null ? limit : Math.max(0, limit - res.consumedPoints + (dim === 'tokens' ? (s.refunded ?? 0) : 0));
      const resetMs = res === null ? windowMs : res.msBeforeNext;
      if (!best || left < best.left) best = { limit, left, resetMs };
    }
    if (!best) return;
    out[`x-ratelimit-limit-${dim}`] = String(best.limit);
    out[`x-ratelimit-remaining-${dim}`] = String(best.left);
    out[`x-ratelimit-reset-${dim}`] = formatDuration(best.resetMs);
  }

  function refuse(
    ctx: RequestContext,
    s: Side,
    dim: Dimension,
    limit: number,
    res: RateLimiterRes,
    headers: Record<string, string>,
  ): never {
    o.metrics.rateLimited.inc({ env: ctx.key!.env, dimension: dim });
    ctx.log.rate_limit_scope = s.scope;
    const ms = Math.max(1, res.msBeforeNext);
    const what = dim === 'requests' ? `${limit} requests` : `${limit} tokens`;
    const whose = s.scope === 'key' ? 'this key' : "this account's test keys together";
    throw new GatewayError(
      'rate_limit_exceeded',
      `Rate limit reached: ${what} per ${o.windowSeconds}s window for ${whose}. The window resets in ${formatDuration(ms)}.`,
      {
        headers: {
          ...headers,
          'x-ratelimit-scope': s.scope,
          'retry-after': String(Math.ceil(ms / 1000)),
          'retry-after-ms': String(ms),
        },
      },
    );
  }

  /**
   * The token headers of a request refused before its estimate was known (SPEC §1.5: a 429 carries all
   * six): read only for refusals, so an admitted request pays no extra script for them.
   */
  async function tokenHeaders(sides: Side[], headers: Record<string, string>): Promise<void> {
    const k = sides[0]!;
    if (k.tpm === undefined) return;
    try {
      k.t = await k.tok.get(k.id);
    } catch {
      return;
    }
    headersFor('tokens', [k], headers);
  }

  const liveUnlimited = o.live.requestsPerMinute === undefined && o.live.tokensPerMinute === undefined;

  /**
   * The common live key: no limits, nothing to count (no account limit for live keys). Answered with a
   * promise made once, without entering `run`: its async frame and phase object were ~1 KB per live
   * request (`bench/results/instructions-vs-bare.md`, "Beyond instructions").
   */
  const uncounted = (key: KeyRecord) => key.env === 'live' && liveUnlimited && !key.rate_limits;
  const ADMITTED = Promise.resolve(NOTHING);
  const REQUEST_ADMITTED = Promise.resolve();
  const ignore = () => {};

  async function run(ctx: RequestContext, ph: Phase): Promise<Admission> {
    const key = ctx.key!;
    const sides = sidesOf(key);
    const tokenCost = ph.estimate === undefined ? undefined : Math.max(0, Math.ceil(ph.estimate));
    const usesBefore = insuranceUses;
    const t0 = process.hrtime.bigint();
    // Every call of the phase in the same tick: one round trip (one write on the script pipe, or one ioredis
    // autopipeline batch). Earlier requests' corrections go into this admission's token call.
    const calls: Promise<unknown>[] = [];
    let any = false;
    for (const s of sides) {
      if (ph.requests && s.rpm !== undefined) {
        any = true;
        calls.push(s.req.consume(s.id, 1).then((r) => void (s.r = r)));
      }
      if (ph.tokens === 'none' || s.tpm === undefined) continue;
      any = true;
      s.taken = takeCorrection(s.tok, s.id);
      if (tokenCost !== undefined || s.taken) {
        calls.push(s.tok.consume(s.id, (tokenCost ?? 0) + (s.taken?.delta ?? 0)).then((t) => void (s.t = t)));
      } else if (s.scope === 'key') {
        // Only read, for the headers of a route that spends no tokens.
        calls.push(s.tok.get(s.id).then((t) => void (s.t = t)));
      }
    }
    if (!any) return NOTHING;
    try {
      await Promise.all(calls);
    } catch (err) {
      // A call carried a correction and failed: queue it again.
      for (const s of sides) if (s.taken) correct(s.tok, s.id, s.taken.delta, s.taken.windowEnd);
      throw err;
    }
    latency().observe(Number(process.hrtime.bigint() - t0) / 1e9);
    if (o.redis) setFallback(insuranceUses !== usesBefore);
    const headers: Record<string, string> = {};
    if (ph.requests) headersFor('requests', sides, headers);
    if (ph.tokens !== 'none') headersFor('tokens', sides, headers);
    ctx.extraHeaders = ctx.extraHeaders ? Object.assign(ctx.extraHeaders, headers) : headers;
    // A refused request's token estimate is given back everywhere it was counted, and the headers show what
    // remains without it.
    const refundTokens = () => {
      if (!tokenCost) return;
      for (const s of sides) {
        if (!s.t || s.tpm === undefined) continue;
        void s.tok.reward(s.id, tokenCost).catch(() => {});
        s.refunded = tokenCost;
      }
      headersFor('tokens', sides, headers);
      Object.assign(ctx.extraHeaders!, headers);
    };
    for (const s of sides) {
      if (s.r && s.rpm !== undefined && s.r.consumedPoints > s.rpm) {
        refundTokens();
        if (ph.tokens === 'none') await tokenHeaders(sides, headers);
        refuse(ctx, s, 'requests', s.rpm, s.r, headers);
      }
    }
    if (tokenCost !== undefined) {
      for (const s of sides) {
        if (!s.t || s.tpm === undefined || s.t.consumedPoints <= s.tpm) continue;
        refundTokens();
        if (tokenCost > s.tpm) {
          // No window will ever admit it: say why, and tell SDKs not to retry.
          o.metrics.rateLimited.inc({ env: key.env, dimension: 'tokens' });
          ctx.log.rate_limit_scope = s.scope;
          const whose = s.scope === 'key' ? "this key's" : "this account's";
          throw new GatewayError(
            'rate_limit_exceeded',
            `This request may use up to ${tokenCost} tokens (prompt estimate + max output), more than ${whose} limit of ${s.tpm} tokens per ${o.windowSeconds}s window. Lower max_tokens or the prompt.`,
            {
              headers: { ...headers, 'x-ratelimit-scope': s.scope, 'x-should-retry': 'false' },
            },
          );
        }
        refuse(ctx, s, 'tokens', s.tpm, s.t, headers);
      }
    }
    if (tokenCost === undefined) return NOTHING;
    // Corrections land only in the window that admitted the estimate; a later window starts clean.
    const counted = sides.filter((s) => s.t && s.tpm !== undefined).map((s) => ({ s, windowEnd: now() + s.t!.msBeforeNext }));
    if (counted.length === 0) return NOTHING;
    return {
      settle(actual) {
        const delta = Math.ceil(actual) - tokenCost;
        if (delta === 0) return;
        const at = now();
        for (const { s, windowEnd } of counted) if (at < windowEnd) correct(s.tok, s.id, delta, windowEnd);
      },
    };
  }

  return {
    admit: (ctx, estimate) =>
      uncounted(ctx.key!) ? ADMITTED : run(ctx, { requests: true, tokens: estimate === undefined ? 'get' : 'consume', estimate }),
    admitRequest: (ctx) =>
      uncounted(ctx.key!) ? REQUEST_ADMITTED : run(ctx, { requests: true, tokens: 'none', estimate: undefined }).then(ignore),
    admitTokens: (ctx, estimate) => (uncounted(ctx.key!) ? ADMITTED : run(ctx, { requests: false, tokens: 'consume', estimate })),
    async close() {
      if (flushTimer) clearTimeout(flushTimer);
      await flush();
    },
  };
}
