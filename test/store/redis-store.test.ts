// The Redis store against the store contract, plus what only Redis has: Cluster hash tags and outages.
import { setTimeout as sleep } from 'node:timers/promises';
import t from 'tap';
import type { Test } from 'tap';
import { GatewayError } from '../../src/http/errors.ts';
import { createRedisStore } from '../../src/store/redis-store.ts';
import * as K from '../../src/store/redis-keys.ts';
import type { DebitLayout } from '../../src/store/debit-layout.ts';
import type { Invalidation, SettleInput, Store } from '../../src/store/types.ts';
import { startRedis } from '../helpers/redis.ts';
import { startRedisRelay } from '../helpers/redis-relay.ts';
import { runStoreContract } from './contract.ts';
import { allEntries, DEBIT_FIELDS, keyRecordOf, TS, TS2, waitFor } from './harness.ts';
import { charge, keyRecord, settleInput } from './contract-key-controls.ts';

/**
 * A TCP relay in front of Redis. `cut()` drops every connection (the clients reconnect); after it, on
 * each new connection the replies stop at the first subscribe confirmation, which is held back for good.
 */
async function startHoldingRelay(t: Test, port: number): Promise<{ url: string; held: () => number; cut(): void }> {
  let holding = false;
  let held = 0;
  const relay = await startRedisRelay(t, port, () => {
    let stopped = false;
    const holdHere = holding;
    return {
      toClient(chunk, client) {
        // RESP2 array or RESP3 push: the reply to SUBSCRIBE starts with the bulk string "subscribe".
        if (holdHere && !stopped && chunk.includes('$9\r\nsubscribe\r\n')) ((stopped = true), held++);
        if (!stopped) client.write(chunk);
      },
    };
  });
  return {
    url: relay.url,
    held: () => held,
    cut() {
      holding = true;
      relay.cut();
    },
  };
}

// 300 ms: fail fast like production (NOTES §1), yet far above a loopback round trip (~0.1 ms).
const COMMAND_TIMEOUT_MS = 300;
// How long a reaped hold is remembered (production derives it from the config: credit.ts settledMarkerTtlSeconds).
const SETTLED_TTL_S = 4260;

async function openStore(t: Test, url: string, debitEntries?: DebitLayout): Promise<Store> {
  const store = await createRedisStore({
    url,
    commandTimeoutMs: COMMAND_TIMEOUT_MS,
    settledTtlSeconds: SETTLED_TTL_S,
    ...(debitEntries && { debitEntries }),
  });
  t.teardown(() => store.close());
  return store;
}

const redis = await startRedis(t);
if (redis) {
  runStoreContract(
    t,
    async (t) => {
      await redis.client.flushdb();
      return openStore(t, redis.url);
    },
    // Another gateway instance: a second store (own connections) on the same server, no flush.
    { makePeer: (t) => openStore(t, redis.url) },
  );

  // The credit scripts through ioredis (defineCommand), as on Cluster and Sentinel, instead of the script pipe.
  t.test('the contract without the script pipe', async (t) => {
    runStoreContract(t, async (t) => {
      await redis.client.flushdb();
      const store = await createRedisStore({
        url: redis.url,
        commandTimeoutMs: COMMAND_TIMEOUT_MS,
        settledTtlSeconds: SETTLED_TTL_S,
        scriptPipe: false,
      });
      t.teardown(() => store.close());
      return store;
    });
  });

  /** Every key on the server (SCAN, never KEYS). */
  async function allKeys(): Promise<string[]> {
    const keys: string[] = [];
    let cursor = '0';
    do {
      const [next, batch] = await redis!.client.scan(cursor, 'COUNT', 1000);
      cursor = next;
      keys.push(...batch);
    } while (cursor !== '0');
    return keys.sort();
  }

  const settleOf = (account: string, requestId: string, holdExpiresAtMs: number, extra: Partial<SettleInput> = {}): SettleInput => ({
    account,
    requestId,
    costMicros: 10,
    keyId: 'key_a',
    model: 'm',
    promptTokens: 1,
    completionTokens: 1,
    usageSource: 'upstream',
    ts: TS,
    holdExpiresAtMs,
    ...extra,
  });

  // store.debit_entries (docs/ledger.md "Debit entries"): compact by default; field by field while older
  // instances, which read only that, still run. Both layouts read back as the same entries.
  const LAYOUTS: [DebitLayout, (f: string[]) => unknown, unknown][] = [
    ['compact', (f) => [f[0], f[2], f[3]], ['d', 'h', '500']],
    [
      'fields',
      (f) => f.filter((_, i) => i % 2 === 0).join(' '),
      'kind amount_micros ts request_id key_id model prompt_tokens completion_tokens usage_source hold_micros',
    ],
  ];
  for (const [layout, shape, expected] of LAYOUTS) {
    t.test(`debit entries "${layout}": alone or in a batch, read back whole`, async (t) => {
      await redis.client.flushdb();
      const store = await openStore(t, redis.url, layout);
      const far = Date.now() + 600_000;
      await store.grant('compact', 10_000, undefined, undefined, TS);
      for (const id of ['alone', 'b1', 'b2']) t.ok((await store.hold('compact', id, 500, far)).ok);
      await store.settle(settleOf('compact', 'alone', far, { costMicros: 120, model: 'm "quoted"' }));
      // Issued in one turn: one settle-many.lua call.
      await Promise.all([
        store.settle(settleOf('compact', 'b1', far, { costMicros: 0 })),
        store.settle(settleOf('compact', 'b2', far, { costMicros: 70, promptTokens: 40, cachedTokens: 32, usageSource: 'estimated' })),
      ]);
      const raw = (await redis.client.xrange(K.ledger('compact'), '-', '+')) as [string, string[]][];
      t.strictSame(
        raw.slice(1, 3).map(([, f]) => shape(f)),
        [expected, expected],
        layout === 'compact'
          ? 'each debit: its data in `d`, the hold it released in `h`'
          : 'each debit field by field, as earlier versions wrote it',
      );
      const debits = (await allEntries(store, 'compact')).filter((e) => e.kind === 'debit');
      const fields = DEBIT_FIELDS;
      t.strictSame(
        debits.map((e) => Object.keys(e)),
        [fields, fields, [...fields, 'cached_tokens']],
        'read back with every field, in the order the field layout has them (exports keep their bytes)',
      );
      t.strictSame(
        debits.map(({ id: _, ...e }) => e),
        [
          {
            kind: 'debit',
            amount_micros: -120,
            ts: TS,
            request_id: 'alone',
            key_id: 'key_a',
            model: 'm "quoted"',
            prompt_tokens: 1,
            completion_tokens: 1,
            usage_source: 'upstream',
            hold_micros: 500,
          },
          {
            kind: 'debit',
            amount_micros: 0,
            ts: TS,
            request_id: 'b1',
            key_id: 'key_a',
            model: 'm',
            prompt_tokens: 1,
            completion_tokens: 1,
            usage_source: 'upstream',
            hold_micros: 500,
          },
          {
            kind: 'debit',
            amount_micros: -70,
            ts: TS,
            request_id: 'b2',
            key_id: 'key_a',
            model: 'm',
            prompt_tokens: 40,
            completion_tokens: 1,
            usage_source: 'estimated',
            hold_micros: 500,
            cached_tokens: 32,
          },
        ],
      );
      t.ok(Object.is(debits[1]!.amount_micros, 0), 'a free request is 0, never -0');
      t.strictSame(
        await store.getAccount('compact'),
        { id: 'compact', balance_micros: 10_000 - 190, held_micros: 0 },
        'balance = Σ ledger',
      );
      // A run (run.lua: settles of one turn that say their hold) writes the same layout.
      for (const id of ['r1', 'r2']) t.ok((await store.hold('compact', id, 500, far)).ok);
      await Promise.all([
        store.settle(settleOf('compact', 'r1', far, { costMicros: 0, holdMicros: 500 })),
        store.settle(settleOf('compact', 'r2', far, { costMicros: 30, cachedTokens: 2, holdMicros: 500 })),
      ]);
      const runRaw = (await redis.client.xrange(K.ledger('compact'), '-', '+')) as [string, string[]][];
      t.strictSame(shape(runRaw.at(-2)![1]), expected, 'a run writes each debit in the configured layout');
      const runDebits = (await allEntries(store, 'compact')).slice(-2);
      t.strictSame(
        runDebits.map((e) => [e.request_id, e.amount_micros, e.hold_micros, e.cached_tokens]),
        [
          ['r1', 0, 500, undefined],
          ['r2', -30, 500, 2],
        ],
        'and they read back whole',
      );
      t.ok(Object.is(runDebits[0]!.amount_micros, 0), 'a free request in a run is 0, never -0');
      t.strictSame(await store.getAccount('compact'), { id: 'compact', balance_micros: 10_000 - 220, held_micros: 0 });
    });
  }

  t.test('every key of an account carries the {acct:<id>} hash tag', async (t) => {
    await redis.client.flushdb();
    const store = await openStore(t, redis.url);
    const accounts = ['acme', 'team.b:eu-1_x'];
    for (const acct of accounts) {
      await store.createKey(`hash-${acct}`, keyRecordOf(acct, `key_${acct}`, { env: 'live' }));
      await store.grant(acct, 1000, 'idem-1', 'note', TS);
      await store.hold(acct, 'req-settled', 100, 5_000);
      await store.hold(acct, 'req-open', 100, 9_000_000_000_000);
      await store.hold(acct, 'req-expired', 100, 1_000);
      await store.settle(settleOf(acct, 'req-settled', 5_000));
    }
    await store.reapExpiredHolds(2_000, TS);
    await store.reserveShareQuota('acme', 'A1b2C3d4E5f6G7h8J9k1m2', 2, { maxCount: 10, maxBytes: 100, unfundedMaxCount: 10 }, 0);
    await store.putShare({ slug: 'A1b2C3d4E5f6G7h8J9k1m2', account: 'acme', created_at: TS, bytes: 2, files: [], revoked_at: null });

    const keys = await allKeys();
    // Keys that belong to no account: key records (looked up by hash), the id index, shares, the bucket index.
    const global = /^(tg:key:|tg:keyid:|tg:share:)|^tg:hold-buckets$|^tg:ledger:accounts$/;
    const stray = keys.filter((k) => !global.test(k) && !accounts.some((a) => k.startsWith(`{acct:${a}}:`)));
    t.strictSame(stray, [], 'no key outside an account tag except the global ones');
    for (const acct of accounts) {
      const mine = keys.filter((k) => k.startsWith(`{acct:${acct}}:`)).map((k) => k.slice(`{acct:${acct}}:`.length));
      t.strictSame(
        mine,
        [
          'bal',
          'hb:1000',
          'hb:5000',
          'hb:9000000000000',
          'idem',
          'keys',
          `keys-made:${TS.slice(0, 10)}`,
          'ledger',
          ...(acct === 'acme' ? ['shares'] : []),
        ],
        `${acct}: balance, hold buckets (reaped, settled, open), idempotency, key set, keys made today, ledger: no key per request`,
      );
    }
    t.strictSame(await redis.client.hgetall('{acct:acme}:hb:1000'), { 'req-expired': 'r100' }, 'the reaped hold is remembered');
    const ttl = await redis.client.ttl('{acct:acme}:hb:1000');
    t.ok(ttl > SETTLED_TTL_S - 5 && ttl <= SETTLED_TTL_S, `for the configured ${SETTLED_TTL_S} s (${ttl} s left)`);
    t.match(await redis.client.hgetall('{acct:acme}:hb:5000'), { 'req-settled': /^=\d+-\d+$/ }, 'the settled record: "=" and its entry id');
    t.strictSame(await redis.client.hgetall('{acct:acme}:hb:9000000000000'), { 'req-open': 'o100' }, 'the open hold: "o" and its amount');
  });

  t.test('settled requests leave nothing behind once the reaper passed their bucket; one index member per bucket', async (t) => {
    await redis.client.flushdb();
    const store = await openStore(t, redis.url);
    await store.grant('acme', 1_000_000, undefined, undefined, TS);
    await store.hold('acme', 'warm', 1, 1_000);
    await store.settle(settleOf('acme', 'warm', 1_000));
    await store.reapExpiredHolds(1_000, TS);
    const baseline = await allKeys();
    t.strictSame(
      baseline.filter((k) => !k.endsWith(':ledger')),
      ['tg:ledger:accounts', '{acct:acme}:bal'],
      'only the balance, the ledger and the export index (one member per account) stay once the reaper passed',
    );
    const future = Date.now() + 600_000;
    const ids = Array.from({ length: 300 }, (_, i) => `req-${i}`);
    // Expiries spread over 3 seconds: 3 buckets.
    const expiry = (i: number) => future + (i % 3) * 1000;
    await redis.client.config('RESETSTAT');
    await Promise.all(ids.map((id, i) => store.hold('acme', id, 100, expiry(i))));
    const zadds = /cmdstat_zadd:calls=(\d+)/.exec(await redis.client.info('commandstats'))?.[1];
    t.equal(Number(zadds), 3, 'one ZADD per bucket, not per hold (the store remembers what it indexed)');
    await Promise.all(ids.map((id, i) => store.settle(settleOf('acme', id, expiry(i)))));
    t.equal((await allKeys()).length, baseline.length + 4, '3 buckets and the bucket index, for 300 requests');
    t.equal(await redis.client.zcard(K.HOLD_BUCKETS), 3, 'the index has a member per bucket, not per request');
    t.equal(await store.reapExpiredHolds(future + 3_000, TS), 0, 'nothing to release: all were settled');
    t.strictSame(await allKeys(), baseline, 'buckets and index are gone with them');
    t.equal((await allEntries(store, 'acme')).filter((e) => e.kind === 'debit').length, 301, 'the ledger stays the record: one debit each');
  });

  t.test("a deleted key's lifetime budget counter expires, also when a settle in flight lands after the delete", async (t) => {
    await redis.client.flushdb();
    const store = await openStore(t, redis.url);
    await store.grant('gone', 10_000, undefined, undefined, TS);
    for (const [id, spentFirst] of [
      ['key_BBBBBBBBBBBBBBD1', true],
      ['key_BBBBBBBBBBBBBBD2', false],
    ] as const) {
      await store.createKey(`hash-${id}`, keyRecord(id, 'gone', { budget: { limit_micros: 1_000, period: 'total' } }));
      const b = charge(id, 1_000, { period: 't', expireAtMs: null });
      const counter = K.keyBudget('gone', id, 't');
      if (spentFirst) {
        t.equal((await store.hold('gone', `${id}-a`, 100, 9_000_000_000_000, b)).ok, true);
        await store.settle(settleInput('gone', `${id}-a`, 40, { budget: b, keyId: id }));
        t.equal(await redis.client.ttl(counter), -1, 'a lifetime counter has no expiry while its key lives');
      }
      t.equal((await store.hold('gone', `${id}-b`, 100, 9_000_000_000_000, b)).ok, true);
      await store.deleteKey(id);
      t.equal((await store.keySpend('gone', id, 't', Date.now())).spent_micros, 0, 'the delete empties it');
      // The settle of the request still in flight at the delete (its hold was taken before).
      await store.settle(settleInput('gone', `${id}-b`, 30, { budget: b, keyId: id }));
      const ttl = await redis.client.ttl(counter);
      t.ok(
        ttl > 0 && ttl <= SETTLED_TTL_S,
        `then it expires (TTL ${ttl} s, at most the settle window ${SETTLED_TTL_S} s): it stayed for good`,
      );
    }
  });

  t.test(
    "an account's count of keys made per day is in its slot, counts only added keys and expires (limits.max_keys_made_per_day)",
    async (t) => {
      await redis.client.flushdb();
      const store = await openStore(t, redis.url);
      const day = TS.slice(0, 10);
      const counter = K.keysMade('maker', day);
      t.match(counter, /^\{acct:maker\}:/, "in the account's slot, so add-key.lua checks and counts it with the key set");
      t.equal(await store.createKey('hash-made-1', keyRecord('key_MADE000000000001', 'maker'), { maxMadePerDay: 2 }), 'created');
      t.equal(
        await store.createKey('hash-made-1', keyRecord('key_MADE000000000001', 'maker'), { maxMadePerDay: 2 }),
        'created',
        'the same key again',
      );
      t.equal(await redis.client.get(counter), '1', 'a key already there is not counted twice');
      t.equal(await store.createKey('hash-made-2', keyRecord('key_MADE000000000002', 'maker'), { maxMadePerDay: 2 }), 'created');
      t.equal(await store.createKey('hash-made-3', keyRecord('key_MADE000000000003', 'maker'), { maxMadePerDay: 2 }), 'daily_cap');
      t.equal(await redis.client.get(counter), '2', 'a refused create is not counted');
      const ttl = await redis.client.ttl(counter);
      t.ok(ttl > 86_400 && ttl <= 2 * 86_400, `gone two days on (TTL ${ttl} s): it costs nothing after`);
    },
  );

  t.test("a roll's claim on its old key is in the account's slot and goes with the keys' deletes", async (t) => {
    await redis.client.flushdb();
    const store = await openStore(t, redis.url);
    const claims = K.keysRolled('roller');
    t.match(claims, /^\{acct:roller\}:/, "in the account's slot, so add-key.lua claims it with the key set (one slot on Cluster)");
    const old = keyRecord('key_RoLL00000000000A', 'roller');
    const next = keyRecord('key_RoLL00000000000B', 'roller', { rolled_from: old.id });
    await store.createKey('hash-roll-a', old);
    t.equal(await store.createKey('hash-roll-b', next), 'created');
    t.strictSame(await redis.client.hgetall(claims), { [old.id]: next.id });
    await store.deleteKey(old.id);
    t.strictSame(await redis.client.hgetall(claims), {}, "the old key's delete drops its claim");
    await store.createKey('hash-roll-c', keyRecord('key_RoLL00000000000C', 'roller', { rolled_from: next.id }));
    await store.deleteKey('key_RoLL00000000000C');
    t.equal(await redis.client.exists(claims), 0, "the successor's delete drops the claim naming it: nothing left for deleted keys");
  });

  t.test('deleteKey finishes a half-done delete (record gone, the rest left): found by its traces, cleaned, then null', async (t) => {
    await redis.client.flushdb();
    const store = await openStore(t, redis.url);
    const claims = K.keysRolled('halfway');
    const old = keyRecord('key_HaLF00000000000A', 'halfway');
    const next = keyRecord('key_HaLF00000000000B', 'halfway', { rolled_from: old.id });
    await store.createKey('hash-half-a', old);
    t.equal(await store.createKey('hash-half-b', next), 'created');
    await redis.client.hset(K.keysUsed('halfway'), next.id, '2026-11-22T10:00', old.id, '2026-11-22T10:00');
    // A successor half-deleted: only its record went (an older version's delete, its other writes failed).
    await redis.client.del(K.keyRecord('hash-half-b'));
    t.equal(await store.getKey(next.id), null, 'reads no longer find it');
    const done = await store.deleteKey(next.id);
    t.strictSame(done, { record: null, hash: 'hash-half-b' }, 'the delete finishes it (the record was already gone)');
    t.equal(await redis.client.exists(K.keyIdIndex(next.id)), 0, 'its id index is gone');
    t.strictSame(await redis.client.smembers(K.accountKeys('halfway')), [old.id], 'its key-set entry too');
    t.strictSame(Object.keys(await redis.client.hgetall(K.keysUsed('halfway'))), [old.id], 'and its last use');
    t.strictSame(await redis.client.hgetall(claims), {}, "and its old key's claim naming it: the old key may roll again");
    const ttl = await redis.client.ttl(K.keyBudget('halfway', next.id, 't'));
    t.ok(ttl > 0 && ttl <= SETTLED_TTL_S, `its lifetime counter expires (TTL ${ttl} s)`);
    t.equal(await store.deleteKey(next.id), null, 'a second delete finds nothing');

    // Only traces outside the key set left (its SREM had landed): still found and cleaned.
    await redis.client.del(K.keyRecord('hash-half-a'));
    await redis.client.srem(K.accountKeys('halfway'), old.id);
    await redis.client.hset(claims, old.id, 'key_elsewhere');
    t.strictSame(await store.deleteKey(old.id), { record: null, hash: 'hash-half-a' });
    t.equal(await redis.client.exists(K.keysUsed('halfway'), claims, K.keyIdIndex(old.id)), 0, 'its last use, claim and index are gone');
  });

  t.test('the reaper empties large buckets of several accounts in slices, each hold once', async (t) => {
    await redis.client.flushdb();
    const store = await openStore(t, redis.url);
    // 3 accounts × 700 holds in one bucket each: more than one HSCAN slice per bucket and more than one
    // call's budget (~1,000 fields), so slices, buckets continued alone and buckets not started all occur.
    const accounts = ['big-a', 'big-b', 'big-c'];
    const expiry = 7_000;
    for (const acct of accounts) {
      await store.grant(acct, 10_000_000, undefined, undefined, TS);
      await Promise.all(Array.from({ length: 700 }, (_, i) => store.hold(acct, `r${i}`, 10, expiry)));
      // Every third request is settled; the rest are left to the reaper.
      await Promise.all(
        Array.from({ length: 700 }, (_, i) => i)
          .filter((i) => i % 3 === 0)
          .map((i) => store.settle(settleOf(acct, `r${i}`, expiry))),
      );
    }
    const open = 700 - Math.ceil(700 / 3);
    t.equal(await store.reapExpiredHolds(expiry, TS2), 3 * open, 'every open hold released once');
    t.equal(await store.reapExpiredHolds(expiry + 1_000, TS2), 0, 'and never again');
    for (const acct of accounts) {
      t.equal((await store.getAccount(acct)).held_micros, 0, `${acct}: nothing held`);
      const bucket = await redis.client.hgetall(K.holdBucket(acct, expiry));
      t.equal(Object.keys(bucket).length, open, `${acct}: only the reaped holds are remembered`);
      t.ok(
        Object.values(bucket).every((v) => v === 'r10'),
        `${acct}: each as r<amount>`,
      );
      const expired = (await allEntries(store, acct)).filter((e) => e.kind === 'hold_expired');
      t.equal(new Set(expired.map((e) => e.request_id)).size, open, `${acct}: one hold_expired per open hold`);
      t.equal(expired.length, open);
    }
  });

  t.test('migration: holds and settled markers of the previous layout are honoured', async (t) => {
    await redis.client.flushdb();
    const now = Date.now();
    const acct = 'legacy';
    const bal = `{acct:${acct}}:bal`;
    const ledger = `{acct:${acct}}:ledger`;
    // Written the way the previous hold.lua / settle.lua did: a grant, two open holds (one expired), a
    // request settled with its marker, all indexed one request at a time in tg:holds.
    await redis.client.xadd(ledger, '*', 'kind', 'grant', 'amount_micros', 10_000, 'ts', TS);
    const settledId = await redis.client.xadd(
      ledger,
      '*',
      'kind',
      'debit',
      'amount_micros',
      -40,
      'ts',
      TS,
      'request_id',
      'old-settled',
      'hold_micros',
      100,
    );
    await redis.client.hset(bal, 'balance', 9_960, 'held', 500);
    await redis.client.hset(`{acct:${acct}}:holds`, 'old-open', `200:${now + 600_000}`, 'old-expired', `300:${now - 1_000}`);
    await redis.client.zadd(
      'tg:holds',
      now + 600_000,
      JSON.stringify([acct, 'old-open']),
      now - 1_000,
      JSON.stringify([acct, 'old-expired']),
    );
    await redis.client.set(`{acct:${acct}}:done:old-settled`, settledId!, 'EX', 3600);

    const store = await openStore(t, redis.url);
    // The upgraded gateway's settle of an old-layout hold (no bucket of the new layout has it).
    const s = await store.settle(settleOf(acct, 'old-open', now + 600_000, { costMicros: 150 }));
    t.strictSame([s.replayed, s.balance_micros, s.held_micros], [false, 9_810, 300], 'debited once, its 200 released');
    const again = await store.settle(settleOf(acct, 'old-open', now + 600_000, { costMicros: 150, mayHaveRun: true }));
    t.strictSame([again.replayed, again.entry_id], [true, s.entry_id], 'its retry replays');
    t.equal(await redis.client.hexists(`{acct:${acct}}:holds`, 'old-open'), 0, 'the old hold is gone');

    const marker = await store.settle(settleOf(acct, 'old-settled', now + 600_000, { costMicros: 40 }));
    t.strictSame(
      [marker.replayed, marker.entry_id, marker.balance_micros],
      [true, settledId, 9_810],
      'an old marker still stops a second debit',
    );

    t.equal(await store.reapExpiredHolds(Date.now(), TS2), 1, 'the reaper releases the expired old-layout hold');
    t.equal(await redis.client.zcard('tg:holds'), 1, 'old-open stays indexed until its expiry');
    t.equal(await store.reapExpiredHolds(now + 600_000, TS2), 0, 'then it is not released again: its settle did that');
    t.equal(await redis.client.zcard('tg:holds'), 0, 'and the old index is drained');
    t.strictSame(await store.getAccount(acct), { id: acct, balance_micros: 9_810, held_micros: 0 });
    const entries = await allEntries(store, acct);
    t.strictSame(
      entries.map((e) => [e.kind, e.request_id, e.amount_micros, e.hold_micros]),
      [
        ['grant', undefined, 10_000, undefined],
        ['debit', 'old-settled', -40, 100],
        ['debit', 'old-open', -150, 200],
        ['hold_expired', 'old-expired', 0, 300],
      ],
      'the ledger: one debit per request, the expired hold recorded',
    );
    t.equal(
      entries.reduce((sum, e) => sum + e.amount_micros, 0),
      9_810,
      'balance = Σ ledger',
    );
  });

  t.test('Redis down: fails fast with store_unavailable, then the same store recovers', async (t) => {
    const server = await startRedis(t, { restartable: true });
    if (!server) return;
    const store = await openStore(t, server.url);
    const received: Invalidation[] = [];
    store.onInvalidation((m) => received.push(m));
    await store.grant('acme', 1000, undefined, undefined, TS);

    await server.stop();
    const calls: [string, () => Promise<unknown>][] = [
      ['getAccount', () => store.getAccount('acme')],
      ['grant (Lua)', () => store.grant('acme', 1, undefined, undefined, TS)],
      ['hold (Lua)', () => store.hold('acme', 'req-1', 1, 9_000_000_000_000)],
      ['getKeyByHash', () => store.getKeyByHash('hash-1')],
    ];
    for (const [name, call] of calls) {
      const started = Date.now();
      const err = await call().then(
        () => null,
        (e: unknown) => e,
      );
      t.ok(err instanceof GatewayError, `${name} rejects with a GatewayError`);
      t.equal((err as GatewayError | null)?.code, 'store_unavailable', `${name}: store_unavailable`);
      // A bound that proves "no hang" (ioredis defaults would queue for ~74 s), not a speed check.
      t.ok(Date.now() - started < 5000, `${name} does not hang`);
    }
    t.equal(await store.ping(), false, 'ping reports the outage');

    await server.start();
    const until = Date.now() + 15_000;
    while (!(await store.ping()) && Date.now() < until) await new Promise((r) => setTimeout(r, 100));
    t.equal(await store.ping(), true, 'the same store instance reconnects');
    // The restarted server is empty (--save ''), and its script cache too: grant must reload grant.lua.
    const g = await store.grant('acme', 250, 'idem-after', undefined, TS);
    t.equal(g.balance_micros, 250, 'Lua scripts work again after the restart');
    t.strictSame(await store.getAccount('acme'), { id: 'acme', balance_micros: 250, held_micros: 0 });

    // The subscriber connection re-subscribes by itself; keep publishing until one message lands.
    const msg: Invalidation = { kind: 'share', slug: 'A1b2C3d4E5f6G7h8J9k1m2' };
    const subUntil = Date.now() + 15_000;
    while (received.length === 0 && Date.now() < subUntil) {
      await store.publish(msg);
      await new Promise((r) => setTimeout(r, 100));
    }
    t.strictSame(received[0], msg, 'invalidations flow again after the restart');
  });

  /**
   * A store behind a holding relay, its subscriber just reconnected with the SUBSCRIBE reply held back;
   * collects the process's unhandled rejections and what reached the store's error handler.
   */
  async function subscribePending(t: Test): Promise<{ store: Store; errors: Error[]; rejections: unknown[] }> {
    const rejections: unknown[] = [];
    const onRejection = (e: unknown) => void rejections.push(e);
    process.on('unhandledRejection', onRejection);
    t.teardown(() => void process.off('unhandledRejection', onRejection));
    const relay = await startHoldingRelay(t, redis!.port);
    const errors: Error[] = [];
    const store = await createRedisStore({
      url: relay.url,
      commandTimeoutMs: COMMAND_TIMEOUT_MS,
      settledTtlSeconds: SETTLED_TTL_S,
      onError: (e) => errors.push(e),
    });
    relay.cut();
    await waitFor(() => relay.held() > 0, 5000, 'the SUBSCRIBE sent after the reconnect');
    return { store, errors, rejections };
  }

  t.test('closing while the subscriber re-subscribes after a reconnect leaves no unhandled rejection', async (t) => {
    const { store, errors, rejections } = await subscribePending(t);
    // Its reply never comes: close now, as a shutdown may at any moment.
    await store.close();
    await sleep(50);
    t.same(rejections.map(String), [], "the pending SUBSCRIBE failed into the store's error handler, not unhandled");
    t.ok(
      errors.some((e) => /Connection is closed|timed out/.test(e.message)),
      "the store's error handler saw it",
    );
  });

  t.test('a re-subscribe whose reply is late fails into the error handler (unhandled, Node would exit)', async (t) => {
    const { store, errors, rejections } = await subscribePending(t);
    t.teardown(() => store.close());
    // A Redis slow to answer after a restart: the command times out while the store stays open.
    await waitFor(() => errors.some((e) => /timed out/.test(e.message)), 5000, 'the timeout reported to onError');
    await sleep(50);
    t.same(rejections.map(String), [], 'no unhandled rejection');
  });
}
