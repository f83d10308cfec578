// Shutdown's wait for settles (credit.drain): a settle announced with expect() but not started yet (billing
// still awaits the tokenizer) is waited for, and so is the settle it then starts; the deadline still holds.
import t, { type Test } from 'tap';
import {
  createCredit,
  holdNotRun,
  holdTtlMs,
  neverSent,
  settledMarkerTtlSeconds,
  SETTLE_RETRY_WINDOW_MS,
} from '../../src/credit/credit.ts';
import { GatewayError } from '../../src/http/errors.ts';
import { createLogger } from '../../src/obs/logger.ts';
import { createMemoryStore } from '../../src/store/memory-store.ts';
import type { SettleInput } from '../../src/store/types.ts';
import { captureLogs } from '../helpers/logs.ts';

const TS = '2026-11-22T00:00:00.000Z';
const quiet = createLogger('silent');

const EXPIRY = Date.now() + 60_000;

function input(requestId: string): SettleInput {
  return {
    holdExpiresAtMs: EXPIRY,
    account: 'acme',
    requestId,
    costMicros: 40,
    keyId: 'key_x',
    model: 'm',
    promptTokens: 1,
    completionTokens: 1,
    usageSource: 'upstream',
    ts: TS,
  };
}

t.test('drain waits for an expected settle, then for the settle it starts', async (t) => {
  const store = createMemoryStore();
  await store.grant('acme', 1000, undefined, undefined, TS);
  await store.hold('acme', 'req-1', 100, EXPIRY);
  // A store whose settle takes 50 ms, as a Redis round trip under load might.
  const slow = { ...store, settle: async (i: SettleInput) => (await new Promise((r) => setTimeout(r, 50)), store.settle(i)) };
  const credit = createCredit({ store: slow, logger: quiet });
  const started = credit.expect();
  t.equal(credit.pending, 1, 'an expected settle counts as pending');
  // Billing finishes 80 ms later and hands the settle over.
  setTimeout(() => {
    void credit.settle(input('req-1'));
    started();
  }, 80);
  const t0 = Date.now();
  await credit.drain(2000);
  const waited = Date.now() - t0;
  t.ok(waited >= 120, `drain returned after the settle landed (${waited} ms: 80 ms billing + 50 ms settle)`);
  t.equal(credit.pending, 0, 'nothing pending afterwards');
  const acct = await store.getAccount('acme');
  t.same([acct.balance_micros, acct.held_micros], [960, 0], 'the debit landed and the hold was released before drain returned');
});

t.test('drain gives up at its deadline when an expected settle never starts', async (t) => {
  const credit = createCredit({ store: createMemoryStore(), logger: quiet });
  const started = credit.expect();
  const t0 = Date.now();
  await credit.drain(150);
  const waited = Date.now() - t0;
  t.ok(waited >= 140 && waited < 1000, `returned at the deadline (${waited} ms)`);
  t.equal(credit.pending, 1, 'the expected settle is still pending');
  started();
  await new Promise((r) => setImmediate(r));
  t.equal(credit.pending, 0, 'and leaves the count once it is marked done');
});

t.test('drain with nothing pending returns at once', async (t) => {
  const credit = createCredit({ store: createMemoryStore(), logger: quiet });
  const t0 = Date.now();
  await credit.drain(5000);
  t.ok(Date.now() - t0 < 1000, `no wait for the 5 s deadline (${Date.now() - t0} ms)`);
});

/**
 * A store whose settle fails its first `failures` calls, recording when each call started and what it was
 * given. `cause` is what the store error carries: by default a command that was sent and never answered.
 */
function flaky(failures: number, cause: unknown = new Error('redis command timed out after 300 ms')) {
  const store = createMemoryStore();
  const calls: number[] = [];
  const inputs: SettleInput[] = [];
  const settle = async (i: SettleInput) => {
    calls.push(Date.now());
    inputs.push(i);
    if (calls.length <= failures) throw new GatewayError('store_unavailable', 'down', { cause });
    return store.settle(i);
  };
  return { store: { ...store, settle }, inner: store, calls, inputs };
}

/** Retry sleeps are unref'd (they must not keep a stopping gateway alive): keep this test's process up. */
function keepAlive(t: Test): void {
  const timer = setInterval(() => {}, 1000);
  t.teardown(() => clearInterval(timer));
}

t.test('a failing settle is retried only inside its window, then abandoned with a line to reconcile from', async (t) => {
  keepAlive(t);
  const { store, calls } = flaky(Infinity);
  const { logger, lines } = captureLogs();
  // 100 ms back-off, then 200 ms: the third attempt would start past a 250 ms window.
  const credit = createCredit({ store, logger, retryWindowMs: 250 });
  const result = await credit.settle(input('req-9'));
  t.equal(result, undefined, 'resolves without a result');
  t.equal(calls.length, 2, 'attempts at 0 and ~100 ms; none would start inside the window after that');
  t.ok(
    calls.every((c) => c - calls[0]! <= 250),
    'no attempt started past the window',
  );
  t.equal(credit.pending, 0, 'no longer pending: shutdown does not wait for it');
  const abandoned = lines.find((l) => typeof l.msg === 'string' && l.msg.startsWith('settle abandoned'));
  t.ok(abandoned, 'an error line says the settle was abandoned');
  t.equal(abandoned?.level, 50, 'at error level');
  t.match(
    abandoned?.settle,
    { account: 'acme', requestId: 'req-9', costMicros: 40, promptTokens: 1, completionTokens: 1, usageSource: 'upstream', ts: TS },
    'the line carries the whole ledger entry',
  );
  t.equal(abandoned?.attempts, 2);
});

t.test('a settle that lands inside its window debits once', async (t) => {
  keepAlive(t);
  const { store, inner, calls } = flaky(2);
  await inner.grant('acme', 1000, undefined, undefined, TS);
  await inner.hold('acme', 'req-3', 100, EXPIRY);
  const { logger, lines } = captureLogs();
  const credit = createCredit({ store, logger, retryWindowMs: 1000 });
  const result = await credit.settle(input('req-3'));
  t.equal(calls.length, 3, 'two failures, then the attempt that lands');
  t.equal(result?.replayed, false);
  t.same((await inner.getAccount('acme')).balance_micros, 960, 'debited once');
  t.notOk(
    lines.some((l) => typeof l.msg === 'string' && l.msg.startsWith('settle abandoned')),
    'not abandoned',
  );
});

t.test('a retry says an earlier attempt may have run, unless that attempt was never sent', async (t) => {
  keepAlive(t);
  const sent = flaky(2);
  const result = await createCredit({ store: sent.store, logger: quiet, retryWindowMs: 2000 }).settle(input('req-4'));
  t.equal(result?.replayed, false);
  t.strictSame(
    sent.inputs.map((i) => i.mayHaveRun ?? false),
    [false, true, true],
    'after a timed-out attempt every retry carries mayHaveRun',
  );
  const refused = flaky(2, Object.assign(new Error('redis not connected'), { sent: false }));
  await createCredit({ store: refused.store, logger: quiet, retryWindowMs: 2000 }).settle(input('req-5'));
  t.strictSame(
    refused.inputs.map((i) => i.mayHaveRun ?? false),
    [false, false, false],
    'attempts refused before they were sent (cause.sent === false) certainly did not run',
  );
});

t.test('a retry that finds its bucket reaped and no record debits nothing and logs the settle to reconcile', async (t) => {
  keepAlive(t);
  const { store, inner } = flaky(1);
  await inner.grant('acme', 1000, undefined, undefined, TS);
  await inner.hold('acme', 'req-6', 100, 1000);
  // The first attempt ran in the store, but its answer was lost; then the hold's bucket was emptied.
  await inner.settle({ ...input('req-6'), holdExpiresAtMs: 1000 });
  await inner.reapExpiredHolds(1000, TS);
  const { logger, lines } = captureLogs();
  const result = await createCredit({ store, logger, retryWindowMs: 2000 }).settle({ ...input('req-6'), holdExpiresAtMs: 1000 });
  t.strictSame([result?.replayed, result?.entry_id], [true, ''], 'no second debit');
  t.equal((await inner.getAccount('acme')).balance_micros, 960, 'debited once');
  const line = lines.find((l) => typeof l.msg === 'string' && l.msg.startsWith('settle retried after its hold bucket was reaped'));
  t.equal(line?.level, 50, 'an error line to reconcile from');
  t.match(line?.settle, { requestId: 'req-6', costMicros: 40, mayHaveRun: true }, 'with the whole settle');
});

t.test('reaped holds are remembered longer than the hold and every retry of the settle', async (t) => {
  const config = { upstream: { totalTimeoutMs: 600_000 }, credit: { holdMarginSeconds: 60 } } as Parameters<
    typeof settledMarkerTtlSeconds
  >[0];
  t.equal(holdTtlMs(config), 660_000, 'hold: total upstream timeout + margin');
  t.equal(settledMarkerTtlSeconds(config), 660 + SETTLE_RETRY_WINDOW_MS / 1000, 'reaped holds: the hold TTL + the retry window');
  t.ok(
    settledMarkerTtlSeconds(config) * 1000 > SETTLE_RETRY_WINDOW_MS + holdTtlMs(config) - 1,
    'longer than the window in which retries start',
  );
});

t.test('neverSent: only a store error whose command was refused before it was written', async (t) => {
  const { PipeError } = await import('../../src/store/script-pipe.ts');
  const wrap = (cause: unknown) => new GatewayError('store_unavailable', 'down', { cause });
  t.equal(neverSent(wrap(new PipeError('redis not connected', false))), true, 'refused while disconnected: never ran');
  t.equal(neverSent(wrap(new PipeError('redis command timed out after 300 ms'))), false, 'sent, no answer: may have run');
  t.equal(neverSent(wrap(new Error('ECONNRESET'))), false, 'a foreign error: may have run');
  // Redis's refusals before it runs anything (the reply line is the error's message, pipe and ioredis alike).
  for (const line of [
    'CLUSTERDOWN The cluster is down',
    'LOADING Redis is loading the dataset in memory',
    'BUSY Redis is busy running a script.',
    'MASTERDOWN Link with MASTER is down',
    'TRYAGAIN Multiple keys request during rehashing of slot',
  ]) {
    t.equal(holdNotRun(wrap(new Error(line))), true, `a hold refused with ${line.split(' ')[0]}: never ran`);
    // A settle keeps may-have-run: ioredis may have sent it twice and answer with the second's refusal.
    t.equal(neverSent(wrap(new Error(line))), false, `a settle refused with ${line.split(' ')[0]}: may have run`);
  }
  // Reported inside a script at its first write (its reads ran), or anything else: may have run.
  for (const line of [
    "READONLY You can't write against a read only replica.",
    'OOM command not allowed',
    'ERR Error running script',
    'BUSYKEY Target key name already exists.',
  ]) {
    t.equal(holdNotRun(wrap(new Error(line))), false, `${line.split(' ')[0]}: may have run`);
  }
  t.equal(neverSent(new Error('no cause')), false);
  t.equal(neverSent(null), false);
  t.equal(holdNotRun(wrap(new PipeError('redis not connected', false))), true, 'a hold never written: never ran');
  t.equal(holdNotRun(null), false);
});
