// Group commit against one request at a time (docs/ledger.md "Group commit"), as a property: random turns of
// holds, then of settles — one to three accounts, keys with and without a budget, replays of the same request
// in a turn, settles without a hold (settled alone afterwards), may-have-run, cached tokens — run once all
// issued in one turn (hold-many.lua / settle-many.lua, a hot account's keys sent once) and once awaited one
// by one (hold.lua / settle.lua) on a twin set of accounts. Every hold answers alike, every settle debits or
// replays alike, and the accounts end alike: balances, buckets, budget counters and ledgers (in order of
// request; a settle without a hold lands after its batch). Every other trial is plain, so its turns go as
// runs (run.lua) or runs declined and sent request by request. Seeded, so a failure
// names its trial.
import t from 'tap';
import { createRedisStore } from '../../src/store/redis-store.ts';
import type { BudgetCharge, Store } from '../../src/store/types.ts';
import { readFileSync } from 'node:fs';
import { luaScript } from '../../src/store/script-pipe.ts';
import { monitorRedis, startRedis } from '../helpers/redis.ts';
import { allEntries, FAR, TS } from './harness.ts';

const TRIALS = 25;

const redis = await startRedis(t);
if (redis) {
  for (const scriptPipe of [true, false]) {
    t.test(
      `a turn of holds and one of settles end as one request at a time does (${scriptPipe ? 'script pipe' : 'ioredis'})`,
      async (t) => {
        await redis.client.flushdb();
        const store = await createRedisStore({ url: redis.url, commandTimeoutMs: 3000, settledTtlSeconds: 4260, scriptPipe });
        t.teardown(() => store.close());
        let seed = scriptPipe ? 29 : 71;
        const rnd = () => ((seed = (seed * 1103515245 + 12345) % 2147483648), seed / 2147483648);
        const pick = <T>(xs: readonly T[]) => xs[Math.floor(rnd() * xs.length)]!;
        let batches = 0;
        const mon = await monitorRedis(redis.url);
        t.teardown(() => mon.close());
        const sha = (n: string) => luaScript(readFileSync(new URL(`../../src/store/lua/${n}.lua`, import.meta.url), 'utf8')).sha;
        const runSha = sha('run');
        for (let trial = 0; trial < TRIALS; trial++) {
          const accounts = ['a', 'b', 'c'].slice(0, 1 + Math.floor(rnd() * 3));
          // Every other trial is plain (one bucket, no budgets, few replays): its accounts' turns are mostly
          // runs (run.lua), some declined (not enough credit, a replay, a hold amount
          // that is not the bucket's) and sent through the -many scripts after.
          const plain = trial % 2 === 1;
          const budgets: (BudgetCharge | undefined)[] = plain
            ? [undefined]
            : [
                undefined,
                { keyId: 'key_k1', period: 'd2026-11-22', limitMicros: 1_000, expireAtMs: null },
                { keyId: 'key_k2', period: 'd2026-11-22', limitMicros: 500, expireAtMs: FAR + 1_000_000 },
              ];
          const n = 2 + Math.floor(rnd() * 14);
          const holds = Array.from({ length: n }, (_, i) => ({
            acct: pick(accounts),
            id: plain && rnd() < 0.9 ? `r${i}` : `r${Math.floor(rnd() * n)}`,
            amount: Math.floor(rnd() * 600),
            expires: plain ? FAR : pick([FAR, FAR + 5_000]),
            budget: pick(budgets),
          }));
          const settles = Array.from({ length: n }, (_, i) => {
            const h = plain && rnd() < 0.8 ? holds[i]! : pick(holds);
            const r = rnd();
            return {
              ...h,
              id: rnd() < 0.15 ? `none${i}` : h.id,
              cost: Math.floor(rnd() * 700),
              cached: rnd() < 0.3 ? 3 : undefined,
              mayHaveRun: rnd() < 0.2,
              // What the gateway passes (the amount it held); sometimes not, or not what the bucket holds.
              holdMicros: r < 0.8 ? h.amount : r < 0.9 ? h.amount + 1 : undefined,
            };
          });
          // The twin accounts: `<trial>-<side>-<account>`.
          const side = (s: string, acct: string) => `${trial}-${s}-${acct}`;
          const grants = accounts.map(() => 1 + Math.floor(rnd() * 3_000));
          for (const s of ['turn', 'seq'])
            for (const [i, acct] of accounts.entries()) await store.grant(side(s, acct), grants[i]!, undefined, undefined, TS);
          const hold = (s: string, h: (typeof holds)[number]) => store.hold(side(s, h.acct), h.id, h.amount, h.expires, h.budget);
          const settle = (s: string, x: (typeof settles)[number]) =>
            store.settle({
              account: side(s, x.acct),
              requestId: x.id,
              costMicros: x.cost,
              keyId: x.budget?.keyId ?? 'key_k0',
              model: 'm',
              promptTokens: 5,
              completionTokens: 6,
              ...(x.cached !== undefined && { cachedTokens: x.cached }),
              usageSource: 'upstream',
              ts: TS,
              holdExpiresAtMs: x.expires,
              mayHaveRun: x.mayHaveRun,
              ...(x.holdMicros !== undefined && { holdMicros: x.holdMicros }),
              ...(x.budget && { budget: x.budget }),
            });
          const calls = Number(/cmdstat_evalsha:calls=(\d+)/.exec(await redis.client.info('commandstats'))?.[1] ?? 0);
          const turnHolds = await Promise.all(holds.map((h) => hold('turn', h)));
          // Plain trials: a later turn holds some again (replays, which a run must not take twice).
          const holdAgain = plain ? holds.filter(() => rnd() < 0.4) : [];
          turnHolds.push(...(await Promise.all(holdAgain.map((h) => hold('turn', h)))));
          // Plain trials: the settles' turn holds for new requests too (and again for some held before), as a
          // gateway's turns under load do: an account's settles and holds as one call (a run of both), or
          // declined and sent as runs. Both sides get credit enough first, so no hold of that turn turns on
          // whether the settles went before it (run.lua's credit check after the settles: group-commit.test.ts).
          // (Not again for a request settled in that turn: a hold and a settle of one request in one turn may
          // go in either order, and the debit's hold_micros tells which.)
          const unsettled = holds.filter((h) => !settles.some((x) => x.acct === h.acct && x.id === h.id));
          const next = plain
            ? Array.from({ length: 1 + Math.floor(rnd() * 8) }, (_, i) =>
                rnd() < 0.8 || unsettled.length === 0 ? { ...pick(holds), id: `n${i}`, amount: Math.floor(rnd() * 600) } : pick(unsettled),
              )
            : [];
          const richer = async (s: string) => {
            if (plain) for (const acct of accounts) await store.grant(side(s, acct), 100_000, undefined, undefined, TS);
          };
          await richer('turn');
          const [turnSettles, turnNext] = await Promise.all([
            Promise.all(settles.map((x) => settle('turn', x))),
            Promise.all(next.map((h) => hold('turn', h))),
          ]);
          if (Number(/cmdstat_evalsha:calls=(\d+)/.exec(await redis.client.info('commandstats'))?.[1] ?? 0) - calls < 2 * n + next.length)
            batches++;
          const seqHolds = [];
          for (const h of [...holds, ...holdAgain]) seqHolds.push(await hold('seq', h));
          const seqSettles = [];
          await richer('seq');
          for (const x of settles) seqSettles.push(await settle('seq', x));
          const seqNext = [];
          for (const h of next) seqNext.push(await hold('seq', h));

          const what = `trial ${trial}`;
          if (plain) {
            // A later turn settles some again: replays, which a run must not take for open holds.
            const again = settles.filter(() => rnd() < 0.6);
            const turnAgain = await Promise.all(again.map((x) => settle('turn', x)));
            const seqAgain = [];
            for (const x of again) seqAgain.push(await settle('seq', x));
            t.strictSame(
              turnAgain.map((r) => r.replayed),
              seqAgain.map((r) => r.replayed),
              `settles again replay alike, ${what}`,
            );
          }
          t.strictSame(turnHolds, seqHolds, `holds answer alike, ${what}`);
          t.strictSame(
            turnNext.map((h) => h.ok),
            seqNext.map((h) => h.ok),
            `holds in the settles' turn taken alike, ${what}`,
          );
          t.strictSame(
            turnSettles.map((r) => [r.replayed, r.entry_id === '']),
            seqSettles.map((r) => [r.replayed, r.entry_id === '']),
            `settles debit or replay alike, ${what}`,
          );
          for (const acct of accounts) {
            const [a, b] = [side('turn', acct), side('seq', acct)];
            t.strictSame(
              await store.getAccount(a),
              { ...(await store.getAccount(b)), id: a },
              `${acct}: the same balance and held, ${what}`,
            );
            const ledger = async (x: string) => (await allEntries(store, x)).map(({ id: _, ...e }) => JSON.stringify(e)).sort();
            t.strictSame(await ledger(a), await ledger(b), `${acct}: the same ledger entries, ${what}`);
            for (const budget of budgets.filter((x) => x !== undefined))
              t.strictSame(
                await store.keySpend(a, budget.keyId, budget.period, Date.now()),
                await store.keySpend(b, budget.keyId, budget.period, Date.now()),
                `${acct}: the same spend on ${budget.keyId}, ${what}`,
              );
          }
          if (!t.passing()) {
            t.comment(`${what} failed with ${JSON.stringify({ holds, settles })}`);
            break;
          }
        }
        // run.lua's calls, by their key count and arguments: settles (4th), holds (5th).
        const runCalls = mon.seen
          .map((l) => l.split(' '))
          .filter((w) => /^evalsha$/i.test(w[0]!) && w[1] === runSha)
          .map((w) => w.slice(3 + Number(w[2])));
        t.ok(runCalls.length >= TRIALS / 2, `the plain turns went as runs (${runCalls.length} run calls)`);
        const both = runCalls.filter((a) => a[3] !== '0' && a[4] !== '0').length;
        t.ok(both >= TRIALS / 8, `settles and holds of an account went as one call (${both} runs of both)`);
        t.ok(batches > TRIALS / 2, `the turns went as batches (${batches} of ${TRIALS} used fewer script calls than requests)`);
      },
    );
  }
}
