// Usage aggregates across a stop while the store is unreachable (SPEC §10, §14): what could not be flushed
// at stop — the pending retry, a flush still in flight, the cells recorded since — is written to the usage
// spool and applied at the next start exactly once (by flush id: a flush that had landed, a file replayed
// twice or by two instances at once, counts once), so the aggregates equal what was recorded. Without a spool
// directory an error line names the rebuild. The embedded store, its flushUsage made to fail.
import { copyFile, mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { createLogger } from '../../src/obs/logger.ts';
import { createMemoryStore } from '../../src/store/memory-store.ts';
import type { Store, UsageFlush } from '../../src/store/types.ts';
import { decodeUsageSpool, replayUsageSpool } from '../../src/usage/spool.ts';
import { createUsage, type UsageRecord } from '../../src/usage/usage.ts';
import { captureLogs } from '../helpers/logs.ts';

const AT = Date.parse('2026-11-25T10:07:31.123Z');
const DAY = '2026-11-25';
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

type Mode = 'up' | 'down' | 'lost' | 'hang';
/**
 * The embedded store with flushUsage failing: `down` refuses, `lost` applies then fails (the reply lost to a
 * restart), `hang` never answers (until `release`, which applies it then).
 */
function flaky() {
  const inner = createMemoryStore();
  let mode: Mode = 'up';
  const calls: UsageFlush[] = [];
  const hung: (() => Promise<void>)[] = [];
  const store: Store = {
    ...inner,
    flushUsage: async (f) => {
      calls.push(f);
      if (mode === 'down') throw new Error('store_unavailable');
      if (mode === 'hang') return new Promise<void>((resolve) => hung.push(() => inner.flushUsage(f).then(resolve)));
      await inner.flushUsage(f);
      if (mode === 'lost') throw new Error('connection reset');
    },
  };
  return { store, inner, calls, set: (m: Mode) => (mode = m), release: () => Promise.all(hung.splice(0).map((h) => h())) };
}

async function tmp(t: { teardown(fn: () => unknown): void }): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'tollgate-usage-spool-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

const requestsOf = async (store: Store) => (await store.usageCells('acme', DAY, '2026-11-26')).reduce((n, c) => n + c.requests, 0);
const sums = async (store: Store) =>
  (await store.usageCells('acme', DAY, '2026-11-26')).map((c) => [
    c.day,
    c.model,
    c.requests,
    c.prompt_tokens,
    c.completion_tokens,
    c.cost_micros,
  ]);

t.test('a failed retry at stop: it and the cells recorded since are spooled, and replayed once', async (t) => {
  const dir = await tmp(t);
  const { store, calls, set } = flaky();
  const { lines, logger } = captureLogs('warn');
  const usage = createUsage({ store, logger, retentionDays: 400, flushIntervalMs: 1000, spoolDir: dir });
  usage.record(rec());
  await usage.flush(); // lands: 1 request
  set('down');
  usage.record(rec());
  await usage.flush(); // refused: kept as the retry
  usage.record(rec());
  usage.record(rec({ model: 'm2', at: AT + 86_400_000 }));
  const sent = calls.length;
  const logged = lines.length;
  t.equal(await usage.stop(), 2, 'two flushes spooled: the retry and what came since');
  t.equal(calls.length, sent + 1, 'at stop the retry is tried once, nothing newer sent before it lands');
  t.equal(await requestsOf(store), 1, 'only the first flush landed');

  const files = await readdir(dir);
  t.equal(files.length, 1, 'one usage spool file');
  t.match(files[0], /^usage-.*\.usage$/, 'named as its own kind, closed');
  const spooled = decodeUsageSpool(await readFile(join(dir, files[0]!), 'utf8'));
  t.same(
    spooled.map((f) => f.flushId!.seq),
    [2, 3],
    'in flush order, under the ids they had or would have had',
  );
  const line = lines.find((l) => l.level === 50 && String(l.msg).includes('usage flushes spooled at stop'));
  t.ok(line, 'an error line says so');
  t.same(line?.accounts, ['acme 2026-11-25', 'acme 2026-11-26'], 'naming the accounts and days');
  t.notOk(
    lines.slice(logged).some((l) => String(l.msg).endsWith('retried as it was')),
    'no line at stop promises a retry that will not happen',
  );

  // Kept copies: the same file replayed again, and by two instances at once.
  await copyFile(join(dir, files[0]!), join(dir, 'usage-copy-a.usage'));
  await copyFile(join(dir, files[0]!), join(dir, 'usage-copy-b.usage'));
  set('up');
  const quiet = createLogger('silent');
  const reports = await Promise.all([
    replayUsageSpool({ dir, flush: (f) => store.flushUsage(f), logger: quiet }),
    replayUsageSpool({ dir, flush: (f) => store.flushUsage(f), logger: quiet }),
  ]);
  t.equal(
    reports.reduce((n, r) => n + r.failed, 0),
    0,
  );
  t.same(await readdir(dir), [], 'every file applied is deleted');
  t.equal(await requestsOf(store), 4, 'the aggregates hold every request recorded, once');
  t.same(await sums(store), [
    ['2026-11-25', 'm1', 3, 30, 60, 21],
    ['2026-11-26', 'm2', 1, 10, 20, 7],
  ]);
});

t.test('a flush that landed with its reply lost is spooled and counts once', async (t) => {
  const dir = await tmp(t);
  const { store, set } = flaky();
  const usage = createUsage({ store, logger: captureLogs('warn').logger, retentionDays: 400, flushIntervalMs: 1000, spoolDir: dir });
  set('lost');
  usage.record(rec());
  await usage.flush(); // applied, reported failed: the retry
  set('down');
  usage.record(rec({ model: 'm2' }));
  t.equal(await usage.stop(), 2);
  t.equal(await requestsOf(store), 1, 'the lost flush is in the store');
  set('up');
  const report = await replayUsageSpool({ dir, flush: (f) => store.flushUsage(f), logger: createLogger('silent') });
  t.match(report, { files: 1, flushes: 2, failed: 0 });
  t.same(await sums(store), [
    ['2026-11-25', 'm1', 1, 10, 20, 7],
    ['2026-11-25', 'm2', 1, 10, 20, 7],
  ]);
});

t.test('a flush still in flight at the deadline is spooled; landing later changes nothing twice', async (t) => {
  const dir = await tmp(t);
  const { store, set, release } = flaky();
  const usage = createUsage({ store, logger: captureLogs('warn').logger, retentionDays: 400, flushIntervalMs: 1000, spoolDir: dir });
  set('hang');
  usage.record(rec());
  void usage.flush();
  usage.record(rec({ model: 'm2' }));
  const started = Date.now();
  t.equal(await usage.stop(200), 2, 'the flush in flight and the cells since');
  t.ok(Date.now() - started < 2000, 'stop keeps to its deadline');
  set('up');
  await replayUsageSpool({ dir, flush: (f) => store.flushUsage(f), logger: createLogger('silent') });
  await release(); // the hung flush lands after all
  t.same(await sums(store), [
    ['2026-11-25', 'm1', 1, 10, 20, 7],
    ['2026-11-25', 'm2', 1, 10, 20, 7],
  ]);
});

t.test('replay keeps the file while the store is away, and stops at the first flush that cannot land', async (t) => {
  const dir = await tmp(t);
  const { store, calls, set } = flaky();
  const usage = createUsage({ store, logger: captureLogs('warn').logger, retentionDays: 400, flushIntervalMs: 1000, spoolDir: dir });
  set('down');
  usage.record(rec());
  await usage.flush();
  usage.record(rec({ model: 'm2' }));
  await usage.stop();
  const before = calls.length;
  const report = await replayUsageSpool({ dir, flush: (f) => store.flushUsage(f), logger: createLogger('silent') });
  t.match(report, { files: 1, flushes: 0, failed: 1 });
  t.equal(calls.length, before + 1, 'the later flush is not tried before the earlier one landed');
  t.equal((await readdir(dir)).length, 1, 'the file is kept');
  set('up');
  await replayUsageSpool({ dir, flush: (f) => store.flushUsage(f), logger: createLogger('silent') });
  t.equal(await requestsOf(store), 2);
  t.same(await readdir(dir), []);
});

t.test('without a spool directory an error line names the accounts, days and rebuild commands', async (t) => {
  const { store, set } = flaky();
  const { lines, logger } = captureLogs('warn');
  const usage = createUsage({ store, logger, retentionDays: 400, flushIntervalMs: 1000 });
  set('down');
  usage.record(rec());
  usage.record(rec({ account: 'beta', at: AT + 86_400_000 }));
  usage.record(rec({ at: AT + 2 * 86_400_000 }));
  t.equal(await usage.stop(), 0);
  const line = lines.find((l) => l.level === 50 && String(l.msg).includes('usage aggregates lost at stop'));
  t.ok(line, 'an error line');
  t.same(line?.rebuild, [
    'tollgate usage rebuild --account acme --from 2026-11-25 --to 2026-11-27',
    'tollgate usage rebuild --account beta --from 2026-11-26 --to 2026-11-26',
  ]);
});

t.test('a record after stop is not silently dropped', async (t) => {
  const { store } = flaky();
  const { lines, logger } = captureLogs('warn');
  const usage = createUsage({ store, logger, retentionDays: 400, flushIntervalMs: 1000 });
  await usage.stop();
  usage.record(rec());
  t.ok(lines.some((l) => l.level === 50 && String(l.msg).includes('usage recorded after stop')));
});
