// A spooled settle replayed by a process whose hold TTL — so its hold bucket size — differs from the one
// that took the hold (upstream.total_timeout_ms or credit.hold_margin_seconds changed across the restart,
// or another pod replays a shared spool volume): it looks in the bucket the hold was taken in, which the
// settle and its spool line carry (holdBucketDue), so it debits exactly once, on a real Redis.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { createCredit, holdTtlMs } from '../../src/credit/credit.ts';
import { createSpool, replaySpool } from '../../src/credit/spool.ts';
import { createLogger } from '../../src/obs/logger.ts';
import { bucketMsFor } from '../../src/store/hold-bucket.ts';
import { createRedisStore } from '../../src/store/redis-store.ts';
import type { SettleInput } from '../../src/store/types.ts';
import { startRedis } from '../helpers/redis.ts';
import { allEntries, TS } from '../store/harness.ts';

const quiet = createLogger('silent');
const redis = await startRedis(t);
if (redis) {
  // 600 s upstream timeout + 60 s margin (10 s buckets), then the timeout lowered to 300 s (6 s buckets).
  const before = holdTtlMs({ upstream: { totalTimeoutMs: 600_000 }, credit: { holdMarginSeconds: 60 } } as never);
  const after = holdTtlMs({ upstream: { totalTimeoutMs: 300_000 }, credit: { holdMarginSeconds: 60 } } as never);
  const open = (ttl: number, scriptPipe: boolean) =>
    createRedisStore({
      url: redis.url,
      commandTimeoutMs: 2000,
      settledTtlSeconds: 4260,
      holdTtlMs: ttl,
      bucketMs: bucketMsFor(ttl),
      scriptPipe,
    });

  for (const scriptPipe of [true, false]) {
    t.test(
      `replayed under another hold TTL: one debit per request, every hold released (${scriptPipe ? 'pipe' : 'ioredis'})`,
      async (t) => {
        t.same([bucketMsFor(before), bucketMsFor(after)], [10_000, 6_000]);
        const dir = await mkdtemp(join(tmpdir(), 'tollgate-spool-redis-'));
        t.teardown(() => rm(dir, { recursive: true, force: true }));
        const acct = `spool-bucket-${scriptPipe}`;
        const a = await open(before, scriptPipe);
        await a.grant(acct, 1_000_000, undefined, undefined, TS);
        // An expiry that is a multiple of neither bucket size, so the two sizes name different buckets.
        const expiry = Math.ceil((Date.now() + before) / 60_000) * 60_000 + 1234;
        const credit = createCredit({ store: a, logger: quiet });
        // As the route builds a settle: the expiry and the bucket the hold was taken in.
        const settle = (requestId: string, costMicros: number): SettleInput => ({
          account: acct,
          requestId,
          costMicros,
          keyId: 'key_x',
          model: 'm',
          promptTokens: 3,
          completionTokens: 5,
          usageSource: 'upstream',
          ts: TS,
          holdExpiresAtMs: expiry,
          holdBucketDue: credit.holdBucketDue(expiry),
          holdMicros: 5000,
        });
        for (const id of ['landed', 'owed-1', 'owed-2']) t.ok((await a.hold(acct, id, 5000, expiry)).ok);
        // 'landed' reached Redis but its reply was lost: spooled with mayHaveRun. The others never landed.
        t.equal((await a.settle(settle('landed', 700))).replayed, false);
        const spool = createSpool({ dir });
        await spool.append([{ ...settle('landed', 700), mayHaveRun: true }, settle('owed-1', 800), settle('owed-2', 900)]);
        await spool.close();
        await a.close();

        // The next start, with the new config, replays the spool (the owed ones in one turn: a run).
        const b = await open(after, scriptPipe);
        t.teardown(() => b.close());
        const report = await replaySpool({ dir, settle: (s) => b.settle(s), logger: quiet });
        t.match(report, { settles: 3, debited: 2, alreadySettled: 1, unresolved: 0, failed: 0 });
        const debits = (await allEntries(b, acct)).filter((e) => e.kind === 'debit');
        t.strictSame(
          debits.map((e) => [e.request_id, e.amount_micros, e.hold_micros]),
          [
            ['landed', -700, 5000],
            ['owed-1', -800, 5000],
            ['owed-2', -900, 5000],
          ],
          'one debit per request id, each releasing its hold',
        );
        t.strictSame(await b.getAccount(acct), { id: acct, balance_micros: 1_000_000 - 2400, held_micros: 0 });
      },
    );
  }
}
