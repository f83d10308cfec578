// SPEC §14 "Settles survive the process" (issue 25, fault 2), the slow case: the outage outlasts the holds, so
// the reaper releases them (`hold_expired`) before the spooled settles are applied by `tollgate spool replay`.
// Each still debits exactly once (`r` → `+` in settle.lua, docs/ledger.md "Settles from the spool"), and a
// second replay of the same file debits nothing. Redis runs on an AOF, killed with SIGKILL and restarted on it.
import { copyFile, mkdtemp, rm, writeFile } from 'node:fs/promises';
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
import { readContent, spooled, startAofRedis } from './fault-support.ts';

/** Child gateways boot in 0.5–1 s on an idle box; 7 s was seen with the machine's load at 33. */
const BOOT_MS = 30_000;

if (requireRedis(t, process.env, true) && onPath('redis-server', process.env.PATH)) {
  t.test('a replay after the reaper released the holds still debits each exactly once (tollgate spool replay)', async (t) => {
    const redis = await startAofRedis(t);
    const sim = await startSim(t);
    // Holds of 2.5 s (upstream total 2.5 s, no margin) so the reaper takes them within the test.
    const short = { upstream: { total_timeout_ms: 2500 }, credit: { hold_margin_seconds: 0, reaper_interval_ms: 100 } };
    const admin = await startGateway(t, {
      redisUrl: redis.url,
      upstreamUrl: sim.url,
      config: { ...short, store: { command_timeout_ms: 300 } },
    });
    const { key } = await admin.createKey({ account: 'reaped', env: 'live' });
    const grant = 5_000_000;
    await admin.grant('reaped', grant);
    const spoolDir = await mkdtemp(join(tmpdir(), 'tollgate-fault-spool-'));
    t.teardown(() => rm(spoolDir, { recursive: true, force: true }));
    const config = { ...short, server: { drain_seconds: 2, spool_dir: spoolDir }, store: { command_timeout_ms: 300 } };
    const gw = await spawnGateway(t, { readyTimeoutMs: BOOT_MS, redisUrl: redis.url, upstreamUrl: sim.url, config });
    const responses = await Promise.all([0, 1, 2].map(() => chat(gw.url, key, streamBody({ tokens: 15, delay_ms: 40 }))));
    const ids = responses.map((r) => r.headers.get('x-request-id')!);
    const readers = await Promise.all(responses.map((r) => readContent(r, 2)));
    await redis.kill();
    gw.child.kill('SIGTERM');
    for (const text of await Promise.all(readers.map((r) => r.rest()))) t.equal(sseData(text).at(-1), '[DONE]');
    t.equal((await gw.exited).code, 0);
    const { files, settles } = await spooled(spoolDir);
    t.same(settles.map((s) => s.requestId).sort(), [...ids].sort(), 'spooled');
    const keep = join(spoolDir, '..', `${files[0]}.copy-${process.pid}`);
    await copyFile(join(spoolDir, files[0]!), keep);
    t.teardown(() => rm(keep, { force: true }));

    await redis.start();
    await waitFor(async () => (await fetch(`${admin.adminUrl}/readyz`)).status === 200, 10_000, 'the admin gateway to reconnect', 50);
    // The admin gateway's reaper releases the expired holds: a hold_expired entry each, nothing held.
    await waitFor(
      async () => (await ledgerOf(admin.admin, 'reaped')).filter((e) => e.kind === 'hold_expired').length === ids.length,
      15_000,
      'the reaper to release the three holds',
      100,
    );
    t.equal((await accountOf(admin.admin, 'reaped')).held_micros, 0, 'released by the reaper');

    const cfgFile = join(spoolDir, '..', `tollgate-fault-reaped-${process.pid}.yaml`);
    const doc = testConfigDoc(sim.url) as Record<string, Record<string, unknown>>;
    for (const [section, values] of Object.entries(config)) doc[section] = { ...doc[section], ...values };
    await writeFile(cfgFile, stringify(doc));
    t.teardown(() => rm(cfgFile, { force: true }));
    const env = { TOLLGATE_CONFIG: cfgFile, REDIS_URL: redis.url };
    const cli = await runCli(['spool', 'replay'], env);
    t.equal(cli.code, 0, `exit 0 (${cli.stderr.slice(0, 300)})`);
    t.match(parseFields(cli.stdout), { files: '1', settles: '3', debited: '3', already_settled: '0', unresolved: '0' });
    t.same((await spooled(spoolDir)).files, [], 'the file is deleted');

    let entries = await ledgerOf(admin.admin, 'reaped');
    const debits = entries.filter((e) => e.kind === 'debit');
    t.equal(debits.length, 3, 'each debited once');
    t.ok(
      debits.every((e) => e.hold_micros === 0),
      'with no hold left to release (the reaper had)',
    );
    let acct = await accountOf(admin.admin, 'reaped');
    t.equal(acct.held_micros, 0);
    checkLedger(t, entries, acct, new Set(ids));

    // Replayed again: the `+` records answer it, nothing debited twice.
    await copyFile(keep, join(spoolDir, 'settles-again.spool'));
    const twice = await runCli(['spool', 'replay', '--json'], env);
    t.equal(twice.code, 0);
    t.match(JSON.parse(twice.stdout), { settles: 3, debited: 0, alreadySettled: 3 });
    entries = await ledgerOf(admin.admin, 'reaped');
    acct = await accountOf(admin.admin, 'reaped');
    checkLedger(t, entries, acct, new Set(ids));
    t.equal(acct.balance_micros, grant - settles.reduce((s, x) => s + x.costMicros, 0));
  });
}
