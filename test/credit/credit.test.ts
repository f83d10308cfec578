// Shutdown's wait for settles (credit.drain): a settle announced with expect() but not started yet (billing
// still awaits the tokenizer) is waited for, and so is the settle it then starts; the deadline still holds.
import t from 'tap';
import { createCredit } from '../../src/credit/credit.ts';
import { createLogger } from '../../src/obs/logger.ts';
import { createMemoryStore } from '../../src/store/memory-store.ts';
import type { SettleInput } from '../../src/store/types.ts';

const TS = '2026-11-22T00:00:00.000Z';
const quiet = createLogger('silent');

function input(requestId: string): SettleInput {
  return { account: 'acme', requestId, costMicros: 40, keyId: 'key_x', model: 'm', promptTokens: 1, completionTokens: 1, usageSource: 'upstream', ts: TS };
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
