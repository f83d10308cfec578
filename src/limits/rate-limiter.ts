/**
 * Per-key rate limits (SPEC §1.5, §2a) on rate-limiter-flexible: fixed windows (default one minute) for
 * requests and for tokens — one window per dimension. Test keys get the config defaults, live keys the
 * optional live defaults, and any key may carry an override. The request limit counts every
 * authenticated /v1 request; the token limit admits chat requests on their estimate (prompt estimate +
 * max output) and is corrected with the real usage at settle, so a window's total is what was used.
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
      // Both dimensions in the same tick: one round trip (one write on the script pipe, or one ioredis autopipeline batch).
      const [r, t] = await Promise.all([
        rpm === undefined ? undefined : requests.consume(key.id, 1),
        tpm === undefined ? undefined : tokenCost === undefined ? tokens.get(key.id) : tokens.consume(key.id, tokenCost),
      ]);
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
          const p = delta < 0 ? tokens.reward(key.id, -delta) : tokens.penalty(key.id, delta);
          void p.catch((err: unknown) => o.logger.warn({ err: (err as Error).message }, 'rate limiter: token correction failed'));
        },
      };
    },
  };
}
