// Shutdown's wait for settles (credit.drain): a settle announced with expect() but not started yet (billing
// still awaits the tokenizer) is waited for, and so is the settle it then starts; the deadline still holds.
import { Writable } from 'node:stream';
import t, { type Test } from 'tap';
import { createCredit, holdTtlMs, settledMarkerTtlSeconds, SETTLE_RETRY_WINDOW_MS } from '../../src/credit/credit.ts';
import { createLogger } from '../../src/obs/logger.ts';
import { createMemoryStore } from '../../src/store/memory-store.ts';
import type { SettleInput } from '../../src/store/types.ts';

const TS = '2026-11-22T00:00:00.000Z';
const quiet = createLogger('silent');

function input(requestId: string): SettleInput {
  return {
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
  await store.hold('acme', 'req-1', 100, Date.now() + 60_000);
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
  t.ok(Date.now() - t0 < 50, 'no wait');
});

/** A logger whose lines land in `lines` (parsed). */
function capture(): { logger: ReturnType<typeof createLogger>; lines: Record<string, unknown>[] } {
  const lines: Record<string, unknown>[] = [];
  const sink = new Writable({
    write(chunk, _e, cb) {
      for (const l of String(chunk).split('\n').filter(Boolean)) lines.push(JSON.parse(l));
      cb();
    },
  });
  return { logger: createLogger('info', sink), lines };
}

/** A store whose settle fails its first `failures` calls (Redis unreachable), recording when each call started. */
function flaky(failures: number) {
  const store = createMemoryStore();
  const calls: number[] = [];
  const settle = async (i: SettleInput) => {
    calls.push(Date.now());
    if (calls.length <= failures) throw new Error('Connection is closed.');
    return store.settle(i);
  };
  return { store: { ...store, settle }, inner: store, calls };
}

/** Retry sleeps are unref'd (they must not keep a stopping gateway alive): keep this test's process up. */
function keepAlive(t: Test): void {
  const timer = setInterval(() => {}, 1000);
  t.teardown(() => clearInterval(timer));
}

t.test('a failing settle is retried only inside its window, then abandoned with a line to reconcile from', async (t) => {
  keepAlive(t);
  const { store, calls } = flaky(Infinity);
  const { logger, lines } = capture();
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
  await inner.hold('acme', 'req-3', 100, Date.now() + 60_000);
  const { logger, lines } = capture();
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

t.test('the settled marker outlives the hold and every retry of the settle', async (t) => {
  const config = { upstream: { totalTimeoutMs: 600_000 }, credit: { holdMarginSeconds: 60 } } as Parameters<
    typeof settledMarkerTtlSeconds
  >[0];
  t.equal(holdTtlMs(config), 660_000, 'hold: total upstream timeout + margin');
  t.equal(settledMarkerTtlSeconds(config), 660 + SETTLE_RETRY_WINDOW_MS / 1000, 'marker: the hold TTL + the retry window');
  t.ok(
    settledMarkerTtlSeconds(config) * 1000 > SETTLE_RETRY_WINDOW_MS + holdTtlMs(config) - 1,
    'longer than the window in which retries start',
  );
});
