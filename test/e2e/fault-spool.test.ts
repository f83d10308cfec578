// SPEC §14 "Settles survive the process" (issue 25, fault 2): SIGTERM during a Redis outage, streams
// completing with [DONE] during the drain. Their settles cannot land, so they go to the spool (fsynced) and
// are applied — exactly once, by request id — by the next process that starts on that spool, or by
// `tollgate spool replay`, or by a gateway already running on that spool (after the reaper released the holds:
// fault-spool-reaped.test.ts). Redis runs on an AOF (killed with SIGKILL, restarted on it): the outage ends with
// the holds still there, as in production. Each test ends on the money invariant: one debit per completed
// answer, ledger = balance, held 0.
import { copyFile, mkdir, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { stringify } from 'yaml';
import { onPath, requireRedis } from '../helpers/redis.ts';
import { startGateway, testConfigDoc } from '../helpers/gateway.ts';
import { waitFor } from '../helpers/wait.ts';
import { parseFields, runCli } from '../cli/run-cli.ts';
import { accountOf, chat, checkLedger, ledgerOf, spawnGateway, streamBody } from './credit-support.ts';
import { sseData, startSim } from './chat-fixture.ts';
import { readContent, spooled, startAofRedis, usageSpooled } from './fault-support.ts';
import { createSpool } from '../../src/credit/spool.ts';

/** Child gateways boot in 0.5–1 s on an idle box; 7 s was seen with the machine's load at 33. */
const BOOT_MS = 30_000;

if (requireRedis(t, process.env, true) && onPath('redis-server', process.env.PATH)) {
  t.test('SIGTERM in a Redis outage: completed streams spooled, then debited exactly once by the next start', async (t) => {
    const redis = await startAofRedis(t);
    const sim = await startSim(t);
    const admin = await startGateway(t, { redisUrl: redis.url, upstreamUrl: sim.url, config: { store: { command_timeout_ms: 300 } } });
    const { key } = await admin.createKey({ account: 'spooled', env: 'live' });
    const grant = 10_000_000;
    await admin.grant('spooled', grant);
    const spoolDir = await mkdtemp(join(tmpdir(), 'tollgate-fault-spool-'));
    t.teardown(() => rm(spoolDir, { recursive: true, force: true }));
    const config = { server: { drain_seconds: 3, spool_dir: spoolDir }, store: { command_timeout_ms: 300 } };
    const first = await spawnGateway(t, { readyTimeoutMs: BOOT_MS, redisUrl: redis.url, upstreamUrl: sim.url, config });

    // 10 streams of 30 tokens × 40 ms (1.2 s), all holding when Redis goes away; they finish during the drain.
    const responses = await Promise.all(Array.from({ length: 10 }, () => chat(first.url, key, streamBody({ tokens: 30, delay_ms: 40 }))));
    t.same(
      responses.map((r) => r.status),
      responses.map(() => 200),
    );
    const ids = responses.map((r) => r.headers.get('x-request-id')!);
    const readers = await Promise.all(responses.map((r) => readContent(r, 2)));
    await redis.kill();
    first.child.kill('SIGTERM');
    const texts = await Promise.all(readers.map((r) => r.rest()));
    for (const text of texts) t.equal(sseData(text).at(-1), '[DONE]', 'the stream completed during the drain');
    t.equal((await first.exited).code, 0, 'exit 0');

    const { settles } = await spooled(spoolDir);
    const files = (await readdir(spoolDir)).filter((n) => n.endsWith('.spool'));
    t.equal(files.length, 1, 'one spool file');
    t.same(settles.map((s) => s.requestId).sort(), [...ids].sort(), 'every completed stream is in the spool');
    t.ok(
      settles.every((s) => s.completionTokens === 30 && s.costMicros > 0),
      'with what each produced',
    );
    // Each line names the bucket its hold was taken in (1 s buckets at this config's 35 s hold TTL).
    t.ok(
      settles.every((s) => s.holdBucketDue === Math.ceil(s.holdExpiresAtMs! / 1000) * 1000),
      "and its hold's bucket",
    );
    const keep = join(spoolDir, '..', `${files[0]}.copy-${process.pid}`);
    await copyFile(join(spoolDir, files[0]!), keep);
    t.teardown(() => rm(keep, { force: true }));
    // SPEC §10: their usage could not be flushed either: it is spooled beside them, to follow the ledger.
    const usageSpool = await usageSpooled(spoolDir);
    t.equal(usageSpool.files.length, 1, 'one usage spool file');
    const spooledUsage = usageSpool.cells.filter((c) => c.account === 'spooled');
    t.same(
      [
        spooledUsage.reduce((n, c) => n + c.requests, 0),
        spooledUsage.reduce((n, c) => n + c.completion_tokens, 0),
        spooledUsage.reduce((n, c) => n + c.cost_micros, 0),
      ],
      [ids.length, 30 * ids.length, settles.reduce((s, x) => s + x.costMicros, 0)],
      'with the usage of every completed stream',
    );
    const keepUsage = join(spoolDir, '..', `${usageSpool.files[0]}.copy-${process.pid}`);
    await copyFile(join(spoolDir, usageSpool.files[0]!), keepUsage);
    t.teardown(() => rm(keepUsage, { force: true }));

    await redis.start();
    await waitFor(async () => (await fetch(`${admin.adminUrl}/readyz`)).status === 200, 10_000, 'the admin gateway to reconnect', 50);
    const before = await ledgerOf(admin.admin, 'spooled');
    t.same(
      before.filter((e) => e.kind === 'debit'),
      [],
      'nothing was debited during the outage',
    );
    t.ok((await accountOf(admin.admin, 'spooled')).held_micros > 0, 'the holds are still there');

    // The next process on the same spool applies it at start, with the hold margin raised meanwhile: 10 s
    // buckets where the holds were taken in 1 s ones. Each settle finds its hold in the bucket its line names.
    const later = { ...config, credit: { hold_margin_seconds: 600 } };
    const second = await spawnGateway(t, { readyTimeoutMs: BOOT_MS, redisUrl: redis.url, upstreamUrl: sim.url, config: later });
    const entries = await waitFor(
      async () => {
        const all = await ledgerOf(admin.admin, 'spooled');
        return all.filter((e) => e.kind === 'debit').length >= ids.length && all;
      },
      10_000,
      'the spooled settles to land',
      100,
    );
    await waitFor(async () => (await spooled(spoolDir)).files.length === 0, 5_000, 'the replayed file to be deleted');
    await waitFor(async () => (await usageSpooled(spoolDir)).files.length === 0, 5_000, 'the replayed usage file to be deleted');
    let acct = await accountOf(admin.admin, 'spooled');
    t.equal(acct.held_micros, 0, 'every hold released');
    checkLedger(t, entries, acct, new Set(ids));
    // The aggregates equal the ledger, without a rebuild (SPEC §10).
    const debits = entries.filter((e) => e.kind === 'debit');
    const fromLedger = {
      requests: debits.length,
      prompt_tokens: debits.reduce((n, e) => n + (e.prompt_tokens ?? 0), 0),
      completion_tokens: debits.reduce((n, e) => n + (e.completion_tokens ?? 0), 0),
      cost_micros: debits.reduce((n, e) => n - e.amount_micros, 0),
    };
    const days = debits.map((e) => e.ts.slice(0, 10)).sort();
    const usageNow = async () =>
      (await admin.admin(`/admin/accounts/spooled/usage?from=${days[0]}&to=${days.at(-1)}&group_by=key`)).body as {
        rows: Record<string, number>[];
      };
    const aggregate = async () => {
      const rows = (await usageNow()).rows;
      return ['requests', 'prompt_tokens', 'completion_tokens', 'cost_micros'].map((f) => rows.reduce((n, r) => n + r[f]!, 0));
    };
    const expected = [fromLedger.requests, fromLedger.prompt_tokens, fromLedger.completion_tokens, fromLedger.cost_micros];
    t.same(await aggregate(), expected, 'usage aggregates equal the ledger after the restart');
    for (const e of entries.filter((x) => x.kind === 'debit')) {
      t.equal(e.completion_tokens, 30);
      t.equal(e.usage_source, 'upstream');
    }

    // The same file once more, by the CLI (an operator's copy, or a replay that stopped before deleting it).
    const again = join(spoolDir, 'again');
    await mkdir(again);
    await copyFile(keep, join(again, 'settles-copy.spool'));
    await copyFile(keepUsage, join(again, 'usage-copy.usage'));
    const cfgFile = join(spoolDir, '..', `tollgate-fault-spool-${process.pid}.yaml`);
    const doc = testConfigDoc(sim.url) as Record<string, Record<string, unknown>>;
    for (const [section, values] of Object.entries(later)) doc[section] = { ...doc[section], ...values };
    await writeFile(cfgFile, stringify(doc));
    t.teardown(() => rm(cfgFile, { force: true }));
    const cli = await runCli(['spool', 'replay', '--dir', again], { TOLLGATE_CONFIG: cfgFile, REDIS_URL: redis.url });
    t.equal(cli.code, 0, `spool replay exits 0 (${cli.stderr.slice(0, 300)})`);
    t.match(parseFields(cli.stdout), {
      files: '1',
      settles: '10',
      debited: '0',
      already_settled: '10',
      failed: '0',
      usage_files: '1',
      usage_failed: '0',
    });
    t.same(await readdir(again), [], 'the files are deleted');
    t.same(await aggregate(), expected, 'the usage replayed again counts nothing twice');
    const after = await ledgerOf(admin.admin, 'spooled');
    t.equal(after.length, entries.length, 'no new ledger entry');
    acct = await accountOf(admin.admin, 'spooled');
    checkLedger(t, after, acct, new Set(ids));
    t.equal(acct.balance_micros, grant - settles.reduce((s, x) => s + x.costMicros, 0), 'balance = grant − the spooled costs');
    second.child.kill('SIGTERM');
    t.equal((await second.exited).code, 0);
  });

  t.test('a running gateway applies a spool another process closed, without a restart', async (t) => {
    const redis = await startAofRedis(t);
    const sim = await startSim(t);
    const spoolDir = await mkdtemp(join(tmpdir(), 'tollgate-fault-spool-'));
    t.teardown(() => rm(spoolDir, { recursive: true, force: true }));
    const gw = await startGateway(t, {
      redisUrl: redis.url,
      upstreamUrl: sim.url,
      config: { server: { spool_dir: spoolDir, spool_scan_seconds: 1 } },
    });
    await gw.createKey({ account: 'scan', env: 'live' });
    await gw.grant('scan', 1_000_000);
    // The last pod of a rolling update held for a request and spooled its settle at exit, on the shared volume.
    const expiry = Date.now() + 60_000;
    t.ok((await gw.store.hold('scan', 'req_from_another_pod', 500, expiry)).ok);
    const other = createSpool({ dir: spoolDir });
    await other.append([
      {
        account: 'scan',
        requestId: 'req_from_another_pod',
        costMicros: 321,
        keyId: 'key_other',
        model: 'sim-small',
        promptTokens: 10,
        completionTokens: 20,
        usageSource: 'upstream',
        ts: new Date().toISOString(),
        holdExpiresAtMs: expiry,
      },
    ]);
    await other.close();
    const entries = await waitFor(
      async () => {
        const all = await ledgerOf(gw.admin, 'scan');
        return all.some((e) => e.kind === 'debit') && all;
      },
      5_000,
      'the running gateway to apply the spool',
      100,
    );
    const acct = await accountOf(gw.admin, 'scan');
    t.same([acct.balance_micros, acct.held_micros], [1_000_000 - 321, 0], 'debited, hold released');
    checkLedger(t, entries, acct, new Set(['req_from_another_pod']));
    await waitFor(async () => (await spooled(spoolDir)).files.length === 0, 3_000, 'the file to be deleted');
  });
}
