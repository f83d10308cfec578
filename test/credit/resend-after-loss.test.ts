// A Redis that comes back without the settles it acknowledged — what a replica promoted with replication
// lag is (Redis replicates asynchronously) — on one real redis-server: it is SIGKILLed after the settles
// were answered and started again on the same port from a snapshot taken before them (the holds are
// there, the settles are not). The credit layer sends the settles that landed in the last
// `resendWindowMs` again when the store reports the lost connection (docs/ledger.md "Failover"): each
// request is debited exactly once, every hold released. With the window at 0 (the setting that turns it
// off) the same loss leaves the requests unbilled and their holds held, which is what the resend is for;
// a restart that lost nothing debits nothing twice.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { once } from 'node:events';
import t from 'tap';
import { Redis } from 'ioredis';
import { createCredit } from '../../src/credit/credit.ts';
import { createLogger } from '../../src/obs/logger.ts';
import { createUsage } from '../../src/usage/usage.ts';
import { createRedisStore } from '../../src/store/redis-store.ts';
import type { SettleInput } from '../../src/store/types.ts';
import { freePort } from '../helpers/ports.ts';
import { requireRedis } from '../helpers/redis.ts';
import { allEntries, settleOf, TS, waitFor } from '../store/harness.ts';

const quiet = createLogger('silent');

/** redis-server on `port` with its snapshot file in `dir` (loaded at start), no automatic saves. */
async function serve(port: number, dir: string): Promise<ChildProcess> {
  const child = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--save', '', '--appendonly', 'no'], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let log = '';
  child.stderr!.on('data', (c: Buffer) => (log += c.toString()));
  await waitFor(
    () => {
      if (child.exitCode !== null) throw new Error(`redis-server exited: ${log}`);
      return new Promise<boolean>((resolve) => {
        const probe = new Redis({ port, lazyConnect: true, retryStrategy: () => null, maxRetriesPerRequest: 0 });
        probe.on('error', () => {});
        probe
          .connect()
          .then(() => probe.ping())
          .then(
            () => resolve(true),
            () => resolve(false),
          )
          .finally(() => probe.disconnect());
      });
    },
    10_000,
    `redis-server on ${port}`,
    50,
  );
  return child;
}

const N = 6;
const COST = 1_000;
const HOLD = 5_000;
const GRANT = 1_000_000;

if (requireRedis(t, process.env, true))
  for (const scriptPipe of [true, false])
    for (const [label, windowMs, lose] of [
      ['settles lost by the restart are sent again: each debited once', 5_000, true],
      ['resend off (window 0): the lost settles stay unbilled', 0, true],
      ['nothing lost: the resend replays, nothing debited twice', 5_000, false],
      ['connections dropped, the same server process back: nothing sent again', 5_000, 'blip'],
    ] as const)
      t.test(`${label} (${scriptPipe ? 'pipe' : 'ioredis'})`, async (t) => {
        const dir = await mkdtemp(join(tmpdir(), 'tollgate-resend-'));
        t.teardown(() => rm(dir, { recursive: true, force: true }));
        const port = await freePort();
        let server = await serve(port, dir);
        t.teardown(() => void server.kill('SIGKILL'));
        const admin = new Redis({ port, retryStrategy: () => 50, maxRetriesPerRequest: 1 });
        admin.on('error', () => {});
        t.teardown(() => admin.disconnect());
        const store = await createRedisStore({
          url: `redis://127.0.0.1:${port}`,
          commandTimeoutMs: 500,
          settledTtlSeconds: 4260,
          scriptPipe,
        });
        t.teardown(() => store.close());
        // Every settle the credit layer sends, to tell the resends (sent with mayHaveRun) apart.
        const sent: SettleInput[] = [];
        const settle = store.settle.bind(store);
        store.settle = (i) => (sent.push(i), settle(i));
        const credit = createCredit({ store, logger: quiet, resendWindowMs: windowMs });
        // The usage aggregates of the same requests, flushed after the settles: lost and sent again alike.
        const usage = createUsage({ store, logger: quiet, retentionDays: 400, flushIntervalMs: 50, resendWindowMs: windowMs });
        usage.start();
        t.teardown(() => usage.stop(1000));

        const acct = `acct-${scriptPipe}-${windowMs}-${lose}`;
        await store.grant(acct, GRANT, undefined, undefined, TS);
        const expiresAt = Date.now() + 600_000;
        const inputs: SettleInput[] = [];
        for (let i = 0; i < N; i++) {
          const requestId = `req_${acct}_${i}`;
          await credit.hold(acct, requestId, HOLD, expiresAt);
          inputs.push(
            settleOf(acct, requestId, COST + i, {
              holdExpiresAtMs: expiresAt,
              holdBucketDue: credit.holdBucketDue(expiresAt),
              holdMicros: HOLD,
            }),
          );
        }
        // The snapshot the restarted server comes back with: before the settles, or after them.
        if (lose === true) await admin.save();
        const landed = await Promise.all(inputs.map((i) => credit.settle(i)));
        const day = new Date().toISOString().slice(0, 10);
        for (const i of inputs)
          usage.record({
            account: acct,
            keyId: 'key_a',
            live: true,
            model: 'm',
            promptTokens: 1,
            completionTokens: 1,
            costMicros: i.costMicros,
            at: Date.now(),
          });
        await usage.flush();
        const aggregate = async () => {
          const [row] = await usage.query(acct, day, day, ['day']);
          return row ? [row.requests, row.cost_micros] : [0, 0];
        };
        t.same(await aggregate(), [N, inputs.reduce((s, i) => s + i.costMicros, 0)], 'the usage flush landed');
        t.ok(
          landed.every((r) => r && !r.replayed),
          'every settle answered by the server',
        );
        if (lose === false) await admin.save();

        const resent = () => new Set(sent.filter((i) => i.mayHaveRun).map((i) => i.requestId)).size;
        if (lose === 'blip') {
          // Every client connection cut (the script pipe's and ioredis'); the process and its data stay.
          await admin.call('CLIENT', 'KILL', 'TYPE', 'normal').catch(() => {});
          await waitFor(async () => (await store.ping()) === true, 10_000, 'the store back');
          await new Promise((r) => setTimeout(r, 500));
          t.equal(resent(), 0, 'nothing sent again: the same server process answered (its run_id)');
          t.equal((await allEntries(store, acct)).filter((e) => e.kind === 'debit').length, N, 'each request debited once');
          t.equal((await store.getAccount(acct)).held_micros, 0, 'every hold released');
          t.same(await aggregate(), [N, inputs.reduce((s, i) => s + i.costMicros, 0)], 'the usage counted once');
          return;
        }
        server.kill('SIGKILL');
        await once(server, 'exit');
        server = await serve(port, dir);

        const costs = inputs.reduce((s, i) => s + i.costMicros, 0);
        if (windowMs > 0) {
          // Sent again once the store is back: one debit per request, every hold released.
          await waitFor(async () => (await allEntries(store, acct)).filter((e) => e.kind === 'debit').length >= N, 10_000, 'the debits');
          await waitFor(() => credit.pending === 0, 10_000, 'the resent settles to land');
        } else {
          // Nothing is sent again: wait as long as a resend would have taken, then look.
          await waitFor(async () => (await store.ping()) === true, 10_000, 'the store back');
          await new Promise((r) => setTimeout(r, 500));
        }
        const debits = (await allEntries(store, acct)).filter((e) => e.kind === 'debit');
        const account = await store.getAccount(acct);
        if (windowMs === 0) {
          t.equal(debits.length, 0, 'the lost settles were not sent again: no debit');
          t.equal(account.held_micros, N * HOLD, 'their holds are still held (the reaper would release them unbilled)');
          t.equal(account.balance_micros, GRANT, 'nothing debited');
          t.equal(resent(), 0, 'no settle sent again');
          t.same(await aggregate(), [0, 0], 'the lost usage flush was not sent again');
          return;
        }
        t.same(debits.map((e) => e.request_id).sort(), inputs.map((i) => i.requestId).sort(), 'each request debited exactly once');
        t.equal(account.balance_micros, GRANT - costs, 'the balance is the grant less each cost once');
        t.equal(account.held_micros, 0, 'every hold released');
        t.equal(resent(), N, 'each landed settle was sent again after the lost connection');
        await waitFor(async () => (await aggregate())[0] === N, 10_000, 'the usage aggregates back');
        t.same(await aggregate(), [N, costs], 'the usage aggregates equal the ledger: the lost flush sent again, none counted twice');
        // Each debit entry released the hold it found: the request's own after the loss, none twice.
        t.same(
          debits.map((e) => e.hold_micros),
          inputs.map(() => HOLD),
          'each debit released its hold once',
        );
      });
