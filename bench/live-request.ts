/**
 * One live request's store calls as the gateway makes them, for the Redis benchmarks that drive a store
 * directly (ledger-redis, redis-instructions, bucket-memory): a hold of 1,000 µ-credits expiring the
 * hold TTL after `nowMs`, then its settle of 700 with a full ledger entry (key, model, tokens). Types
 * only from src/: the benchmarks load the store of the git ref they measure.
 */
import type { Store } from '../src/store/types.ts';

export async function liveRequest(
  store: Pick<Store, 'hold' | 'settle'>,
  account: string,
  requestId: string,
  nowMs: number,
  holdTtlMs: number,
): Promise<void> {
  const expiresAt = nowMs + holdTtlMs;
  await store.hold(account, requestId, 1000, expiresAt);
  await store.settle({
    account,
    requestId,
    costMicros: 700,
    keyId: 'key_bench000000000000',
    model: 'llama-3.1-8b',
    promptTokens: 812,
    completionTokens: 64,
    usageSource: 'upstream',
    ts: new Date(nowMs).toISOString(),
    holdExpiresAtMs: expiresAt,
    holdMicros: 1000,
  });
}
