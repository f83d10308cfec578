// Group commit on Redis (docs/ledger.md "Group commit", credit-batch.ts): what the store contract cannot
// see from outside. The holds (and settles) of one event-loop turn reach Redis as ONE script call per
// slot, a lone one as the single-request script, on the script pipe and on plain ioredis alike; and a
// connection lost under a batch leaves all of it run or none of it, with every caller told it may have run.
import { readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import t from 'tap';
import type { Test } from 'tap';
import { createRedisStore } from '../../src/store/redis-store.ts';
import * as K from '../../src/store/redis-keys.ts';
import { luaScript } from '../../src/store/script-pipe.ts';
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
  const sha = (name: string) => luaScript(readFileSync(new URL(`../../src/store/lua/${name}.lua`, import.meta.url), 'utf8')).sha;
  const NAMES = new Map(['grant', 'hold', 'settle', 'hold-many', 'settle-many', 'run'].map((n) => [sha(n), n]));
  /** A run.lua call by what it carried (its 4th and 5th arguments: settles, holds). */
  const runOf = (args: string[]) => (args[3] === '0' ? 'hold-run' : args[4] === '0' ? 'settle-run' : 'settle-hold-run');
  /**
   * The script calls MONITOR saw: [script, key count, first key] of each EVALSHA (scripts are loaded first:
   * no EVAL); a run as 'hold-run', 'settle-run' or 'settle-hold-run'.
   */
  const scriptCalls = (seen: string[]) =>
    seen
      .map((l) => l.split(' '))
      .filter((w) => w[0]!.toLowerCase() === 'evalsha')
      .map((w) => {
        const name = NAMES.get(w[1]!) ?? w[1];
        return [name === 'run' ? runOf(w.slice(3 + Number(w[2]))) : name, Number(w[2]), w[3]] as const;
      });

  for (const scriptPipe of [true, false]) {
    t.test(`one turn's holds and settles are one call each (${scriptPipe ? 'script pipe' : 'ioredis'})`, async (t) => {
      await redis.client.flushdb();
      const store = await open(t, scriptPipe);
      const a = 'gc-a';
      const b = 'gc-b';
      await store.grant(a, 1_000_000, undefined, undefined, TS);
      await store.grant(b, 1_000_000, undefined, undefined, TS);
      // ioredis sends a script's body (EVAL) the first time it is used: each one once before MONITOR starts.
      await Promise.all([
        store.hold(a, 'w1', 1, FAR),
        store.hold(a, 'w2', 1, FAR),
        store.hold(b, 'w1', 1, FAR),
        store.hold(b, 'w1b', 1, FAR + 5_000),
      ]);
      await store.hold(a, 'w3', 1, FAR);
      await Promise.all([store.settle(settleOf(a, 'w1', 1)), store.settle(settleOf(a, 'w2', 1))]);
      await Promise.all([store.settle(settleOf(b, 'w1', 1, { holdMicros: 1 })), store.settle(settleOf(b, 'w1b', 1, { holdMicros: 1 }))]);
      await store.settle(settleOf(a, 'w3', 1));
      const mon = await monitorRedis(redis.url);
      t.teardown(() => mon.close());
      const seen = async (n: number, what: string) => {
        await waitFor(() => scriptCalls(mon.seen).length >= n, 2000, `MONITOR sees ${what}`);
        const calls = scriptCalls(mon.seen);
        mon.seen.length = 0;
        return calls;
      };
      const ids = Array.from({ length: 20 }, (_, i) => `r${i}`);
      const held = await Promise.all(ids.map((id, i) => store.hold(i % 2 ? a : b, id, 100, FAR)));
      t.ok(held.every((h) => h.ok));
      // Each account's holds are a run (one bucket, no budget): one pass each, no Lua per request.
      t.strictSame(
        await seen(2, 'the hold runs'),
        [
          ['hold-run', 2, K.balance(b)],
          ['hold-run', 2, K.balance(a)],
        ],
        '20 holds of two accounts: a run each',
      );
      t.strictSame(
        held.filter((_, i) => i % 2).map((h) => h.held_micros),
        Array.from({ length: 10 }, (_, i) => 100 * (i + 1)),
        "each hold of the run answers held as hold.lua would have after it: the run's holds before it and its own",
      );
      // Without the hold amount (SettleInput.holdMicros) a settle is not part of a run: settle-many.lua.
      const settled = await Promise.all(ids.map((id, i) => store.settle(settleOf(i % 2 ? a : b, id, 10))));
      t.equal(new Set(settled.map((s, i) => `${i % 2} ${s.entry_id}`)).size, 20, 'an entry each (ids are per account stream)');
      t.strictSame(await seen(1, 'the settle call'), [['settle-many', 60, K.balance(b)]], '20 settles: one call of 60 keys');
      // A hot account with the hold amounts: a run of holds, a run of settles.
      const hot = Array.from({ length: 10 }, (_, i) => `hot${i}`);
      t.ok((await Promise.all(hot.map((id) => store.hold(a, id, 100, FAR)))).every((h) => h.ok));
      const before = await store.getAccount(a);
      const hotSettled = await Promise.all(hot.map((id, i) => store.settle(settleOf(a, id, 10 + i, { holdMicros: 100 }))));
      t.strictSame(
        await seen(2, 'both calls'),
        [
          ['hold-run', 2, K.balance(a)],
          ['settle-run', 3, K.balance(a)],
        ],
        '10 holds and 10 settles of one account: a run each',
      );
      t.strictSame(
        hotSettled.map((r) => [r.replayed, r.balance_micros, r.held_micros]),
        hot.map((_, i) => [
          false,
          before.balance_micros - Array.from({ length: i + 1 }, (_, j) => 10 + j).reduce((x, y) => x + y),
          before.held_micros - 100 * (i + 1),
        ]),
        'each settle of the run answers balance and held as settle.lua would have after it',
      );
      const entries = (await allEntries(store, a)).slice(-10);
      t.strictSame(
        entries.map((e) => [e.id, e.request_id, e.amount_micros, e.hold_micros]),
        hotSettled.map((r, i) => [r.entry_id, hot[i], -(10 + i), 100]),
        'an entry per request, in the order issued, each with its own debit and hold',
      );
      // A replay of a settled request, a budget, two buckets, a hold amount not in the bucket: not a run.
      await store.hold(b, 'x1', 100, FAR);
      await store.hold(b, 'x2', 100, FAR);
      await store.settle(settleOf(b, 'x1', 5, { holdMicros: 100 }));
      await seen(3, 'two holds and a settle');
      const mixed = await Promise.all([
        store.settle(settleOf(b, 'x1', 5, { holdMicros: 100 })),
        store.settle(settleOf(b, 'x2', 5, { holdMicros: 99 })),
      ]);
      t.strictSame(
        await seen(2, 'the declined run and its settle-many'),
        [
          ['settle-run', 3, K.balance(b)],
          ['settle-many', 3, K.balance(b)],
        ],
        'a run the script declines (a replay, a wrong hold amount) goes through settle-many.lua after it',
      );
      t.strictSame(
        mixed.map((r) => r.replayed),
        [true, false],
        'the replay replays, the other settles',
      );
      const x2 = (await allEntries(store, b)).at(-1)!;
      t.equal(x2.hold_micros, 100, "the hold released is the bucket's, not the one the caller expected");
      // A hold amount that is not a whole number (a settle read back from a spool file is not type-checked
      // field by field) never joins a run: summed as text it would release the wrong amount.
      await Promise.all([store.hold(b, 'z1', 100, FAR), store.hold(b, 'z2', 100, FAR)]);
      await seen(1, 'the hold run');
      const heldBefore = (await store.getAccount(b)).held_micros;
      await Promise.all(['z1', 'z2'].map((id) => store.settle(settleOf(b, id, 5, { holdMicros: '100' as unknown as number }))));
      t.strictSame(await seen(1, 'the settle call'), [['settle-many', 3, K.balance(b)]], 'a hold amount given as text: settle-many.lua');
      t.equal((await store.getAccount(b)).held_micros, heldBefore - 200, 'each hold released by its own amount');
      // A negative hold amount (never the route's) never joins a run: run.lua checks only the total, which
      // a negative amount would let a hold before it exceed. hold-many.lua checks each.
      await Promise.all([store.hold(b, 'n1', 100, FAR), store.hold(b, 'n2', -1, FAR)]);
      t.strictSame(await seen(1, 'the hold call'), [['hold-many', 2, K.balance(b)]], 'a negative amount: hold-many.lua');
      await Promise.all([store.hold(b, 'y1', 100, FAR), store.hold(b, 'y2', 100, FAR + 5_000), store.hold(a, 'y3', 100, FAR)]);
      t.strictSame(
        await seen(1, 'the hold-many call'),
        [['hold-many', 6, K.balance(b)]],
        'two buckets of one account and a lone request of another: hold-many.lua, in the order issued',
      );
      // Low load: a lone request is a batch of one, sent as the single-request script in its own turn.
      await store.hold(a, 'alone', 100, FAR);
      await store.settle(settleOf(a, 'alone', 10));
      t.strictSame(
        await seen(2, 'both calls'),
        [
          ['hold', 2, K.balance(a)],
          ['settle', 3, K.balance(a)],
        ],
        'hold.lua with 2 keys, settle.lua with 3',
      );
      t.strictSame(await store.getAccount(a), { id: a, balance_micros: 1_000_000 - 3 - 100 - 145 - 10, held_micros: 100 });
    });

    t.test(`a run the account cannot cover goes request by request (${scriptPipe ? 'script pipe' : 'ioredis'})`, async (t) => {
      await redis.client.flushdb();
      const store = await open(t, scriptPipe);
      const a = 'gc-short';
      await store.grant(a, 350, undefined, undefined, TS);
      // ioredis sends a script's body (EVAL) the first time it is used: both used once before MONITOR starts.
      await Promise.all([store.hold('gc-none', 'w1', 1, FAR), store.hold('gc-none', 'w2', 1, FAR)]);
      const mon = await monitorRedis(redis.url);
      t.teardown(() => mon.close());
      const held = await Promise.all(['s1', 's2', 's3', 's4', 's5'].map((id) => store.hold(a, id, 100, FAR)));
      t.strictSame(
        held.map((h) => [h.ok, h.held_micros]),
        [
          [true, 100],
          [true, 200],
          [true, 300],
          [false, 300],
          [false, 300],
        ],
        'the first three taken in the order issued, the rest refused',
      );
      await waitFor(() => scriptCalls(mon.seen).length >= 2, 2000, 'MONITOR sees both calls');
      t.strictSame(
        scriptCalls(mon.seen).map((c) => c[0]),
        ['hold-run', 'hold-many'],
        'run.lua declined the run (350 < 500) and wrote nothing; hold-many.lua checked each',
      );
      t.strictSame(await store.getAccount(a), { id: a, balance_micros: 350, held_micros: 300 });
      // A replay inside a later run: declined too, and the replay takes nothing.
      mon.seen.length = 0;
      const again = await Promise.all([store.hold(a, 's1', 100, FAR), store.hold(a, 's6', 10, FAR)]);
      t.strictSame(
        again.map((h) => h.ok),
        [true, true],
      );
      t.equal((await store.getAccount(a)).held_micros, 310, 's1 replayed (nothing held twice), s6 taken');
    });
    t.test(
      `a turn's settles and holds of one account are one call, settles first (${scriptPipe ? 'script pipe' : 'ioredis'})`,
      async (t) => {
        await redis.client.flushdb();
        const store = await open(t, scriptPipe);
        const a = 'gc-turn';
        // 1,000 µ-credits, all of it held by five open requests: new holds fit only once they are settled.
        await store.grant(a, 1_000, undefined, undefined, TS);
        const open5 = ['p0', 'p1', 'p2', 'p3', 'p4'];
        t.ok((await Promise.all(open5.map((id) => store.hold(a, id, 200, FAR)))).every((h) => h.ok));
        // ioredis sends a script's body (EVAL) the first time it is used: each one once before MONITOR starts.
        const w = 'gc-warm';
        await store.grant(w, 1_000, undefined, undefined, TS);
        for (const id of ['w1', 'w2', 'w3', 'w4']) await store.hold(w, id, 1, FAR);
        await Promise.all([store.settle(settleOf(w, 'w1', 1, { holdMicros: 1 })), store.hold(w, 'w5', 1, FAR)]);
        await Promise.all([store.settle(settleOf(w, 'w2', 1, { holdMicros: 1 })), store.settle(settleOf(w, 'w3', 1, { holdMicros: 1 }))]);
        await Promise.all([store.settle(settleOf(w, 'w4', 1)), store.settle(settleOf(w, 'w5', 1))]);
        await Promise.all([store.hold(w, 'w6', 1, FAR), store.hold(w, 'w7', 1, FAR)]);
        await Promise.all([store.hold(w, 'w8', 1, FAR), store.hold(w, 'w9', 1, FAR + 5_000)]);
        const mon = await monitorRedis(redis.url);
        t.teardown(() => mon.close());
        const seen = async (n: number, what: string) => {
          await waitFor(() => scriptCalls(mon.seen).length >= n, 2000, `MONITOR sees ${what}`);
          const calls = scriptCalls(mon.seen).map((c) => c[0]);
          mon.seen.length = 0;
          return calls;
        };
        /** One turn: settles (request id, cost, the hold it expects) and holds (request id, amount) of `a`. */
        const turn = (settles: [string, number, number][], holds: [string, number][]) =>
          Promise.all([
            Promise.all(settles.map(([id, cost, hold]) => store.settle(settleOf(a, id, cost, { holdMicros: hold })))),
            Promise.all(holds.map(([id, amount]) => store.hold(a, id, amount, FAR))),
          ]);
        // One turn: the five settle (50 each: 250 debited, 1,000 released) and three new holds take the 750 left.
        const [settled, held] = await turn(
          open5.map((id) => [id, 50, 200]),
          ['q0', 'q1', 'q2'].map((id) => [id, 250]),
        );
        t.strictSame(await seen(1, 'the turn'), ['settle-hold-run'], 'five settles and three holds of one account: one call');
        t.strictSame(
          settled.map((r) => [r.replayed, r.balance_micros, r.held_micros]),
          open5.map((_, i) => [false, 1_000 - 50 * (i + 1), 1_000 - 200 * (i + 1)]),
          'each settle answers as settle.lua would have after it, the settles before the holds',
        );
        t.strictSame(
          held.map((h) => [h.ok, h.balance_micros, h.held_micros]),
          [
            [true, 750, 250],
            [true, 750, 500],
            [true, 750, 750],
          ],
          'each hold answers as hold.lua would have after it, with the credit the settles freed',
        );
        t.strictSame(
          (await allEntries(store, a)).slice(-5).map((e) => [e.id, e.request_id, e.amount_micros, e.hold_micros]),
          settled.map((r, i) => [r.entry_id, open5[i], -50, 200]),
          'an entry per settle, in the order issued',
        );
        t.strictSame(await store.getAccount(a), { id: a, balance_micros: 750, held_micros: 750 });
        // The settles free too little for the holds: declined, nothing written; then the settles as a run, and
        // once they are done the holds as a run, declined too, so hold by hold.
        const [again, more] = await turn(
          [
            ['q0', 100, 250],
            ['q1', 100, 250],
          ],
          ['m0', 'm1', 'm2'].map((id) => [id, 200]),
        );
        t.strictSame(
          await seen(4, 'the declined turn'),
          ['settle-hold-run', 'settle-run', 'hold-run', 'hold-many'],
          'declined (300 free after the settles, 600 asked): runs of each kind, then hold-many.lua',
        );
        t.strictSame(
          again.map((r) => [r.replayed, r.balance_micros, r.held_micros]),
          [
            [false, 650, 500],
            [false, 550, 250],
          ],
          'the settles settled once each',
        );
        t.strictSame(
          more.map((h) => [h.ok, h.held_micros]),
          [
            [true, 450],
            [false, 450],
            [false, 450],
          ],
          'the holds checked one by one after the settles',
        );
        // A replayed settle in the turn: declined; the settles go as settle-many.lua, the holds as their run.
        const [replay, late] = await turn(
          [
            ['q0', 100, 250],
            ['q2', 100, 250],
          ],
          [
            ['r0', 1],
            ['r1', 1],
          ],
        );
        t.strictSame(
          await seen(4, 'the turn with a replay'),
          ['settle-hold-run', 'settle-run', 'settle-many', 'hold-run'],
          'declined for the replay: the settles one by one, then the hold run',
        );
        t.strictSame(
          replay.map((r) => r.replayed),
          [true, false],
          'q0 replays, q2 settles',
        );
        t.ok(
          late.every((h) => h.ok),
          'both holds taken',
        );
        t.strictSame(await store.getAccount(a), { id: a, balance_micros: 450, held_micros: 202 }, 'nothing debited or held twice');
        // A hold of the turn already in the bucket (a replay of an open hold): declined; the settle as a run,
        // then the holds, whose run is declined too, one by one: the replay holds nothing twice.
        await store.hold(a, 'open', 10, FAR);
        t.strictSame(await seen(1, 'the hold'), ['hold']);
        const [[s1], replayed] = await turn(
          [['r0', 1, 1]],
          [
            ['open', 10],
            ['fresh', 10],
          ],
        );
        t.strictSame(
          await seen(4, 'the turn with a held request again'),
          ['settle-hold-run', 'settle-run', 'hold-run', 'hold-many'],
          'declined for the hold already in the bucket',
        );
        t.equal(s1!.replayed, false);
        t.strictSame(
          replayed.map((h) => [h.ok, h.held_micros]),
          [
            [true, 211],
            [true, 221],
          ],
          'the replay holds nothing more, the new hold is taken',
        );
        // A bucket the reaper is emptying ('reaped' through its due time, some fields still there): its open
        // holds settle, but no new hold goes into it (hold.lua: refused, -1).
        const due = Math.ceil(FAR / 10_000) * 10_000;
        t.equal(await redis.client.hexists(K.holdBucket(a, due), 'fresh'), 1, 'the bucket of these holds');
        await redis.client.hset(K.balance(a), 'reaped', due);
        mon.seen.length = 0;
        const [[s2], stale] = await turn(
          [['fresh', 1, 10]],
          [
            ['late1', 1],
            ['late2', 1],
          ],
        );
        t.strictSame(
          await seen(4, 'the turn into a reaped bucket'),
          ['settle-hold-run', 'settle-run', 'hold-run', 'hold-many'],
          'declined for the stale bucket',
        );
        t.equal(s2!.replayed, false, 'the open hold settles');
        t.strictSame(
          stale.map((h) => h.ok),
          [false, false],
          'no hold taken into the stale bucket',
        );
        t.strictSame(await store.getAccount(a), { id: a, balance_micros: 448, held_micros: 211 });
        // A free model: holds of 0 and settles of 0 change no sum, so the run reads balance and held instead
        // of taking them from its HINCRBYs.
        const z = 'gc-free';
        await store.grant(z, 500, undefined, undefined, TS);
        await store.hold(z, 'open', 100, FAR);
        t.ok((await Promise.all(['f1', 'f2'].map((id) => store.hold(z, id, 0, FAR)))).every((x) => x.ok));
        const free = await Promise.all(['f1', 'f2'].map((id) => store.settle(settleOf(z, id, 0, { holdMicros: 0 }))));
        t.strictSame(await seen(4, 'the grant, the hold, the hold run and the settle run'), ['grant', 'hold', 'hold-run', 'settle-run']);
        t.strictSame(
          free.map((r) => [r.replayed, r.balance_micros, r.held_micros]),
          [
            [false, 500, 100],
            [false, 500, 100],
          ],
          'each free settle answers the balance and held as they are',
        );
      },
    );
  }

  // Both shapes of a batch: a run (one account, one bucket: run.lua) and a -many call (the same
  // account's holds alternating between two buckets: hold-many.lua).
  const SHAPES = [
    { shape: 'a run', expiry: (_i: number) => FAR },
    { shape: 'a -many call', expiry: (i: number) => (i % 2 ? FAR : FAR + 5_000) },
  ];
  const buckets = (a: string) => [K.holdBucket(a, Math.ceil(FAR / 1000) * 1000), K.holdBucket(a, Math.ceil((FAR + 5_000) / 1000) * 1000)];

  for (const { shape, expiry } of SHAPES) {
    t.test(
      `a connection lost under a batch (${shape}): none of it ran (paused), every caller may-have-run, settles repair it`,
      async (t) => {
        await redis.client.flushdb();
        const store = await open(t, true);
        const a = 'gc-cut';
        await store.grant(a, 1_000, undefined, undefined, TS);
        const admin = redis.client.duplicate();
        t.teardown(() => admin.disconnect());
        // Writes wait at the server (the batch is a script that writes); CLIENT KILL still runs.
        await admin.call('CLIENT', 'PAUSE', '2000', 'WRITE');
        const ids = Array.from({ length: 8 }, (_, i) => `cut${i}`);
        const holds = ids.map((id, i) =>
          store.hold(a, id, 100, expiry(i)).then(
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
        const repaired = await Promise.all(
          ids.map((id, i) => store.settle(settleOf(a, id, 0, { mayHaveRun: true, holdExpiresAtMs: expiry(i), holdMicros: 100 }))),
        );
        t.equal(repaired.length, 8);
        t.strictSame(await store.getAccount(a), { id: a, balance_micros: 1_000, held_micros: 0 });
      },
    );

    t.test(`a connection cut racing a batch (${shape}): all of it ran or none of it, never a part`, async (t) => {
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
        const holds = ids.map((id, i) =>
          store.hold(a, id, 10, expiry(i)).then(
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
        let inRedis = 0;
        for (const bucket of buckets(a)) inRedis += await admin.hlen(bucket);
        t.ok(inRedis === 0 || inRedis === 16, `round ${round}: ${inRedis} of 16 holds in Redis (all or none)`);
        t.ok(new Set(answered).size === 1, `round ${round}: the batch's callers all got the same answer (${answered[0]})`);
        outcomes.add(`${answered[0]}/${inRedis}`);
        // Repair as the gateway does: every failed hold settled at 0, may have run; then nothing is held.
        await Promise.all(
          ids.map((id, i) =>
            store.settle(settleOf(a, id, answered[0] === 'ok' ? 1 : 0, { mayHaveRun: true, holdExpiresAtMs: expiry(i), holdMicros: 10 })),
          ),
        );
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
          // Another bucket: the good account's calls are not a run, so both accounts share hold-many.lua.
          store.hold(good, 'g2', 100, FAR + 5_000).then(
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
          store.settle(settleOf(good, 'g2', 40, { holdExpiresAtMs: FAR + 5_000 })).then(
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

if (redis) {
  for (const scriptPipe of [true, false])
    t.test(
      `a run that fails fails its account alone: another account's run stands (${scriptPipe ? 'script pipe' : 'ioredis'})`,
      async (t) => {
        await redis.client.flushdb();
        const store = await createRedisStore({ url: redis.url, commandTimeoutMs: 1000, settledTtlSeconds: 4260, scriptPipe });
        t.teardown(() => store.close());
        const [good, bad] = ['gr-good', 'gr-bad'];
        await store.grant(good, 1_000, undefined, undefined, TS);
        await store.grant(bad, 1_000, undefined, undefined, TS);
        const due = Math.ceil(FAR / 1000) * 1000;
        await redis.client.set(K.holdBucket(bad, due), 'not a hash');
        const outcome = (p: Promise<{ ok?: boolean; replayed?: boolean }>) =>
          p.then(
            (r) => r.ok ?? !r.replayed,
            () => 'failed',
          );
        // Two holds each, one bucket each: a run per account.
        const held = await Promise.all(['g1', 'b1', 'g2', 'b2'].map((id) => outcome(store.hold(id[0] === 'g' ? good : bad, id, 100, FAR))));
        t.strictSame(held, [true, 'failed', true, 'failed'], "the bad account's run failed (WRONGTYPE), the good one's was taken");
        t.strictSame(await store.getAccount(good), { id: good, balance_micros: 1_000, held_micros: 200 });
        t.equal((await store.getAccount(bad)).held_micros, 0, 'the failed run held nothing');
        // Now the bad account's ledger is a string: its settle run's first XADD fails before anything is written.
        await redis.client.del(K.holdBucket(bad, due));
        await Promise.all([store.hold(bad, 'b1', 100, FAR), store.hold(bad, 'b2', 100, FAR)]);
        await redis.client.set(K.ledger(bad), 'not a stream');
        const settled = await Promise.all(
          ['g1', 'b1', 'g2', 'b2'].map((id, i) =>
            outcome(store.settle(settleOf(id[0] === 'g' ? good : bad, id, 10 * (i + 1), { holdMicros: 100 }))),
          ),
        );
        t.strictSame(settled, [true, 'failed', true, 'failed']);
        t.strictSame(
          await store.getAccount(good),
          { id: good, balance_micros: 1_000 - 10 - 30, held_micros: 0 },
          "the good account's run applied",
        );
        t.strictSame(
          await store.getAccount(bad),
          { id: bad, balance_micros: 1_000, held_micros: 200 },
          'the failed settle run changed nothing: its holds are still open',
        );
        t.strictSame(
          await redis.client.hmget(K.holdBucket(bad, due), 'b1', 'b2'),
          ['o100', 'o100'],
          'and their fields untouched, so a retry settles them',
        );
      },
    );
}
