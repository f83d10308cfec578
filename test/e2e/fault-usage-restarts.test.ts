// Issue 25 item 5 / SPEC §10: usage aggregates stay equal to the ledger across Redis restarts and failed
// flushes, without a rebuild. Under live load Redis is stalled (a busy script: flushes time out on the
// gateway's side and still run when Redis gets to them, the case a blind retry doubles) and then killed
// and restarted on its AOF, three times. Afterwards the aggregates equal the ledger: cost and tokens
// summed over the debits, and `requests` the requests served (debits that billed tokens; a zero-cost
// entry of a request that never ran is none). The rebuild counts the same way.
import { setTimeout as sleep } from 'node:timers/promises';
import t from 'tap';
import { Redis } from 'ioredis';
import { onPath, requireRedis } from '../helpers/redis.ts';
import { startGateway } from '../helpers/gateway.ts';
import { waitFor } from '../helpers/wait.ts';
import { startSim } from './chat-fixture.ts';
import { accountOf, chat, checkLedger, ledgerOf, streamBody, type Entry } from './credit-support.ts';
import { startDurableRedis } from './durable-redis.ts';

const DAY_MS = 86_400_000;
const day = (ms: number) => new Date(ms).toISOString().slice(0, 10);

/** What the aggregates must say: the ledger's debits summed, requests counted as served. */
function fromLedger(entries: readonly Entry[]) {
  const debits = entries.filter((e) => e.kind === 'debit');
  return {
    requests: debits.filter((e) => (e.prompt_tokens ?? 0) + (e.completion_tokens ?? 0) > 0).length,
    prompt_tokens: debits.reduce((s, e) => s + (e.prompt_tokens ?? 0), 0),
    completion_tokens: debits.reduce((s, e) => s + (e.completion_tokens ?? 0), 0),
    cost_micros: debits.reduce((s, e) => s - e.amount_micros, 0),
  };
}

if (requireRedis(t, process.env, true) && onPath('redis-server', process.env.PATH)) {
  t.test('Redis stalled and restarted three times during flushes: aggregates = ledger, no rebuild', async (t) => {
    const redis = await startDurableRedis(t);
    const sim = await startSim(t);
    const gw = await startGateway(t, {
      redisUrl: redis.url,
      upstreamUrl: sim.url,
      config: { store: { command_timeout_ms: 150 }, usage: { flush_interval_ms: 50 } },
    });
    const { key } = await gw.createKey({ account: 'usage', env: 'live' });
    await gw.grant('usage', 1_000_000_000);
    const stall = new Redis(redis.url, { maxRetriesPerRequest: 1, retryStrategy: () => 100 });
    stall.on('error', () => {});
    t.teardown(() => stall.disconnect());

    let served = 0;
    let stop = false;
    const worker = async () => {
      while (!stop) {
        const res = await chat(gw.url, key, streamBody({ tokens: 4, delay_ms: 3 })).catch(() => undefined);
        const text = res ? await res.text().catch(() => '') : '';
        if (res?.status === 200 && text.includes('[DONE]')) served++;
        else await sleep(10);
      }
    };
    const load = Promise.all(Array.from({ length: 6 }, worker));
    for (let round = 1; round <= 3; round++) {
      const before = served;
      await waitFor(() => served >= before + 20, 20_000, `20 requests served before round ${round}`);
      // Redis busy for 500 ms: commands queue in its socket; the gateway's 150 ms timeout fails the flushes
      // that Redis then runs. A blind retry applies them twice.
      await stall
        .eval(
          "local s = redis.call('TIME') repeat local n = redis.call('TIME') until (n[1] - s[1]) * 1000000 + (n[2] - s[2]) > 500000 return 1",
          0,
        )
        .catch(() => {});
      await sleep(100);
      await redis.stop('SIGKILL');
      await sleep(200);
      await redis.start();
    }
    const before = served;
    await waitFor(() => served >= before + 20, 20_000, '20 requests served after the last restart');
    stop = true;
    await load;

    const account = await waitFor(
      async () => {
        const a = await accountOf(gw.admin, 'usage').catch(() => undefined);
        return a?.held_micros === 0 && a;
      },
      15_000,
      'every hold settled',
    );
    const entries = await ledgerOf(gw.admin, 'usage');
    checkLedger(t, entries, account);
    const want = fromLedger(entries);
    const now = Date.now();
    const path = `/admin/accounts/usage/usage?from=${day(now - DAY_MS)}&to=${day(now + DAY_MS)}&group_by=model`;
    // Aggregates lag the ledger by up to the flush interval (and a retry after the last restart).
    let got: Record<string, number> = {};
    await waitFor(
      async () => {
        const r = await gw.admin(path);
        got = r.body.rows?.[0] ?? {};
        return got.cost_micros === want.cost_micros && got.requests === want.requests;
      },
      10_000,
      'the aggregates to catch up with the ledger',
    ).catch(() => {});
    t.comment(`${served} served; ${entries.filter((e) => e.kind === 'debit').length} debits; ledger ${JSON.stringify(want)}`);
    t.match(got, want, `aggregates = ledger after three stalls and restarts (aggregates ${JSON.stringify(got)})`);

    const rebuilt = await gw.admin('/admin/accounts/usage/usage/rebuild', {
      method: 'POST',
      body: { from: day(now - DAY_MS), to: day(now + DAY_MS) },
    });
    t.equal(rebuilt.status, 200, JSON.stringify(rebuilt.body));
    const after = await gw.admin(path);
    t.match(after.body.rows?.[0], want, 'the rebuild counts the same way: requests served, not ledger entries');
  });
}
