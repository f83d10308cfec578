// The settle spool (src/credit/spool.ts, SPEC §14): checksummed lines, a torn last line, corrupt lines, the
// `.open` → `.spool` life of a process's file, and replays against the embedded store: exactly one debit per
// request id whether the hold is open or already reaped, however often a file is replayed. Then Credit's side:
// at exit every settle still owed is spooled (and logged whole at error level), and stops retrying.
import { copyFile, mkdtemp, readdir, readFile, rm, utimes, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import t, { type Test } from 'tap';
import { createCredit } from '../../src/credit/credit.ts';
import { createSpool, decodeSpool, encodeLine, replaySpool } from '../../src/credit/spool.ts';
import { GatewayError } from '../../src/http/errors.ts';
import { createLogger } from '../../src/obs/logger.ts';
import { createMemoryStore } from '../../src/store/memory-store.ts';
import type { SettleInput, Store } from '../../src/store/types.ts';
import { captureLogs } from '../helpers/logs.ts';

const TS = '2026-11-25T00:00:00.000Z';
const quiet = createLogger('silent');

function input(requestId: string, expiry: number, costMicros = 40): SettleInput {
  return {
    account: 'acme',
    requestId,
    costMicros,
    keyId: 'key_x',
    model: 'm',
    promptTokens: 3,
    completionTokens: 5,
    usageSource: 'upstream',
    ts: TS,
    holdExpiresAtMs: expiry,
  };
}

async function tempDir(t: Test): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'tollgate-spool-test-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

const debitsOf = async (store: Store, id: string) =>
  (await store.ledger('acme', undefined, 1000)).filter((e) => e.kind === 'debit' && e.request_id === id);

t.test('a line is checksum + JSON; a flipped byte, a bad prefix and a torn last line are told apart', async (t) => {
  const a = encodeLine(input('req-a', 1000));
  const b = encodeLine(input('req-b', 1000));
  t.match(a, /^[0-9a-f]{8} \{.*\}\n$/, 'checksum, space, JSON, newline');
  t.same(
    decodeSpool(a + b).settles.map((s) => s.requestId),
    ['req-a', 'req-b'],
  );
  const flipped = a.replace('"costMicros":40', '"costMicros":10');
  const d1 = decodeSpool(flipped + b);
  t.same(
    d1.settles.map((s) => s.requestId),
    ['req-b'],
    'a line whose JSON changed fails its checksum',
  );
  t.equal(d1.corrupt.length, 1);
  t.equal(d1.torn, undefined);
  const d2 = decodeSpool(a + b.slice(0, 30));
  t.same(
    d2.settles.map((s) => s.requestId),
    ['req-a'],
    'the complete lines before a torn one are kept',
  );
  t.equal(d2.torn, b.slice(0, 30), 'the last line without its newline is torn');
  t.same(d2.corrupt, [], 'and not called corrupt');
  t.equal(decodeSpool('zzzzzzzz {}\n').corrupt.length, 1, 'a prefix that is not hex is corrupt');
  const valid = '{"hello":1}';
  const { crc32 } = await import('node:zlib');
  t.equal(
    decodeSpool(`${crc32(valid).toString(16).padStart(8, '0')} ${valid}\n`).corrupt.length,
    1,
    'a checksummed line that is not a settle is corrupt',
  );
  t.same(decodeSpool(''), { settles: [], torn: undefined, corrupt: [] }, 'an empty file is an empty spool');
});

t.test('a process file: nothing until the first append, `.open` while written, `.spool` once closed', async (t) => {
  const dir = await tempDir(t);
  const spool = createSpool({ dir: join(dir, 'nested', 'spool') });
  t.equal(spool.file, undefined);
  await spool.close();
  await t.rejects(readdir(join(dir, 'nested')), { code: 'ENOENT' }, 'no directory, no file when nothing was spooled');
  await spool.append([input('req-1', 1000)]);
  await spool.append([input('req-2', 1000), input('req-3', 1000)]);
  const names = await readdir(join(dir, 'nested', 'spool'));
  t.equal(names.length, 1, 'one file per process');
  t.match(names[0], /^settles-\d{8}T\d{9}Z-\d+-[0-9a-f]{8}\.spool\.open$/, 'named .open while the process may still append');
  await spool.close();
  const closed = await readdir(join(dir, 'nested', 'spool'));
  t.same(closed, [names[0]!.replace(/\.open$/, '')], 'renamed .spool when closed');
  t.equal(join(dir, 'nested', 'spool', closed[0]!), spool.file);
  const text = await readFile(spool.file!, 'utf8');
  t.same(
    decodeSpool(text).settles.map((s) => s.requestId),
    ['req-1', 'req-2', 'req-3'],
    'every settle, in order',
  );
});

t.test('an append after close() goes to a new file, never to the closed one; a close queued behind appends waits for them', async (t) => {
  const dir = await tempDir(t);
  const spool = createSpool({ dir });
  await spool.append([input('req-1', 1000)]);
  // Issued together: the close runs after the append before it, the append after it opens a new file.
  const [, , late] = await Promise.allSettled([spool.append([input('req-2', 1000)]), spool.close(), spool.append([input('req-3', 1000)])]);
  t.equal(late.status, 'fulfilled', 'the append after close() did not fail');
  const first = (await readdir(dir)).filter((n) => n.endsWith('.spool'));
  t.equal(first.length, 1, 'the first file was closed');
  t.same(
    decodeSpool(await readFile(join(dir, first[0]!), 'utf8')).settles.map((s) => s.requestId),
    ['req-1', 'req-2'],
    'with what was appended before the close',
  );
  const open = (await readdir(dir)).filter((n) => n.endsWith('.spool.open'));
  t.equal(open.length, 1, 'the later append: a new file, `.open`');
  t.same(
    decodeSpool(await readFile(join(dir, open[0]!), 'utf8')).settles.map((s) => s.requestId),
    ['req-3'],
  );
  await spool.append([input('req-4', 1000)]);
  await spool.close();
  t.same(
    (await readdir(dir)).filter((n) => n.endsWith('.open')),
    [],
    'a second close names it `.spool` too',
  );
  t.same(
    decodeSpool(await readFile(spool.file!, 'utf8')).settles.map((s) => s.requestId),
    ['req-3', 'req-4'],
  );
});

t.test('replay: one debit per request id, the file deleted; the same file again debits nothing', async (t) => {
  const dir = await tempDir(t);
  const store = createMemoryStore();
  await store.grant('acme', 10_000, undefined, undefined, TS);
  const expiry = Date.now() + 60_000;
  for (const id of ['req-1', 'req-2']) await store.hold('acme', id, 100, expiry);
  const spool = createSpool({ dir });
  await spool.append([input('req-1', expiry), input('req-2', expiry, 70)]);
  await spool.close();
  const copy = join(dir, 'copy.spool');
  await copyFile(spool.file!, copy + '.keep');

  const r1 = await replaySpool({ dir, settle: (s) => store.settle(s), logger: quiet });
  t.match(r1, { files: 1, settles: 2, debited: 2, alreadySettled: 0, failed: 0 });
  t.same(await readdir(dir), ['copy.spool.keep'], 'the replayed file is deleted');
  let acct = await store.getAccount('acme');
  t.same([acct.balance_micros, acct.held_micros], [10_000 - 110, 0], 'debited 40 + 70, holds released');

  // A replay that stopped before deleting its file, or an operator's copy: the same settles again.
  await copyFile(copy + '.keep', copy);
  const r2 = await replaySpool({ dir, settle: (s) => store.settle(s), logger: quiet });
  t.match(r2, { files: 1, settles: 2, debited: 0, alreadySettled: 2 }, 'found settled: nothing debited again');
  acct = await store.getAccount('acme');
  t.equal(acct.balance_micros, 10_000 - 110, 'balance unchanged');
  t.equal((await debitsOf(store, 'req-1')).length, 1, 'one debit entry per request id');
});

t.test('replay after the reaper released the hold still debits exactly once', async (t) => {
  const dir = await tempDir(t);
  let now = 1_000_000;
  const store = createMemoryStore(() => now);
  await store.grant('acme', 10_000, undefined, undefined, TS);
  const expiry = now + 5_000;
  await store.hold('acme', 'req-r', 100, expiry);
  const spool = createSpool({ dir });
  await spool.append([{ ...input('req-r', expiry), mayHaveRun: true }]);
  await spool.close();
  await copyFile(spool.file!, join(dir, 'again.keep'));
  // Past the hold's expiry the reaper releases it with a hold_expired entry (field `r`).
  now = expiry + 60_000;
  t.ok((await store.reapExpiredHolds(now, TS)) >= 1, 'the hold was reaped');
  t.same((await store.getAccount('acme')).held_micros, 0);
  const r = await replaySpool({ dir, settle: (s) => store.settle(s), logger: quiet });
  t.match(r, { settles: 1, debited: 1 });
  const debits = await debitsOf(store, 'req-r');
  t.equal(debits.length, 1, 'debited');
  t.equal(debits[0]?.amount_micros, -40);
  t.equal(debits[0]?.hold_micros, 0, 'with no hold left to release');
  await copyFile(join(dir, 'again.keep'), join(dir, 'again.spool'));
  const again = await replaySpool({ dir, settle: (s) => store.settle(s), logger: quiet });
  t.match(again, { debited: 0, alreadySettled: 1 }, 'a second replay of the reaped-then-settled hold replays');
  t.equal((await debitsOf(store, 'req-r')).length, 1, 'still one debit');
  const acct = await store.getAccount('acme');
  t.same([acct.balance_micros, acct.held_micros], [10_000 - 40, 0]);
});

t.test('replay skips a torn last line, keeps a corrupt file aside, keeps a file whose settles failed', async (t) => {
  const dir = await tempDir(t);
  const store = createMemoryStore();
  await store.grant('acme', 10_000, undefined, undefined, TS);
  const expiry = Date.now() + 60_000;
  for (const id of ['t1', 't2', 'c1', 'c2', 'f1']) await store.hold('acme', id, 100, expiry);
  await writeFile(join(dir, 'settles-a.spool'), encodeLine(input('t1', expiry)) + encodeLine(input('t2', expiry)).slice(0, 40));
  await writeFile(
    join(dir, 'settles-b.spool'),
    encodeLine(input('c1', expiry)).replace('"costMicros":40', '"costMicros":41') + encodeLine(input('c2', expiry)),
  );
  const { logger, lines } = captureLogs();
  const r = await replaySpool({ dir, settle: (s) => store.settle(s), logger });
  t.match(r, { files: 2, settles: 2, debited: 2, torn: 1, corrupt: 1 });
  t.same((await readdir(dir)).sort(), ['settles-b.spool.corrupt'], 'the torn file is done; the corrupt one is kept aside');
  t.ok(
    lines.some((l) => l.level === 50 && typeof l.line === 'string' && l.line.includes('"c1"')),
    'the corrupt line is logged at error level',
  );
  t.same([(await debitsOf(store, 't1')).length, (await debitsOf(store, 'c2')).length, (await debitsOf(store, 't2')).length], [1, 1, 0]);

  // The store unreachable: nothing lands, the file stays for the next replay.
  await writeFile(join(dir, 'settles-c.spool'), encodeLine(input('f1', expiry)));
  const down = await replaySpool({
    dir,
    settle: () => Promise.reject(new GatewayError('store_unavailable', 'down')),
    logger: quiet,
  });
  t.match(down, { settles: 1, failed: 1, debited: 0 });
  t.ok((await readdir(dir)).includes('settles-c.spool'), 'kept');
  const up = await replaySpool({ dir, settle: (s) => store.settle(s), logger: quiet });
  t.match(up, { debited: 1 }, 'applied by the next replay');
  t.equal((await debitsOf(store, 'f1')).length, 1);
});

t.test('replay leaves a file another process is still writing; takes one its dead writer left open', async (t) => {
  const dir = await tempDir(t);
  const store = createMemoryStore();
  await store.grant('acme', 10_000, undefined, undefined, TS);
  const expiry = Date.now() + 60_000;
  await store.hold('acme', 'o1', 100, expiry);
  const open = join(dir, 'settles-x.spool.open');
  await writeFile(open, encodeLine(input('o1', expiry)));
  const r1 = await replaySpool({ dir, settle: (s) => store.settle(s), logger: quiet });
  t.match(r1, { files: 0 }, 'a fresh .open file belongs to a live process');
  const old = new Date(Date.now() - 120_000);
  await utimes(open, old, old);
  const r2 = await replaySpool({ dir, settle: (s) => store.settle(s), logger: quiet });
  t.match(r2, { files: 1, debited: 1 }, 'untouched for a minute: its process died before closing it');
  t.same(await readdir(dir), []);
  t.match(
    await replaySpool({ dir: join(dir, 'missing'), settle: (s) => store.settle(s), logger: quiet }),
    { files: 0 },
    'no directory: nothing',
  );
});

/** Retry sleeps are unref'd: keep this test's process up. */
function keepAlive(t: Test): void {
  const timer = setInterval(() => {}, 1000);
  t.teardown(() => clearInterval(timer));
}

t.test('Credit at exit: owed settles spooled with their whole line logged, retries stopped, later ones spooled too', async (t) => {
  keepAlive(t);
  const dir = await tempDir(t);
  const inner = createMemoryStore();
  await inner.grant('acme', 10_000, undefined, undefined, TS);
  const expiry = Date.now() + 60_000;
  await inner.hold('acme', 'owed-1', 100, expiry);
  await inner.hold('acme', 'owed-2', 100, expiry);
  let down = true;
  let calls = 0;
  const store: Store = {
    ...inner,
    settle: async (i) => {
      calls++;
      if (down) throw new GatewayError('store_unavailable', 'down', { cause: Object.assign(new Error('not connected'), { sent: false }) });
      return inner.settle(i);
    },
  };
  const { logger, lines } = captureLogs();
  const credit = createCredit({ store, logger });
  const p1 = credit.settle(input('owed-1', expiry));
  await new Promise((r) => setTimeout(r, 250)); // a couple of retries
  t.equal(credit.pending, 1);
  const spool = createSpool({ dir });
  t.equal(await credit.spool(spool), 1, 'one settle owed');
  t.equal(await p1, undefined, 'its retries stop');
  const callsAtSpool = calls;
  t.equal(credit.pending, 0, 'nothing pending any more');
  // Billing that finishes after the spool was opened: one attempt, then the spool.
  t.equal(await credit.settle(input('owed-2', expiry)), undefined);
  await new Promise((r) => setTimeout(r, 300));
  t.equal(calls, callsAtSpool + 1, 'a late settle is tried once, then spooled; no retries');
  await spool.close();
  const spooled = decodeSpool(await readFile(spool.file!, 'utf8'));
  t.same(
    spooled.settles.map((s) => s.requestId),
    ['owed-1', 'owed-2'],
  );
  const logged = lines.filter((l) => l.level === 50 && typeof l.msg === 'string' && l.msg.startsWith('settle spooled'));
  t.equal(logged.length, 2, 'one error line per spooled settle');
  t.match(logged[0]?.settle, { account: 'acme', requestId: 'owed-1', costMicros: 40, promptTokens: 3, completionTokens: 5, ts: TS });
  t.equal(logged[0]?.spool, spool.file, 'naming the spool file');

  // The next process, with the store back: each debited once.
  down = false;
  const r = await replaySpool({ dir, settle: (s) => credit.settle(s), logger: quiet });
  t.match(r, { settles: 2, debited: 2 });
  const acct = await inner.getAccount('acme');
  t.same([acct.balance_micros, acct.held_micros], [10_000 - 80, 0]);
});

t.test('Credit.spool when the spool cannot be written: the whole settle is still in an error line', async (t) => {
  keepAlive(t);
  const dir = await tempDir(t);
  const blocker = join(dir, 'file');
  await writeFile(blocker, 'not a directory');
  const store: Store = { ...createMemoryStore(), settle: () => Promise.reject(new GatewayError('store_unavailable', 'down')) };
  const { logger, lines } = captureLogs();
  const credit = createCredit({ store, logger });
  const p = credit.settle(input('lost', Date.now() + 60_000));
  await new Promise((r) => setTimeout(r, 50));
  await credit.spool(createSpool({ dir: join(blocker, 'spool') }));
  t.equal(await p, undefined);
  const line = lines.find((l) => typeof l.msg === 'string' && l.msg.startsWith('settle could not be spooled'));
  t.equal(line?.level, 50);
  t.match(line?.settle, { requestId: 'lost', costMicros: 40, mayHaveRun: true });
});

// The gateway's shutdown (gateway.ts close): drain, spool() what is owed, settleLate() while billing that
// outlived the drain hands its settles over, abandonExpected(), then the spool's close.
t.test('Credit at exit: a settle handed over after spool() still reaches the spool before it closes', async (t) => {
  keepAlive(t);
  const dir = await tempDir(t);
  // Redis away: every attempt is sent and unanswered.
  const store: Store = { ...createMemoryStore(), settle: () => Promise.reject(new GatewayError('store_unavailable', 'connection lost')) };
  const { logger, lines } = captureLogs();
  const credit = createCredit({ store, logger });
  const spool = createSpool({ dir });
  void credit.settle(input('req-early', 9e12));
  // Still being billed (the tokenizer, a stateful request's usage asked of its upstream).
  const handOverLate = credit.expect({ account: 'acme', requestId: 'req-late', holdMicros: 500 });
  const never = credit.expect({ account: 'acme', requestId: 'req-never', holdMicros: 700 });
  await new Promise((r) => setTimeout(r, 20));
  await credit.drain(50);
  t.equal(await credit.spool(spool), 1, 'the early settle is spooled');
  const waiting = credit.settleLate(2_000);
  setTimeout(() => {
    void credit.settle(input('req-late', 9e12));
    handOverLate();
  }, 100);
  // req-never's billing does not end in time: the wait stops at its deadline.
  t.equal(await Promise.race([waiting, new Promise((r) => setTimeout(() => r('hung'), 4_000))]), 1, 'one still pending at the deadline');
  t.equal(credit.abandonExpected(), 1, 'one settle never handed over');
  await spool.close();
  const files = await readdir(dir);
  t.same(files, [basename(spool.file!)], 'one file, closed');
  t.same(
    decodeSpool(await readFile(spool.file!, 'utf8')).settles.map((s) => [s.requestId, s.mayHaveRun]),
    [
      ['req-early', true],
      ['req-late', true],
    ],
    'the late settle too',
  );
  t.notOk(
    lines.some((l) => String(l.msg).startsWith('settle could not be spooled')),
    'none failed to be spooled',
  );
  const abandoned = lines.filter((l) => String(l.msg).startsWith('settle still being billed at exit'));
  t.match(
    abandoned,
    [{ level: 50, settle: { account: 'acme', requestId: 'req-never', holdMicros: 700 } }],
    'the one never handed over: an error line naming it',
  );
  never();
});

t.test('Credit: a settle failing after the spool was closed goes to a new spool file, not lost', async (t) => {
  keepAlive(t);
  const dir = await tempDir(t);
  const store: Store = { ...createMemoryStore(), settle: () => Promise.reject(new GatewayError('store_unavailable', 'connection lost')) };
  const { logger, lines } = captureLogs();
  const credit = createCredit({ store, logger });
  const spool = createSpool({ dir });
  void credit.settle(input('req-early', 9e12));
  await new Promise((r) => setTimeout(r, 20));
  t.equal(await credit.spool(spool), 1);
  await spool.close();
  // The process has not exited yet (the store's close): a settle handed over now.
  t.equal(await credit.settle(input('req-after-close', 9e12)), undefined);
  const spooledIds = (await Promise.all((await readdir(dir)).map((f) => readFile(join(dir, f), 'utf8')))).flatMap((text) =>
    decodeSpool(text).settles.map((s) => s.requestId),
  );
  t.same(spooledIds.sort(), ['req-after-close', 'req-early']);
  t.notOk(
    lines.some((l) => String(l.msg).startsWith('settle could not be spooled')),
    'spooled, not only logged',
  );
});
