// SPEC §4 / docs/operations.md "Durability": redis-server with `--appendonly yes --appendfsync always`
// is killed (SIGKILL, a crash: no shutdown save) under live load and started again on its AOF. Nothing
// is lost: the grant survives, every request served 200 is debited exactly once (settles that met the
// outage retry until Redis is back), balance = Σ ledger, and no hold is left behind.
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import t from 'tap';
import { Redis } from 'ioredis';
import { onPath, requireRedis } from '../helpers/redis.ts';
import { freePort } from '../helpers/ports.ts';
import { startGateway } from '../helpers/gateway.ts';
import { waitFor } from '../helpers/wait.ts';
import { startSim } from './chat-fixture.ts';
import { accountOf, chat, checkLedger, ledgerOf, streamBody } from './credit-support.ts';

/** redis-server on `port` with its AOF in `dir`, fsynced before every reply; resolves once it accepts connections. */
async function spawnAofRedis(port: number, dir: string): Promise<ChildProcess> {
  const child = spawn(
    'redis-server',
    ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--save', '', '--appendonly', 'yes', '--appendfsync', 'always'],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let log = '';
  child.stderr!.on('data', (b: Buffer) => (log += b));
  child.stdout!.on('data', (b: Buffer) => (log += b));
  await waitFor(() => log.includes('Ready to accept connections') || child.exitCode !== null, 10_000, 'redis-server to be ready');
  if (child.exitCode !== null) throw new Error(`redis-server exited: ${log}`);
  return child;
}

if (requireRedis(t, process.env, true) && onPath('redis-server', process.env.PATH)) {
  t.test('AOF always: redis-server killed and restarted under live load loses nothing', async (t) => {
    const dir = await mkdtemp(join(tmpdir(), 'tollgate-aof-'));
    t.teardown(() => rm(dir, { recursive: true, force: true }));
    const port = await freePort();
    let server = await spawnAofRedis(port, dir);
    t.teardown(() => void server.kill('SIGKILL'));
    const probe = new Redis(port, '127.0.0.1', { maxRetriesPerRequest: 1, retryStrategy: () => 100 });
    probe.on('error', () => {});
    t.teardown(() => probe.disconnect());

    const sim = await startSim(t);
    const gw = await startGateway(t, {
      redisUrl: `redis://127.0.0.1:${port}`,
      upstreamUrl: sim.url,
      config: { store: { command_timeout_ms: 300 }, usage: { flush_interval_ms: 200 } },
    });
    const { key } = await gw.createKey({ account: 'durable', env: 'live' });
    const grant = 100_000_000;
    await gw.grant('durable', grant);

    const served = new Set<string>();
    const refused = new Map<number, number>();
    let stop = false;
    const worker = async () => {
      while (!stop) {
        const res = await chat(gw.url, key, streamBody({ tokens: 6, delay_ms: 5 })).catch(() => undefined);
        if (!res) continue;
        const text = await res.text().catch(() => '');
        if (res.status === 200 && text.includes('[DONE]')) served.add(res.headers.get('x-request-id')!);
        else refused.set(res.status, (refused.get(res.status) ?? 0) + 1);
        if (res.status !== 200) await sleep(20);
      }
    };
    const load = Promise.all(Array.from({ length: 8 }, worker));
    await waitFor(() => served.size >= 40, 20_000, '40 requests served before the crash');
    const beforeCrash = served.size;
    server.kill('SIGKILL');
    await once(server, 'exit');
    await sleep(300);
    server = await spawnAofRedis(port, dir);
    t.equal(await probe.config('GET', 'appendfsync').then((r) => (r as string[])[1]), 'always', 'the restarted server fsyncs always');
    await waitFor(() => served.size >= beforeCrash + 40, 20_000, '40 more requests served after the restart');
    stop = true;
    await load;
    t.ok((refused.get(503) ?? 0) > 0, `live requests failed closed (503) while Redis was down: ${refused.get(503)}`);
    t.same([...refused.keys()], [503], 'and nothing else was refused');

    // Settles that met the outage retry in the background; wait until every served request is debited.
    const entries = await waitFor(
      async () => {
        const all = await ledgerOf(gw.admin, 'durable').catch(() => []);
        const debited = new Set(all.filter((e) => e.kind === 'debit').map((e) => e.request_id));
        return [...served].every((id) => debited.has(id)) && all;
      },
      15_000,
      'a debit for every served request',
    );
    t.same(
      entries.filter((e) => e.kind === 'grant').map((e) => e.amount_micros),
      [grant],
      'the grant made before the crash is still there',
    );
    const account = await waitFor(
      async () => {
        const a = await accountOf(gw.admin, 'durable');
        return a.held_micros === 0 && a;
      },
      15_000,
      'every hold released',
    );
    // A request refused with 503 while its hold command timed out is settled at 0 (credit.ts): such
    // debits are free and belong to no served request; every other debit is a served one, once.
    const debits = entries.filter((e) => e.kind === 'debit');
    const strays = debits.filter((e) => !served.has(e.request_id!));
    t.ok(
      strays.every((e) => e.amount_micros === 0),
      `${strays.length} debit(s) of refused requests, all at cost 0`,
    );
    checkLedger(t, entries, account);
    t.equal(debits.filter((e) => served.has(e.request_id!)).length, served.size, `each of the ${served.size} served requests debited once`);
    t.ok(
      debits.every((e) => e.amount_micros < 0 || !served.has(e.request_id!)),
      'every served request cost something',
    );
  });
}
