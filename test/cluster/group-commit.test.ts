// Group commit on a real 3-master Redis Cluster (docs/ledger.md "Group commit"): one turn's holds for
// accounts on different masters go as one script call per slot, each to its own master; and a master
// whose connection is cut under its batch leaves that batch all run or none run, while the other
// masters' batches of the same turn are answered.
import { setTimeout as sleep } from 'node:timers/promises';
import t from 'tap';
import { startRedisCluster } from '../helpers/redis-cluster.ts';
import { createRedisStore } from '../../src/store/redis-store.ts';
import * as K from '../../src/store/redis-keys.ts';
import { waitFor } from '../helpers/wait.ts';
import { allEntries, settleOf } from '../store/harness.ts';

const FAR = 9_000_000_000_000;
const TS = '2026-11-27T10:00:00.000Z';

const cluster = await startRedisCluster(t);
if (cluster) {
  /** One account per master: the first ids whose balance keys land on three different masters. */
  async function accountsPerMaster(prefix: string): Promise<Map<number, string>> {
    const out = new Map<number, string>();
    for (let i = 0; out.size < 3 && i < 200; i++) {
      const acct = `${prefix}-${i}`;
      const port = await cluster!.masterOf(K.balance(acct));
      if (!out.has(port)) out.set(port, acct);
    }
    return out;
  }
  const evalshaCalls = async (port: number) => {
    const info = await cluster!.cli(port, 'INFO', 'commandstats');
    return Number(/cmdstat_evalsha:calls=(\d+)/.exec(info)?.[1] ?? 0);
  };

  t.test('one call per slot: ten holds for each of three masters in one turn', async (t) => {
    const store = await createRedisStore({ clusterNodes: cluster.addresses, commandTimeoutMs: 2000, settledTtlSeconds: 4260 });
    t.teardown(() => store.close());
    const accounts = await accountsPerMaster('gc-slot');
    t.equal(accounts.size, 3, 'an account on each master');
    for (const acct of accounts.values()) await store.grant(acct, 1_000, undefined, undefined, TS);
    // Warm: ioredis loads each script (EVAL) on first use per node; count only the calls after that.
    await Promise.all([...accounts.values()].flatMap((a) => [store.hold(a, 'w1', 1, FAR), store.hold(a, 'w2', 1, FAR)]));
    const before = new Map(await Promise.all([...accounts.keys()].map(async (p) => [p, await evalshaCalls(p)] as const)));
    const results = await Promise.all(
      [...accounts.values()].flatMap((a) => Array.from({ length: 10 }, (_, i) => store.hold(a, `r${i}`, 10, FAR))),
    );
    t.ok(
      results.every((r) => r.ok),
      'all 30 held',
    );
    for (const [port, acct] of accounts) {
      t.equal((await evalshaCalls(port)) - before.get(port)!, 1, `master ${port}: one script call for ${acct}'s ten holds`);
      t.equal((await store.getAccount(acct)).held_micros, 102, `${acct}: 100 held + the 2 warm-up holds`);
    }
    // Their settles, each saying the hold it expects: an account's turn is a run (run.lua), one call
    // per master, an entry per request.
    const settle = (a: string, id: string, cost: number, hold: number) =>
      store.settle({ ...settleOf(a, id, cost), ts: TS, holdMicros: hold });
    await Promise.all([...accounts.values()].flatMap((a) => [settle(a, 'w1', 1, 1), settle(a, 'w2', 1, 1)]));
    const before2 = new Map(await Promise.all([...accounts.keys()].map(async (p) => [p, await evalshaCalls(p)] as const)));
    const settled = await Promise.all(
      [...accounts.values()].flatMap((a) => Array.from({ length: 10 }, (_, i) => settle(a, `r${i}`, i, 10))),
    );
    t.ok(
      settled.every((r) => !r.replayed && r.entry_id !== ''),
      'all 30 settled',
    );
    for (const [port, acct] of accounts) {
      t.equal((await evalshaCalls(port)) - before2.get(port)!, 1, `master ${port}: one script call for ${acct}'s ten settles`);
      t.strictSame(
        await store.getAccount(acct),
        { id: acct, balance_micros: 1_000 - 2 - 45, held_micros: 0 },
        `${acct}: debited 0 + 1 + … + 9 and the warm-up's 2, nothing held`,
      );
      const entries = await allEntries(store, acct);
      t.strictSame(
        entries.slice(-10).map((e) => [e.request_id, e.amount_micros, e.hold_micros]),
        Array.from({ length: 10 }, (_, i) => [`r${i}`, -i, 10]),
        `${acct}: an entry per request, in the order issued`,
      );
    }
    // A turn of an account's settles and holds (a gateway's turn under load): one run.lua call
    // per master. Warm first: a turn of one settle and one hold each.
    await Promise.all([...accounts.values()].map((a) => store.hold(a, 'x1', 1, FAR)));
    await Promise.all([...accounts.values()].flatMap((a) => [settle(a, 'x1', 1, 1), store.hold(a, 'x2', 1, FAR)]));
    const before3 = new Map(await Promise.all([...accounts.keys()].map(async (p) => [p, await evalshaCalls(p)] as const)));
    const mixed = await Promise.all(
      [...accounts.values()].flatMap((a) => [
        settle(a, 'x2', 1, 1),
        ...Array.from({ length: 5 }, (_, i) => store.hold(a, `m${i}`, 10, FAR)),
      ]),
    );
    t.ok(
      mixed.every((r) => ('ok' in r ? r.ok : !r.replayed)),
      'all 3 settled and 15 held',
    );
    for (const [port, acct] of accounts) {
      t.equal((await evalshaCalls(port)) - before3.get(port)!, 1, `master ${port}: one script call for ${acct}'s settle and five holds`);
      t.strictSame(await store.getAccount(acct), { id: acct, balance_micros: 1_000 - 2 - 45 - 2, held_micros: 50 });
    }
  });

  t.test("a master's connection cut under its batch: that batch all or none, the other masters' batches answered", async (t) => {
    const store = await createRedisStore({ clusterNodes: cluster.addresses, commandTimeoutMs: 2000, settledTtlSeconds: 4260 });
    t.teardown(() => store.close());
    const accounts = await accountsPerMaster('gc-cut');
    for (const acct of accounts.values()) await store.grant(acct, 1_000, undefined, undefined, TS);
    await Promise.all([...accounts.values()].map((a) => store.hold(a, 'warm', 1, FAR)));
    const [cut0, ...others] = [...accounts];
    const [cutPort, cutAcct] = cut0!;
    // Its writes wait at the server; CLIENT KILL still runs.
    await cluster.cli(cutPort, 'CLIENT', 'PAUSE', '3000', 'WRITE');
    const holds = [...accounts.values()].map((a) =>
      Promise.all(
        Array.from({ length: 8 }, (_, i) =>
          store.hold(a, `c${i}`, 10, FAR).then(
            (r) => (r.ok ? 'ok' : 'refused'),
            () => 'failed',
          ),
        ),
      ),
    );
    await sleep(200);
    await cluster.cli(cutPort, 'CLIENT', 'KILL', 'TYPE', 'normal');
    await cluster.cli(cutPort, 'CLIENT', 'UNPAUSE');
    const answers = await Promise.all(holds);
    const byAcct = new Map([...accounts.values()].map((a, i) => [a, answers[i]!]));
    for (const [, acct] of others) t.strictSame(new Set(byAcct.get(acct)), new Set(['ok']), `${acct} (another master): all 8 held`);
    const cut = byAcct.get(cutAcct)!;
    t.equal(new Set(cut).size, 1, `the cut batch's callers all got the same answer (${cut[0]})`);
    await waitFor(async () => (await store.getAccount(cutAcct).catch(() => null)) !== null, 5000, 'the cut master answers again');
    const held = (await store.getAccount(cutAcct)).held_micros - 1;
    t.ok(held === 0 || held === 80, `the cut batch ran whole or not at all: ${held / 10} of 8 holds in Redis`);
    t.comment(`cut batch: answered ${cut[0]}, ${held / 10} of 8 held`);
  });

  /** Script calls that ran on a master: EVALSHA and EVAL (ioredis may send a script's body first), less those refused. */
  const scriptCalls = async (port: number) => {
    const info = await cluster!.cli(port, 'INFO', 'commandstats');
    let n = 0;
    for (const [, calls, failed] of info.matchAll(/cmdstat_eval(?:sha)?:calls=(\d+),.*failed_calls=(\d+)/g))
      n += Number(calls) - Number(failed);
    return n;
  };

  // Both layouts of a lease pass's debits: an entry each, and one entry per pass (store.debit_entries: packed).
  for (const packed of [false, true])
    t.test(
      `credit leases on Cluster: each master's hot account draws from its lease, its settles one call per master${packed ? ' (packed)' : ''}`,
      async (t) => {
        const store = await createRedisStore({
          clusterNodes: cluster.addresses,
          commandTimeoutMs: 2000,
          settledTtlSeconds: 4260,
          leases: true,
          ...(packed && { debitEntries: 'packed' as const }),
        });
        const accounts = await accountsPerMaster(packed ? 'gc-lease-packed' : 'gc-lease');
        for (const acct of accounts.values()) await store.grant(acct, 10_000_000, undefined, undefined, TS);
        // LEASE_AFTER (8) holds each, one at a time: then each account takes its lease on its own master.
        for (let i = 0; i < 8; i++) await Promise.all([...accounts.values()].map((a) => store.hold(a, `w${i}`, 100, FAR)));
        for (const acct of accounts.values())
          await waitFor(async () => (await store.getAccount(acct)).held_micros === 800 + 3200, 2000, `${acct}: its lease of 32 holds`);
        // Redis can show a lease before the take's reply reached this process's book (another connection).
        await waitFor(() => store.leaseStats!().taken === accounts.size, 2000, 'every lease in the book');
        const before = new Map(await Promise.all([...accounts.keys()].map(async (p) => [p, await scriptCalls(p)] as const)));
        const held = await Promise.all(
          [...accounts.values()].flatMap((a) => Array.from({ length: 10 }, (_, i) => store.hold(a, `r${i}`, 100, FAR))),
        );
        t.ok(
          held.every((r) => r.ok),
          'all 30 held',
        );
        for (const [port] of accounts) t.equal(await scriptCalls(port), before.get(port), `master ${port}: drawn, no script call`);
        const settled = await Promise.all(
          [...accounts.values()].flatMap((a) =>
            Array.from({ length: 10 }, (_, i) => store.settle({ ...settleOf(a, `r${i}`, 60), ts: TS, holdMicros: 100 })),
          ),
        );
        t.ok(settled.every((s) => !s.replayed));
        t.equal(
          settled.filter((s) => s.entry_id.includes('.')).length,
          packed ? 30 : 0,
          packed ? "each master's ten settles in one packed entry" : 'an entry per debit',
        );
        for (const [port, acct] of accounts) {
          t.equal((await scriptCalls(port)) - before.get(port)!, 1, `master ${port}: ${acct}'s ten settles in one call`);
          t.equal((await store.getAccount(acct)).held_micros, 800 + 2200, `${acct}: the warm-up holds and the lease's rest`);
        }
        await store.close();
        const reader = await createRedisStore({ clusterNodes: cluster.addresses, commandTimeoutMs: 2000, settledTtlSeconds: 4260 });
        t.teardown(() => reader.close());
        for (const acct of accounts.values()) {
          const state = await reader.getAccount(acct);
          t.equal(state.held_micros, 800, `${acct}: closed, the lease given back; the 8 open holds stay`);
          const entries = await allEntries(reader, acct);
          t.equal(
            state.balance_micros,
            entries.reduce((x, e) => x + e.amount_micros, 0),
            `${acct}: balance = Σ ledger`,
          );
          t.equal(entries.filter((e) => e.kind === 'debit').length, 10, `${acct}: a debit per request`);
        }
      },
    );
}
