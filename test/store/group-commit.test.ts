// Group commit on Redis (docs/ledger.md "Group commit", credit-batch.ts): what the store contract cannot
// see from outside. The holds (and settles) of one event-loop turn reach Redis as ONE script call per
// slot, a lone one as the single-request script, on the script pipe and on plain ioredis alike; and a
// connection lost under a batch leaves all of it run or none of it, with every caller told it may have run.
import { setTimeout as sleep } from 'node:timers/promises';
import t from 'tap';
import type { Test } from 'tap';
import { createRedisStore } from '../../src/store/redis-store.ts';
import * as K from '../../src/store/redis-keys.ts';
import type { Store } from '../../src/store/types.ts';
import { monitorRedis, startRedis } from '../helpers/redis.ts';
import { allEntries, FAR, settleOf, TS, waitFor } from './harness.ts';

const redis = await startRedis(t);
if (redis) {
  const open = async (t: Test, scriptPipe: boolean): Promise<Store> => {
    const store = await createRedisStore({ url: redis.url, commandTimeoutMs: 1000, settledTtlSeconds: 4260, scriptPipe });
    t.teardown(() => store.close());
    return store;
  };
  /** The script calls MONITOR saw: [key count, first key] of each EVALSHA (scripts are loaded first: no EVAL). */
  const scriptCalls = (seen: string[]) =>
    seen
      .map((l) => l.split(' '))
      .filter((w) => w[0]!.toLowerCase() === 'evalsha')
      .map((w) => [Number(w[2]), w[3]] as const);

  for (const scriptPipe of [true, false]) {
    t.test(`one turn's holds and settles are one call each (${scriptPipe ? 'script pipe' : 'ioredis'})`, async (t) => {
      await redis.client.flushdb();
      const store = await open(t, scriptPipe);
      const a = 'gc-a';
      const b = 'gc-b';
      await store.grant(a, 1_000_000, undefined, undefined, TS);
      await store.grant(b, 1_000_000, undefined, undefined, TS);
      // ioredis sends a script's body (EVAL) the first time it is used: each one once before MONITOR starts.
      await Promise.all([store.hold(a, 'w1', 1, FAR), store.hold(a, 'w2', 1, FAR)]);
      await store.hold(a, 'w3', 1, FAR);
      await Promise.all([store.settle(settleOf(a, 'w1', 1)), store.settle(settleOf(a, 'w2', 1))]);
      await store.settle(settleOf(a, 'w3', 1));
      const mon = await monitorRedis(redis.url);
      t.teardown(() => mon.close());
      const ids = Array.from({ length: 20 }, (_, i) => `r${i}`);
      const held = await Promise.all(ids.map((id, i) => store.hold(i % 2 ? a : b, id, 100, FAR)));
      t.ok(held.every((h) => h.ok));
      await waitFor(() => scriptCalls(mon.seen).length >= 1, 2000, 'MONITOR sees the hold call');
      t.strictSame(scriptCalls(mon.seen), [[40, K.balance(b)]], '20 holds of two accounts: one call of 40 keys');
      mon.seen.length = 0;
      const settled = await Promise.all(ids.map((id, i) => store.settle(settleOf(i % 2 ? a : b, id, 10))));
      t.equal(new Set(settled.map((s, i) => `${i % 2} ${s.entry_id}`)).size, 20, 'an entry each (ids are per account stream)');
      await waitFor(() => scriptCalls(mon.seen).length >= 1, 2000, 'MONITOR sees the settle call');
      t.strictSame(scriptCalls(mon.seen), [[60, K.balance(b)]], '20 settles: one call of 60 keys');
      mon.seen.length = 0;
      // A hot account: its keys go once, each request after the first says "the previous one's" (key count 0).
      const hot = Array.from({ length: 10 }, (_, i) => `hot${i}`);
      t.ok((await Promise.all(hot.map((id) => store.hold(a, id, 100, FAR)))).every((h) => h.ok));
      await Promise.all(hot.map((id) => store.settle(settleOf(a, id, 10))));
      await waitFor(() => scriptCalls(mon.seen).length >= 2, 2000, 'MONITOR sees both calls');
      t.strictSame(
        scriptCalls(mon.seen),
        [
          [2, K.balance(a)],
          [3, K.balance(a)],
        ],
        '10 holds and 10 settles of one account: their keys sent once',
      );
      mon.seen.length = 0;
      // Low load: a lone request is a batch of one, sent as the single-request script in its own turn.
      await store.hold(a, 'alone', 100, FAR);
      await store.settle(settleOf(a, 'alone', 10));
      await waitFor(() => scriptCalls(mon.seen).length >= 2, 2000, 'MONITOR sees both calls');
      t.strictSame(
        scriptCalls(mon.seen),
        [
          [2, K.balance(a)],
          [3, K.balance(a)],
        ],
        'hold.lua with 2 keys, settle.lua with 3',
      );
      t.strictSame(await store.getAccount(a), { id: a, balance_micros: 1_000_000 - 3 - 110 - 100, held_micros: 0 });
    });
  }

  t.test('a connection lost under a batch: none of it ran (paused), every caller may-have-run, settles repair it', async (t) => {
    await redis.client.flushdb();
    const store = await open(t, true);
    const a = 'gc-cut';
    await store.grant(a, 1_000, undefined, undefined, TS);
    const admin = redis.client.duplicate();
    t.teardown(() => admin.disconnect());
    // Writes wait at the server (the batch is a script that writes); CLIENT KILL still runs.
    await admin.call('CLIENT', 'PAUSE', '2000', 'WRITE');
    const ids = Array.from({ length: 8 }, (_, i) => `cut${i}`);
    const holds = ids.map((id) =>
      store.hold(a, id, 100, FAR).then(
        () => null,
        (e: unknown) => e,
      ),
    );
    await sleep(100); // written, waiting behind the pause
    await admin.call('CLIENT', 'KILL', 'TYPE', 'normal', 'SKIPME', 'yes');
    const errors = await Promise.all(holds);
    await admin.call('CLIENT', 'UNPAUSE');
    t.equal(errors.filter((e) => e !== null).length, 8, 'every hold of the batch failed');
    t.ok(
      errors.every((e) => (e as { cause?: { sent?: unknown } }).cause?.sent !== false),
      'and none says "never sent": each may have run (the caller settles it at 0)',
    );
    await waitFor(async () => (await store.getAccount(a).catch(() => null)) !== null, 3000, 'the store reconnects');
    t.equal((await store.getAccount(a)).held_micros, 0, 'the killed batch never ran: nothing held');
    // What credit.ts does after a failed hold: a settle at 0 that may have run. Idempotent, so also in one batch.
    const repaired = await Promise.all(ids.map((id) => store.settle(settleOf(a, id, 0, { mayHaveRun: true }))));
    t.equal(repaired.length, 8);
    t.strictSame(await store.getAccount(a), { id: a, balance_micros: 1_000, held_micros: 0 });
  });

  t.test('a connection cut racing a batch: all of it ran or none of it, never a part', async (t) => {
    await redis.client.flushdb();
    const store = await open(t, true);
    // Not autopipelined: its CLIENT KILL is written when called, so it can beat the batch's write.
    const admin = redis.client.duplicate({ enableAutoPipelining: false });
    t.teardown(() => admin.disconnect());
    const outcomes = new Set<string>();
    for (let round = 0; round < 6; round++) {
      const a = `gc-race-${round}`;
      await waitFor(async () => (await store.grant(a, 10_000, `g${round}`, undefined, TS).catch(() => null)) !== null, 3000, 'grant');
      const ids = Array.from({ length: 16 }, (_, i) => `race${i}`);
      const holds = ids.map((id) =>
        store.hold(a, id, 10, FAR).then(
          () => 'ok',
          () => 'failed',
        ),
      );
      // Sent from another connection around the batch's write: before it (same turn), just after, or later.
      const when = round % 3;
      if (when === 1) await new Promise((r) => setImmediate(r));
      if (when === 2) await sleep(1);
      await admin.call('CLIENT', 'KILL', 'TYPE', 'normal', 'SKIPME', 'yes');
      const answered = await Promise.all(holds);
      await waitFor(async () => (await store.getAccount(a).catch(() => null)) !== null, 3000, 'reconnect');
      const inRedis = await admin.hlen(K.holdBucket(a, Math.ceil(FAR / 1000) * 1000));
      t.ok(inRedis === 0 || inRedis === 16, `round ${round}: ${inRedis} of 16 holds in Redis (all or none)`);
      t.ok(new Set(answered).size === 1, `round ${round}: the batch's callers all got the same answer (${answered[0]})`);
      outcomes.add(`${answered[0]}/${inRedis}`);
      // Repair as the gateway does: every failed hold settled at 0, may have run; then nothing is held.
      await Promise.all(ids.map((id) => store.settle(settleOf(a, id, answered[0] === 'ok' ? 1 : 0, { mayHaveRun: true }))));
      const acct = await store.getAccount(a);
      t.equal(acct.held_micros, 0, `round ${round}: nothing left held`);
      const ledger = await allEntries(store, a);
      t.equal(
        acct.balance_micros,
        ledger.reduce((s, e) => s + e.amount_micros, 0),
        `round ${round}: balance = Σ ledger`,
      );
    }
    t.comment(`outcomes (answer/holds in Redis): ${[...outcomes].join(', ')}`);
  });
}

if (redis) {
  for (const scriptPipe of [true, false])
    t.test(
      `a request that fails inside a batch fails alone: another account's calls in the same script stand (${scriptPipe ? 'script pipe' : 'ioredis'})`,
      async (t) => {
        await redis.client.flushdb();
        const store = await createRedisStore({ url: redis.url, commandTimeoutMs: 1000, settledTtlSeconds: 4260, scriptPipe });
        t.teardown(() => store.close());
        const [good, bad] = ['gc-good', 'gc-bad'];
        await store.grant(good, 1_000, undefined, undefined, TS);
        await store.grant(bad, 1_000, undefined, undefined, TS);
        // The bad account's hold bucket is a string: HSETNX on it fails with WRONGTYPE, inside the batch.
        const due = Math.ceil(FAR / 1000) * 1000;
        await redis.client.set(K.holdBucket(bad, due), 'not a hash');
        const held = await Promise.all([
          store.hold(good, 'g1', 100, FAR).then(
            (r) => r.ok,
            () => 'failed',
          ),
          store.hold(bad, 'b1', 100, FAR).then(
            (r) => r.ok,
            () => 'failed',
          ),
          store.hold(good, 'g2', 100, FAR).then(
            (r) => r.ok,
            () => 'failed',
          ),
        ]);
        t.strictSame(held, [true, 'failed', true], 'only the bad account’s hold failed');
        t.strictSame(await store.getAccount(good), { id: good, balance_micros: 1_000, held_micros: 200 });
        t.equal((await store.getAccount(bad)).held_micros, 0);
        // Now its ledger is a string: XADD fails for its settle, after the good account's debit in the same script.
        await redis.client.del(K.holdBucket(bad, due));
        await store.hold(bad, 'b2', 100, FAR);
        await redis.client.del(K.ledger(bad));
        await redis.client.set(K.ledger(bad), 'not a stream');
        const settled = await Promise.all([
          store.settle(settleOf(good, 'g1', 30)).then(
            (r) => r.replayed,
            () => 'failed',
          ),
          store.settle(settleOf(bad, 'b2', 30)).then(
            (r) => r.replayed,
            () => 'failed',
          ),
          store.settle(settleOf(good, 'g2', 40)).then(
            (r) => r.replayed,
            () => 'failed',
          ),
        ]);
        t.strictSame(settled, [false, 'failed', false]);
        const acct = await store.getAccount(good);
        t.strictSame(acct, { id: good, balance_micros: 930, held_micros: 0 }, 'both debits of the good account applied');
        const ledger = await allEntries(store, good);
        t.equal(
          acct.balance_micros,
          ledger.reduce((s, e) => s + e.amount_micros, 0),
          'balance = Σ ledger',
        );
        t.strictSame(
          await store.getAccount(bad),
          { id: bad, balance_micros: 1_000, held_micros: 100 },
          'the failed settle changed nothing',
        );
      },
    );
}
