// server.workers faults (SPEC §11, §14) with real processes: signals that reach every process of the
// group (systemd's control-group kill, Ctrl-C in a terminal) or the primary twice, a worker that stops
// answering (SIGSTOP: its event loop runs nothing, as a blocked one), and a worker killed mid-stream
// while the other worker's stream goes on.
import t from 'tap';
import { startRedis } from '../helpers/redis.ts';
import { startGateway } from '../helpers/gateway.ts';
import { waitFor } from '../helpers/wait.ts';
import { startSimulator } from '../../src/simulator/simulator.ts';
import { accountOf, chat, checkLedger, ledgerOf, streamBody } from './credit-support.ts';
import { spawnWorkers } from './workers-support.ts';
import { sseData } from './chat-fixture.ts';
import { execFileSync } from 'node:child_process';

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** The pids of a process's children (the primary's workers, including one still booting). */
function childrenOf(pid: number): number[] {
  try {
    return execFileSync('ps', ['-o', 'pid=', '--ppid', String(pid)], { encoding: 'utf8' })
      .split('\n')
      .map((l) => Number(l.trim()))
      .filter((n) => n > 0);
  } catch {
    return []; // ps exits 1 when there are none
  }
}

/** `n` streams of 40 × 25 ms (≈ 1 s each) on separate connections: round-robin spreads them over the workers. */
async function openStreams(url: string, key: string, n: number): Promise<Promise<string>[]> {
  const streams = await Promise.all(Array.from({ length: n }, () => chat(url, key, streamBody({ tokens: 40, delay_ms: 25 }))));
  return streams.map((r) => r.text());
}

const redis = await startRedis(t);
if (redis) {
  const sim = await startSimulator();
  t.teardown(() => sim.close());
  const admin = await startGateway(t, { redisUrl: redis.url, upstreamUrl: sim.url });

  for (const how of ['to every process of the group', 'twice to the primary'] as const) {
    t.test(`SIGTERM ${how}: every worker still drains its streams and settles them`, async (t) => {
      const account = `wsig-${how.split(' ')[0]}`;
      const { key } = await admin.createKey({ account, env: 'live' });
      await admin.grant(account, 1_000_000);
      const gw = await spawnWorkers(t, redis.url, sim.url);
      const bodies = await openStreams(gw.url, key, 4);
      await new Promise((r) => setTimeout(r, 200));
      if (how === 'to every process of the group') {
        // systemd (KillMode=control-group) and a terminal's Ctrl-C signal every process, and the primary passes it on.
        gw.child.kill('SIGTERM');
        for (const pid of gw.pids()) process.kill(pid, 'SIGTERM');
      } else {
        gw.child.kill('SIGTERM');
        await new Promise((r) => setTimeout(r, 100));
        gw.child.kill('SIGTERM');
      }
      for (const b of await Promise.all(bodies.map((b) => b.catch((e: Error) => `cut: ${e.message}`)))) {
        const data = sseData(b);
        t.equal(data.at(-1), '[DONE]', 'the stream finished');
      }
      t.same(await gw.exited, { code: 0, signal: null }, 'the primary exits 0');
      const entries = await ledgerOf(admin.admin, account);
      t.equal(entries.filter((e) => e.kind === 'debit').length, 4, 'every stream settled once');
      const acct = await accountOf(admin.admin, account);
      t.equal(acct.held_micros, 0, 'nothing left held');
      checkLedger(t, entries, acct);
    });
  }

  t.test('SIGTERM with a worker that does not answer: the primary still exits within drain + 5 s', async (t) => {
    const gw = await spawnWorkers(t, redis.url, sim.url, { server: { drain_seconds: 1 } });
    const [stuck, other] = gw.pids();
    process.kill(stuck!, 'SIGSTOP');
    const start = Date.now();
    gw.child.kill('SIGTERM');
    const exit = await Promise.race([gw.exited, new Promise((r) => setTimeout(() => r('still running'), 12_000))]);
    const took = Date.now() - start;
    t.not(exit, 'still running', 'the primary exited');
    t.ok(took < 1_000 + 5_000 + 1_500, `within drain + 5 s (+ slack): ${took} ms`);
    t.same(exit, { code: 1, signal: null }, 'exit 1: a worker had to be killed');
    await waitFor(() => !alive(stuck!) && !alive(other!), 3_000, 'no worker left behind');
  });

  t.test('a worker killed mid-stream: its holds are reaped once, the other worker streams on; a crash loop backs off', async (t) => {
    const account = 'wcrash';
    const { key } = await admin.createKey({ account, env: 'live' });
    await admin.grant(account, 1_000_000);
    // Holds expire total_timeout + margin = 2 s + 1 s after they are taken; the reaper looks every 200 ms.
    const gw = await spawnWorkers(t, redis.url, sim.url, {
      upstream: { total_timeout_ms: 2_000 },
      credit: { hold_margin_seconds: 1, reaper_interval_ms: 200 },
    });
    const [victim] = gw.pids();
    // 60 × 25 ms = 1.5 s each, on four connections: two per worker.
    const streams = await Promise.all(Array.from({ length: 4 }, () => chat(gw.url, key, streamBody({ tokens: 60, delay_ms: 25 }))));
    const ids = streams.map((r) => r.headers.get('x-request-id')!);
    const bodies = streams.map((r) => r.text().catch(() => ''));
    await new Promise((r) => setTimeout(r, 300));
    process.kill(victim!, 'SIGKILL');
    const texts = await Promise.all(bodies);
    const done = ids.filter((_, i) => sseData(texts[i]!).at(-1) === '[DONE]');
    const cut = ids.filter((id) => !done.includes(id));
    t.ok(done.length >= 1 && cut.length >= 1, `streams on both workers: ${done.length} finished, ${cut.length} cut`);

    // The replacements die young too (as a worker that crashes on every boot or request would): each is
    // killed as soon as it listens. From the third young death on, the primary waits before forking.
    for (let n = 2; n <= 4; n++) {
      await waitFor(() => gw.pids().length === n + 1, 20_000, `replacement ${n - 1} to listen`);
      const newest = gw.pids().at(-1)!;
      process.kill(newest, 'SIGKILL');
      await waitFor(() => !childrenOf(gw.child.pid!).includes(newest), 3_000, 'the kill to land', 50);
      if (n < 4) continue;
      // Young death number 4 (the victim was the first): replaced after 2 s, not at once.
      const seen = new Set<number>();
      const until = Date.now() + 700;
      while (Date.now() < until) {
        for (const p of childrenOf(gw.child.pid!)) seen.add(p);
        await new Promise((r) => setTimeout(r, 50));
      }
      t.equal(seen.size, 1, 'no replacement forked within 0.7 s of the fourth young death: only the surviving worker runs');
    }
    // Meanwhile the surviving worker serves, and the primary is still up.
    const during = await chat(gw.url, key, streamBody({ tokens: 5, delay_ms: 5 }));
    t.equal(sseData(await during.text()).at(-1), '[DONE]', 'a request during the crash loop is served');
    t.equal(gw.child.exitCode, null, 'the primary is still running');
    await waitFor(async () => (await fetch(`${gw.adminUrl}/readyz`)).status === 200, 20_000, 'ready again once they stop dying');

    const entries = await waitFor(
      async () => {
        const all = await ledgerOf(admin.admin, account);
        return all.filter((e) => e.kind === 'hold_expired').length >= cut.length && all;
      },
      15_000,
      "the killed worker's holds to be reaped",
    );
    for (const id of cut) {
      t.same(
        entries.filter((e) => e.request_id === id).map((e) => e.kind),
        ['hold_expired'],
        `a cut stream: its hold released once, never debited (${id})`,
      );
    }
    for (const id of done)
      t.same(entries.filter((e) => e.request_id === id && e.kind === 'debit').length, 1, 'a finished stream: debited once');
    const acct = await accountOf(admin.admin, account);
    t.equal(acct.held_micros, 0, 'nothing left held');
    checkLedger(t, entries, acct);
    gw.child.kill('SIGTERM');
    t.same(await gw.exited, { code: 0, signal: null });
  });
}
