/**
 * Per-key rate limits (SPEC §1.5, §2a) on rate-limiter-flexible: fixed windows (default one minute) for
 * requests and for tokens — one window per dimension. Test keys get the config defaults, live keys the
 * optional live defaults, and any key may carry an override. The request limit counts every
 * authenticated /v1 request; the token limit admits chat requests on their estimate (prompt estimate +
 * max output) and is corrected with the real usage at settle, so a window's total is what was used.
 * A correction rides on the key's next admission (one counter script instead of two) or, when none
 * comes within CORRECTION_FLUSH_MS, is sent by itself: this instance's decisions and headers always
 * include it; another instance sees it that much later.
 *
 * Counters live in Redis (shared by every instance: one Lua script per dimension, both in one round
 * trip, on the script pipe on a single node: store/limiter-client.ts). While Redis is unreachable each
 * instance enforces the same limits in memory (rate-limiter-flexible's insurance limiter), with a gauge
 * and a log line saying so.
 */
import { RateLimiterMemory, RateLimiterRedis, type RateLimiterAbstract, type RateLimiterRes } from 'rate-limiter-flexible';
import type { Cluster, Redis } from 'ioredis';
import type { LimiterClient } from '../store/limiter-client.ts';
import { GatewayError } from '../http/errors.ts';
import type { RequestContext } from '../http/context.ts';
import type { Logger } from '../obs/logger.ts';
import type { Metrics } from '../obs/metrics.ts';
import type { KeyRecord } from '../store/types.ts';
import type { LimitSpec } from '../config/schema.ts';
import { formatDuration } from './duration.ts';
import type { Admission, Limits } from './limits.ts';

export interface RateLimitOptions {
  windowSeconds: number;
  test: LimitSpec;
  live: LimitSpec;
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
 * How long a token correction may wait for its key's next admission before it is sent alone. Under load
 * the next admission comes first and carries it: a test-key chat request then runs two counter scripts
 * instead of three (bench/README.md, "What changed the numbers").
 */
export const CORRECTION_FLUSH_MS = 20;

/** Token corrections of one key not yet in the counter, and the end of the window they belong to. */
interface Pending {
  delta: number;
  windowEnd: number;
}

type Dimension = 'requests' | 'tokens';

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
    keyPrefix: prefix,
    insuranceLimiter: insurance,
    rejectIfRedisNotReady: true,
  });
}

function headersFor(dim: Dimension, limit: number, res: RateLimiterRes, out: Record<string, string>): void {
  out[`x-ratelimit-limit-${dim}`] = String(limit);
  out[`x-ratelimit-remaining-${dim}`] = String(Math.max(0, limit - res.consumedPoints));
  out[`x-ratelimit-reset-${dim}`] = formatDuration(res.msBeforeNext);
}

export function createRateLimits(o: RateLimitOptions): Limits {
  const now = o.now ?? Date.now;
  let fallback = false;
  // Bumped whenever the insurance limiter stands in for Redis (down, or hung past the command timeout).
  let insuranceUses = 0;
  const onInsurance = () => void insuranceUses++;
  const requests = limiter(o, 'tg:rl:req', onInsurance);
  const tokens = limiter(o, 'tg:rl:tok', onInsurance);
  const windowMs = o.windowSeconds * 1000;
  const pending = new Map<string, Pending>();
  let flushTimer: NodeJS.Timeout | undefined;

  /** Sends one key's correction by itself (reward or penalty); dropped once its window is over. */
  function send(keyId: string, p: Pending): Promise<unknown> {
    if (p.delta === 0 || now() >= p.windowEnd) return Promise.resolve();
    const call = p.delta < 0 ? tokens.reward(keyId, -p.delta) : tokens.penalty(keyId, p.delta);
    return call.catch((err: unknown) => o.logger.warn({ err: (err as Error).message }, 'rate limiter: token correction failed'));
  }

  function flush(): Promise<unknown> {
    flushTimer = undefined;
    const sends = [...pending].map(([keyId, p]) => send(keyId, p));
    pending.clear();
    return Promise.all(sends);
  }

  /** Queues a correction for the key's next admission, or for the flush timer. */
  function correct(keyId: string, delta: number, windowEnd: number): void {
    const p = pending.get(keyId);
    // Ends computed by two admissions of one window differ by milliseconds, of two windows by about a window.
    if (p && Math.abs(p.windowEnd - windowEnd) < windowMs / 2) {
      p.delta += delta;
      p.windowEnd = Math.min(p.windowEnd, windowEnd);
    } else {
      if (p) void send(keyId, p);
      pending.set(keyId, { delta, windowEnd });
    }
    flushTimer ??= setTimeout(() => void flush(), CORRECTION_FLUSH_MS).unref();
  }

  /** Takes the key's queued correction if its window is still current. */
  function takeCorrection(keyId: string): Pending | undefined {
    const p = pending.get(keyId);
    if (!p) return undefined;
    pending.delete(keyId);
    return now() < p.windowEnd ? p : undefined;
  }

  function limitsOf(key: KeyRecord): { rpm: number | undefined; tpm: number | undefined } {
    const d = key.env === 'test' ? o.test : o.live;
    return {
      rpm: key.rate_limits?.requests_per_minute ?? d.requestsPerMinute,
      tpm: key.rate_limits?.tokens_per_minute ?? d.tokensPerMinute,
    };
  }

  /** Degraded when the last call was served by the insurance limiter: Redis down, or hung (still "ready"). */
  function setFallback(down: boolean): void {
    if (down === fallback) return;
    fallback = down;
    o.metrics.limiterFallback.set(down ? 1 : 0);
    if (down) o.logger.warn('rate limiter: Redis unreachable, enforcing limits per instance in memory');
    else o.logger.info('rate limiter: Redis back, shared counters in use');
  }

  function refuse(ctx: RequestContext, dim: Dimension, limit: number, res: RateLimiterRes, headers: Record<string, string>): never {
    o.metrics.rateLimited.inc({ env: ctx.key!.env, dimension: dim });
    const ms = Math.max(1, res.msBeforeNext);
    const what = dim === 'requests' ? `${limit} requests` : `${limit} tokens`;
    throw new GatewayError(
      'rate_limit_exceeded',
      `Rate limit reached: ${what} per ${o.windowSeconds}s window for this key. The window resets in ${formatDuration(ms)}.`,
      {
        headers: { ...headers, 'retry-after': String(Math.ceil(ms / 1000)), 'retry-after-ms': String(ms) },
      },
    );
  }

  return {
    async admit(ctx, estimate) {
      const key = ctx.key!;
      const { rpm, tpm } = limitsOf(key);
      if (rpm === undefined && tpm === undefined) return NOTHING;
      const usesBefore = insuranceUses;
      const t0 = process.hrtime.bigint();
      const tokenCost = estimate === undefined ? undefined : Math.max(0, Math.ceil(estimate));
      // Earlier requests' corrections go into this admission's counter call, so its count and headers include them.
      const taken = tpm === undefined ? undefined : takeCorrection(key.id);
      const tokenCall =
        tpm === undefined
          ? undefined
          : tokenCost !== undefined || taken
            ? tokens.consume(key.id, (tokenCost ?? 0) + (taken?.delta ?? 0))
            : tokens.get(key.id);
      // Both dimensions in the same tick: one round trip (one write on the script pipe, or one ioredis autopipeline batch).
      let r: RateLimiterRes | undefined;
      let t: RateLimiterRes | null | undefined;
      try {
        [r, t] = await Promise.all([rpm === undefined ? undefined : requests.consume(key.id, 1), tokenCall]);
      } catch (err) {
        // The call carried the correction and failed: queue it again.
        if (taken) correct(key.id, taken.delta, taken.windowEnd);
        throw err;
      }
      o.metrics.limiterLatency.observe(Number(process.hrtime.bigint() - t0) / 1e9);
      if (o.redis) setFallback(insuranceUses !== usesBefore);
      const headers: Record<string, string> = {};
      if (r && rpm !== undefined) headersFor('requests', rpm, r, headers);
      if (tpm !== undefined) {
        if (t) headersFor('tokens', tpm, t, headers);
        else
          Object.assign(headers, {
            'x-ratelimit-limit-tokens': String(tpm),
            'x-ratelimit-remaining-tokens': String(tpm),
            'x-ratelimit-reset-tokens': formatDuration(o.windowSeconds * 1000),
          });
      }
      ctx.extraHeaders = headers;
      // A refused request's token estimate is given back, and the headers show what remains without it.
      const refundTokens = () => {
        if (!t || !tokenCost || tpm === undefined) return;
        void tokens.reward(key.id, tokenCost).catch(() => {});
        headers['x-ratelimit-remaining-tokens'] = String(Math.max(0, tpm - (t.consumedPoints - tokenCost)));
      };
      if (r && rpm !== undefined && r.consumedPoints > rpm) {
        refundTokens();
        refuse(ctx, 'requests', rpm, r, headers);
      }
      if (t && tpm !== undefined && tokenCost !== undefined && t.consumedPoints > tpm) {
        refundTokens();
        if (tokenCost > tpm) {
          // No window will ever admit it: say why, and tell SDKs not to retry.
          o.metrics.rateLimited.inc({ env: key.env, dimension: 'tokens' });
          throw new GatewayError(
            'rate_limit_exceeded',
            `This request may use up to ${tokenCost} tokens (prompt estimate + max output), more than this key's limit of ${tpm} tokens per ${o.windowSeconds}s window. Lower max_tokens or the prompt.`,
            {
              headers: { ...headers, 'x-should-retry': 'false' },
            },
          );
        }
        refuse(ctx, 'tokens', tpm, t, headers);
      }
      if (!t || tokenCost === undefined) return NOTHING;
      // Corrections land only in the window that admitted the estimate; a later window starts clean.
      const windowEnd = now() + t.msBeforeNext;
      return {
        settle(actual) {
          const delta = Math.ceil(actual) - tokenCost;
          if (delta === 0 || now() >= windowEnd) return;
          correct(key.id, delta, windowEnd);
        },
      };
    },
    async close() {
      if (flushTimer) clearTimeout(flushTimer);
      await flush();
    },
  };
}
