// Credit leases as a property (docs/ledger.md "Leases"): seeded random turns on one or two accounts, some
// rich enough to lease and some not. Each turn issues holds of new requests, settles of held ones (some
// through a second process that has no leases, as the spool's replay would be), repeated settles that
// may have run, and settles of requests whose hold was refused. Every hold and settle of a turn is issued
// at once. At the end everything is settled, both processes close and the reaper passes the buckets.
// Then, per account: balance = Σ ledger, nothing held, one debit per settled request id with its cost,
// and no debit for anything else.
import { setTimeout as sleep } from 'node:timers/promises';
import t from 'tap';
import { createRedisStore } from '../../src/store/redis-store.ts';
import type { Store } from '../../src/store/types.ts';
import { startRedis } from '../helpers/redis.ts';
import { allEntries, settleOf, TS } from './harness.ts';

const TRIALS = 12;

const redis = await startRedis(t);
if (redis) {
  // Both debit layouts a lease pass writes: an entry per debit, and a turn's debits in one entry
  // (`packed`, docs/ledger.md "Packed passes"), read back through the same ledger pages.
  for (const [scriptPipe, debitEntries] of [
    [true, 'compact'],
    [false, 'compact'],
    [true, 'packed'],
    [false, 'packed'],
  ] as const) {
    t.test(
      `random turns with leases end with every request billed once and nothing held (${scriptPipe ? 'pipe' : 'ioredis'}, ${debitEntries})`,
      async (t) => {
        await redis.client.flushdb();
        // A 1 s hold TTL and 1 s buckets: lease windows end and buckets fall due within the test.
        const o = {
          url: redis.url,
          commandTimeoutMs: 3000,
          settledTtlSeconds: 4260,
          holdTtlMs: 1000,
          bucketMs: 1000,
          scriptPipe,
          debitEntries,
        };
        const leased: Store = await createRedisStore({ ...o, leases: true });
        const plain: Store = await createRedisStore({ ...o, leases: false });
        let seed = (scriptPipe ? 7 : 13) + (debitEntries === 'packed' ? 100 : 0);
        let packed = 0;
        const rnd = () => ((seed = (seed * 1103515245 + 12345) % 2147483648), seed / 2147483648);
        let leasedSettles = 0;
        for (let trial = 0; trial < TRIALS; trial++) {
          const accounts = Array.from({ length: 1 + Math.floor(rnd() * 2) }, (_, i) => `p${scriptPipe}-${trial}-${i}`);
          for (const acct of accounts) await leased.grant(acct, rnd() < 0.7 ? 100_000_000 : 20_000, undefined, undefined, TS);
          /** Each request: its account, its hold (taken or not), its expiry, and its settles' outcome. */
          const reqs = new Map<string, { acct: string; amount: number; expires: number; taken: boolean; cost: number; settled: boolean }>();
          let seq = 0;
          const turns = 4 + Math.floor(rnd() * 5);
          for (let turn = 0; turn < turns; turn++) {
            const calls: Promise<unknown>[] = [];
            // New holds: most through the leasing process.
            const n = 4 + Math.floor(rnd() * 20);
            for (let i = 0; i < n; i++) {
              const id = `q${seq++}`;
              const acct = accounts[Math.floor(rnd() * accounts.length)]!;
              const amount = Math.floor(rnd() * 1500);
              const expires = Date.now() + 1000;
              const r = { acct, amount, expires, taken: false, cost: Math.floor(rnd() * (amount + 1)), settled: false };
              reqs.set(id, r);
              const store = rnd() < 0.85 ? leased : plain;
              calls.push(store.hold(acct, id, amount, expires).then((h) => void (r.taken = h.ok)));
            }
            // Settles of requests held in earlier turns, some repeated (may have run), some by the other process.
            for (const [id, r] of reqs) {
              if (r.settled || !r.taken || rnd() < 0.4) continue;
              const store = rnd() < 0.8 ? leased : plain;
              const input = settleOf(r.acct, id, r.cost, { holdMicros: r.amount, holdExpiresAtMs: r.expires });
              calls.push(store.settle(input).then(() => void (r.settled = true)));
              if (store === leased) leasedSettles++;
              if (rnd() < 0.2) calls.push((rnd() < 0.5 ? leased : plain).settle({ ...input, mayHaveRun: true }));
            }
            await Promise.all(calls);
          }
          // The rest: every taken hold settled; a refused one settled at 0 now and then (as after a hold that may have run).
          const rest: Promise<unknown>[] = [];
          for (const [id, r] of reqs) {
            if (r.settled) continue;
            if (!r.taken && rnd() < 0.8) continue;
            if (!r.taken) r.cost = 0;
            const input = settleOf(r.acct, id, r.cost, { holdMicros: r.amount, holdExpiresAtMs: r.expires, mayHaveRun: !r.taken });
            rest.push((rnd() < 0.8 ? leased : plain).settle(input).then(() => void (r.settled = true)));
          }
          await Promise.all(rest);
          for (const acct of accounts) {
            const entries = await allEntries(leased, acct);
            const debits = new Map<string, number[]>();
            packed += entries.filter((e) => e.id.includes('.')).length;
            for (const e of entries)
              if (e.kind === 'debit') debits.set(e.request_id!, [...(debits.get(e.request_id!) ?? []), e.amount_micros]);
            const state = await leased.getAccount(acct);
            const where = `trial ${trial}, ${acct}`;
            t.equal(
              state.balance_micros,
              entries.reduce((s, e) => s + e.amount_micros, 0),
              `${where}: balance = Σ ledger`,
            );
            t.ok(state.held_micros >= 0 && state.held_micros <= state.balance_micros, `${where}: 0 ≤ held ≤ balance`);
            const wrong: string[] = [];
            for (const [id, r] of reqs) {
              if (r.acct !== acct) continue;
              const d = debits.get(id) ?? [];
              if (r.settled ? d.length !== 1 || d[0] !== 0 - r.cost : d.length !== 0)
                wrong.push(`${id}: ${JSON.stringify({ ...r, debits: d })}`);
            }
            t.same(wrong, [], `${where}: one debit of its cost per settled request, none for the others`);
          }
        }
        t.ok(leasedSettles > 100, `${leasedSettles} settles went through the leasing process`);
        if (debitEntries === 'packed') t.ok(packed > 20, `${packed} debits were read from packed entries`);
        else t.equal(packed, 0, 'no packed entry');
        // Both close (the leases give back their rest); once the buckets are due the reaper releases whatever
        // is left (draws settled by the other process, which released nothing).
        await leased.close();
        await sleep(2200);
        const reaper = plain;
        await reaper.reapExpiredHolds(Date.now(), TS);
        const held = await redis.client.keys('{acct:p*}:bal');
        let left = 0;
        for (const k of held) left += Number((await redis.client.hget(k, 'held')) ?? 0);
        t.equal(left, 0, `nothing held in ${held.length} accounts once closed and reaped`);
        await plain.close();
      },
    );
  }
}
