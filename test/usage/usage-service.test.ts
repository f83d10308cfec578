// The usage service on the embedded store (SPEC §10): records add up in process and reach the store
// in one flush; a refused flush is retried as it was, under its id, never lost nor doubled; the pending
// map is bounded through an outage; concurrent flushes share one.
import t from 'tap';
import { createMemoryStore } from '../../src/store/memory-store.ts';
import type { Store, UsageFlush } from '../../src/store/types.ts';
import { createUsage, type UsageRecord } from '../../src/usage/usage.ts';
import { captureLogs } from '../helpers/logs.ts';

const AT = Date.parse('2026-11-25T10:07:31.123Z');
const rec = (o: Partial<UsageRecord> = {}): UsageRecord => ({
  account: 'acme',
  keyId: 'key_a',
  live: true,
  model: 'm1',
  promptTokens: 10,
  completionTokens: 20,
  costMicros: 7,
  at: AT,
  ...o,
});

/** The embedded store with flushUsage failing while `down` is true, counting the calls that reached it. */
function flaky(): { store: Store; calls: UsageFlush[]; setDown(v: boolean): void } {
  const inner = createMemoryStore();
  let down = false;
  const calls: UsageFlush[] = [];
  const store: Store = {
    ...inner,
    flushUsage: async (f) => {
      calls.push(f);
      if (down) throw new Error('store down');
      return inner.flushUsage(f);
    },
  };
  return { store, calls, setDown: (v) => (down = v) };
}

/** Makes acme hold key_a and key_t: a last use is recorded only for a key its account holds. */
async function holdKeys(store: Store): Promise<void> {
  for (const id of ['key_a', 'key_t'])
    await store.createKey(`hash-${id}`, {
      id,
      account: 'acme',
      env: 'live',
      name: id,
      active: true,
      scopes: ['chat'],
      models: [],
      rate_limits: null,
      created_at: '2026-11-25T00:00:00.000Z',
      last4: 'abcd',
      version: 1,
    });
}

t.test('records add up per cell; one flush writes them; last_used_at is the minute', async (t) => {
  const { store, calls } = flaky();
  await holdKeys(store);
  const usage = createUsage({ store, logger: captureLogs('warn').logger, retentionDays: 400, flushIntervalMs: 1000 });
  usage.record(rec({ cachedTokens: 6 }));
  usage.record(rec({ promptTokens: 1, completionTokens: 2, costMicros: 3, cachedTokens: 1 }));
  usage.record(rec({ keyId: 'key_t', live: false, costMicros: 0 }));
  usage.record(rec({ model: 'm2', at: AT + 86_400_000 }));
  t.equal(calls.length, 0, 'record does no I/O');
  await usage.flush();
  t.equal(calls.length, 1, 'one flush');
  t.same(calls[0]!.ledgerAccounts, ['acme'], 'live use indexes the account for the export');
  t.same(await store.usageCells('acme', '2026-11-25', '2026-11-26'), [
    {
      day: '2026-11-25',
      key_id: 'key_a',
      model: 'm1',
      requests: 2,
      prompt_tokens: 11,
      completion_tokens: 22,
      cost_micros: 10,
      cached_tokens: 7,
    },
    {
      day: '2026-11-25',
      key_id: 'key_t',
      model: 'm1',
      requests: 1,
      prompt_tokens: 10,
      completion_tokens: 20,
      cost_micros: 0,
      cached_tokens: 0,
    },
    {
      day: '2026-11-26',
      key_id: 'key_a',
      model: 'm2',
      requests: 1,
      prompt_tokens: 10,
      completion_tokens: 20,
      cost_micros: 7,
      cached_tokens: 0,
    },
  ]);
  t.same(await usage.lastUsed('acme'), { key_a: '2026-11-26T10:07:00Z', key_t: '2026-11-25T10:07:00Z' });
  await usage.flush();
  t.equal(calls.length, 1, 'nothing pending: no flush sent');
  t.same(await usage.query('acme', '2026-11-25', '2026-11-26', ['model']), [
    { model: 'm1', requests: 3, prompt_tokens: 21, completion_tokens: 42, cost_micros: 10, cached_tokens: 7 },
    { model: 'm2', requests: 1, prompt_tokens: 10, completion_tokens: 20, cost_micros: 7, cached_tokens: 0 },
  ]);
});

t.test('a refused flush is retried as it was (same id) before the next: nothing lost, nothing doubled', async (t) => {
  const { store, calls, setDown } = flaky();
  const { lines, logger } = captureLogs('warn');
  let failures = 0;
  const usage = createUsage({ store, logger, retentionDays: 400, flushIntervalMs: 1000, onFlushFailed: () => failures++ });
  usage.record(rec());
  setDown(true);
  await usage.flush();
  t.equal(failures, 1);
  t.ok(lines.some((l) => l.msg === 'usage flush failed; retried as it was'));
  usage.record(rec());
  await usage.flush();
  t.equal(failures, 2, 'still down: the same flush failed again');
  t.equal(calls.length, 2, 'and nothing newer was sent');
  setDown(false);
  await usage.flush();
  t.equal(calls.length, 4, 'the retry, then the new records');
  t.same(calls[2]!.flushId, calls[0]!.flushId, 'the retry carries the id of the flush it repeats');
  t.same(calls[2]!.cells, calls[0]!.cells, 'and its cells, unchanged');
  t.ok(calls[3]!.flushId!.seq > calls[0]!.flushId!.seq, 'the records made meanwhile go with a new id');
  t.same(await store.usageCells('acme', '2026-11-25', '2026-11-25'), [
    {
      day: '2026-11-25',
      key_id: 'key_a',
      model: 'm1',
      requests: 2,
      prompt_tokens: 20,
      completion_tokens: 40,
      cost_micros: 14,
      cached_tokens: 0,
    },
  ]);
});

t.test('a flush the store applied but whose answer was lost: its retry changes nothing (SPEC §10)', async (t) => {
  const inner = createMemoryStore();
  let loseAnswers = true;
  const store: Store = {
    ...inner,
    flushUsage: async (f) => {
      await inner.flushUsage(f);
      if (loseAnswers) throw new Error('connection reset after the flush ran');
    },
  };
  const usage = createUsage({ store, logger: captureLogs('warn').logger, retentionDays: 400, flushIntervalMs: 1000 });
  usage.record(rec());
  await usage.flush(); // applied, answer lost
  await usage.flush(); // retried, applied again by a store without the id check; answer lost again
  loseAnswers = false;
  await usage.flush();
  t.same(await store.usageCells('acme', '2026-11-25', '2026-11-25'), [
    {
      day: '2026-11-25',
      key_id: 'key_a',
      model: 'm1',
      requests: 1,
      prompt_tokens: 10,
      completion_tokens: 20,
      cost_micros: 7,
      cached_tokens: 0,
    },
  ]);
});

t.test('requests counts requests served: one that billed no token is none', async (t) => {
  const { store } = flaky();
  await holdKeys(store);
  const usage = createUsage({ store, logger: captureLogs('warn').logger, retentionDays: 400, flushIntervalMs: 1000 });
  usage.record(rec());
  usage.record(rec({ promptTokens: 0, completionTokens: 0, costMicros: 0 }));
  usage.record(rec({ promptTokens: 0, completionTokens: 3, costMicros: 1 }));
  await usage.flush();
  t.same(await store.usageCells('acme', '2026-11-25', '2026-11-25'), [
    {
      day: '2026-11-25',
      key_id: 'key_a',
      model: 'm1',
      requests: 2,
      prompt_tokens: 10,
      completion_tokens: 23,
      cost_micros: 8,
      cached_tokens: 0,
    },
  ]);
  t.same(await usage.lastUsed('acme'), { key_a: '2026-11-25T10:07:00Z' }, 'the key was still used');
});

t.test('through a long outage the pending cells are bounded; what was dropped is said, with the remedy', async (t) => {
  const { store, setDown } = flaky();
  const { lines, logger } = captureLogs('warn');
  const usage = createUsage({ store, logger, retentionDays: 400, flushIntervalMs: 1000, maxPendingCells: 2 });
  setDown(true);
  for (const model of ['a', 'b', 'c']) usage.record(rec({ model }));
  usage.record(rec({ model: 'a' }));
  await usage.flush();
  setDown(false);
  await usage.flush();
  t.same(
    (await store.usageCells('acme', '2026-11-25', '2026-11-25')).map((c) => [c.model, c.requests]),
    [
      ['a', 2],
      ['b', 1],
    ],
    'the two first cells kept (and still added to), the third dropped',
  );
  t.ok(
    lines.some((l) => l.dropped === 1 && String(l.msg).includes('tollgate usage rebuild')),
    'the drop is logged with the remedy',
  );
});

t.test('concurrent flushes share one; stop() flushes what is left', async (t) => {
  const { store, calls } = flaky();
  const usage = createUsage({ store, logger: captureLogs('warn').logger, retentionDays: 400, flushIntervalMs: 1000 });
  usage.record(rec());
  await Promise.all([usage.flush(), usage.flush()]);
  t.equal(calls.length, 1, 'one store call');
  usage.start();
  usage.record(rec({ model: 'late' }));
  await usage.stop();
  t.equal(calls.length, 2, 'the last records flushed on stop');
  t.equal((await store.usageCells('acme', '2026-11-25', '2026-11-25')).length, 2);
});
