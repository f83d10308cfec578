// A single Redis that stops answering while its connections stay open (SIGSTOP: a frozen process, a
// partition that drops packets without a reset), then resumes (SIGCONT) and runs what was written to it
// meanwhile — the single-node twin of test/cluster/partition.test.ts. A stopped server refuses
// connections (credit-redis-outage.test.ts); a frozen one answers nothing, so every command waits for
// `store.command_timeout_ms`. Checked here:
// 1. live requests answer 503 store_unavailable, none later than two command timeouts and most at once
//    (the script pipe refuses new commands while its oldest is overdue), and none reaches the upstream;
//    cached test keys are served; the admin port's /healthz answers throughout;
// 2. streams whose settles meet the freeze are served, and their settles land once Redis resumes;
// 3. after SIGCONT the same gateway serves live keys again within a second; every served request is
//    debited exactly once, balance = Σ ledger, and nothing is left held (a hold that timed out and ran
//    late was settled at 0).
import t from 'tap';
import { startRedis } from '../helpers/redis.ts';
import { startGateway } from '../helpers/gateway.ts';
import { waitFor } from '../helpers/wait.ts';
import { accountVsLedger, ledger, postChat, startSim } from './chat-fixture.ts';
import { chat, streamBody } from './credit-support.ts';

const TIMEOUT_MS = 500;
const FREEZE_MS = 3000;
/** Two calls in sequence, each bounded by the timeout (docs/operations.md), plus slack for a loaded box. */
const BOUND_MS = TIMEOUT_MS * 4;

const redis = await startRedis(t, { restartable: true });
if (redis) {
  t.test('a frozen Redis: live 503 at once, test keys served, settles land on resume, nothing lost', async (t) => {
    const sim = await startSim(t);
    const gw = await startGateway(t, { redisUrl: redis.url, upstreamUrl: sim.url, config: { store: { command_timeout_ms: TIMEOUT_MS } } });
    const body = { model: 'sim-small', messages: [{ role: 'user', content: 'hello' }], max_tokens: 16, sim: { tokens: 8 } };
    const live = await gw.createKey({ account: 'frozen', env: 'live' });
    const test = await gw.createKey({ account: 'frozen-test', env: 'test' });
    await gw.grant('frozen', 100_000_000);
    const served: string[] = [];
    // Both keys cached before the freeze.
    for (const k of [live.key, test.key]) {
      const r = await postChat(gw, k, body);
      t.equal(r.status, 200);
      await r.arrayBuffer();
      if (k === live.key) served.push(r.headers.get('x-request-id')!);
    }
    // Two streams under way at the freeze: held before it, they end during it, so their settles meet it.
    const slow = [0, 1].map(() => chat(gw.url, live.key, streamBody({ tokens: 6, delay_ms: 100 })));
    const streams = await Promise.all(slow);
    for (const s of streams) served.push(s.headers.get('x-request-id')!);
    const streamBodies = Promise.all(streams.map((s) => s.text()));

    redis.child!.kill('SIGSTOP');
    const frozenAt = Date.now();
    const upstreamCalls = sim.requests.length;
    const live503: number[] = [];
    const others: string[] = [];
    let testServed = 0;
    let healthz = 0;
    const until = frozenAt + FREEZE_MS;
    const pace = () => new Promise((r) => setTimeout(r, 10));
    await Promise.all([
      ...Array.from({ length: 4 }, async () => {
        while (Date.now() < until) {
          const s = Date.now();
          const r = await postChat(gw, live.key, body);
          const j = (await r.json()) as { error?: { code?: string } };
          if (r.status === 503 && j.error?.code === 'store_unavailable') live503.push(Date.now() - s);
          else others.push(`${r.status} ${j.error?.code}`);
          await pace();
        }
      }),
      (async () => {
        while (Date.now() < until) {
          const r = await postChat(gw, test.key, body);
          await r.arrayBuffer();
          if (r.status === 200) testServed++;
          else others.push(`test ${r.status}`);
          await new Promise((r) => setTimeout(r, 100));
        }
      })(),
      (async () => {
        while (Date.now() < until) {
          const r = await fetch(`${gw.adminUrl}/healthz`);
          await r.arrayBuffer();
          if (r.status === 200) healthz++;
          else others.push(`healthz ${r.status}`);
          await new Promise((r) => setTimeout(r, 200));
        }
      })(),
    ]);
    const liveCalls = sim.requests.length - upstreamCalls - testServed;
    const texts = await streamBodies;
    redis.child!.kill('SIGCONT');
    const resumedAt = Date.now();

    live503.sort((a, b) => a - b);
    const median = live503[live503.length >> 1]!;
    const slowest = live503.at(-1)!;
    t.comment(
      `frozen ${FREEZE_MS} ms: ${live503.length} live 503s, median ${median} ms, slowest ${slowest} ms; ${testServed} test-key requests served`,
    );
    t.same(others, [], 'during the freeze: live requests 503 store_unavailable, test keys 200, /healthz 200');
    t.ok(live503.length >= 20, `live requests kept being answered (${live503.length})`);
    t.ok(slowest < BOUND_MS, `no live request waited past ${BOUND_MS} ms (slowest ${slowest} ms)`);
    t.ok(median < TIMEOUT_MS / 2, `most answered at once, not after a timeout each (median ${median} ms)`);
    t.equal(liveCalls, 0, 'no live request reached the upstream while holds could not be taken');
    t.ok(testServed >= 5, `cached test keys served (${testServed})`);
    t.ok(healthz >= 5, 'the admin port answered');
    t.ok(
      texts.every((x) => x.trimEnd().endsWith('data: [DONE]')),
      'the streams held before the freeze were served to the end',
    );

    // Served again soon after the resume, by the same gateway.
    const again = await waitFor(
      async () => {
        const r = await postChat(gw, live.key, body);
        await r.arrayBuffer();
        return r.status === 200 && r.headers.get('x-request-id')!;
      },
      5000,
      'a live request served after SIGCONT',
      20,
    );
    served.push(again);
    t.ok(Date.now() - resumedAt < 1000, `served again ${Date.now() - resumedAt} ms after SIGCONT`);

    await waitFor(
      async () => {
        const debited = new Set((await ledger(gw, 'frozen')).filter((e) => e.kind === 'debit').map((e) => e.request_id));
        return served.every((id) => debited.has(id));
      },
      10_000,
      'every served request debited (the streams’ settles retried after the resume)',
      100,
    );
    // The zero settles of holds that timed out retry on their own schedule (~0.2 s after the debits here).
    await waitFor(async () => (await accountVsLedger(gw, 'frozen')).held === 0, 10_000, 'nothing left held', 100);
    const { balance, held, sum, entries } = await accountVsLedger(gw, 'frozen');
    const debits = entries.filter((e) => e.kind === 'debit');
    t.equal(new Set(debits.map((e) => e.request_id)).size, debits.length, 'no request debited twice');
    t.ok(
      debits.filter((e) => !served.includes(e.request_id!)).every((e) => e.amount_micros === 0),
      'a debit of a request not served is a hold that timed out, settled at 0',
    );
    t.equal(balance, sum, 'balance = Σ ledger');
    t.equal(held, 0, 'nothing left held');
  });
}
