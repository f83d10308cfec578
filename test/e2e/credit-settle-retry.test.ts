// The settle survives a store outage (SPEC §1.2 "a finally no abort can skip", §4 idempotent settle):
// a stream whose hold was taken finishes while Redis is unreachable; the gateway logs 'settle failed;
// retrying' and keeps retrying until the debit lands — exactly once.
//
// Two outages, because they test different things:
//  - CLIENT PAUSE (data kept): the honest one. Redis stops answering for 2 s but loses nothing, so the
//    debit must land on the real account with its hold released. A timed-out attempt may still run when
//    the pause ends (if Redis read it before its connection was dropped): the ledger must still show one
//    debit.
//  - stop()/start() (the fixture's redis-server restarts EMPTY): the hold and the balance are gone with
//    the data, so only "the debit lands on the server that came back" is meaningful; the balance is then
//    −cost, which is what a ledger replayed on an empty store must say.
import t from 'tap';
import * as K from '../../src/store/redis-keys.ts';
import { monitorRedis, startRedis, type Monitor } from '../helpers/redis.ts';
import { startGateway } from '../helpers/gateway.ts';
import { startSimulator } from '../../src/simulator/simulator.ts';
import { accountOf, chat, checkLedger, ledgerOf, streamBody } from './credit-support.ts';
import { sseData, SIM_SMALL, expectedCost } from './chat-fixture.ts';
import { waitFor } from '../helpers/wait.ts';

const PAUSE_MS = 2000;
const TOKENS = 20;

/**
 * Lua script runs (EVAL + EVALSHA) the server executed, seen by MONITOR, that carry `requestId`: this
 * request's settles, not the usage flush or other scripts that run meanwhile.
 */
function scriptRunsOf(m: Monitor, requestId: string): number {
  return m.seen.filter((l) => /^eval(sha)? /i.test(l) && l.includes(requestId)).length;
}

/** Log lines (parsed) with this message. */
function logged(logs: string[], msg: string): Record<string, unknown>[] {
  return logs.map((l) => JSON.parse(l) as Record<string, unknown>).filter((l) => l.msg === msg);
}

const redis = await startRedis(t, { restartable: true });
if (redis) {
  const sim = await startSimulator();
  t.teardown(() => sim.close());

  t.test('Redis paused while the stream ends: the settle retries and debits exactly once', async (t) => {
    // Command timeout 300 ms: the outage fails fast. Hold TTL 40 s + 20 s: checked on the settled marker below.
    const config = { store: { command_timeout_ms: 300 }, upstream: { total_timeout_ms: 40_000 }, credit: { hold_margin_seconds: 20 } };
    const gw = await startGateway(t, { redisUrl: redis.url, upstreamUrl: sim.url, config });
    const { key } = await gw.createKey({ account: 'paused', env: 'live' });
    const grant = 1_000_000;
    await gw.grant('paused', grant);

    // 20 tokens × 25 ms: the stream ends ~500 ms into a 2 s pause.
    const res = await chat(gw.url, key, streamBody({ tokens: TOKENS, delay_ms: 25 }));
    t.equal(res.status, 200);
    const id = res.headers.get('x-request-id')!;
    const held = await accountOf(gw.admin, 'paused');
    t.ok(held.held_micros > 0, 'the hold is taken before the upstream answers');
    const monitor = await monitorRedis(redis.url);
    t.teardown(() => monitor.close());
    const pausedAt = Date.now();
    await redis.client.call('CLIENT', 'PAUSE', String(PAUSE_MS), 'ALL');
    t.equal(sseData(await res.text()).at(-1), '[DONE]', 'the client gets the whole stream; Redis is not on the chunk path');
    t.ok(Date.now() - pausedAt < PAUSE_MS, 'the stream ended while Redis was paused');

    // The admin reads answer 503 while Redis is paused: keep polling through them.
    const entry = await waitFor(
      async () => (await ledgerOf(gw.admin, 'paused').catch(() => [])).find((e) => e.kind === 'debit' && e.request_id === id),
      PAUSE_MS + 5000,
      'the debit after the pause',
    );
    const landedAt = Number(entry.id.split('-')[0]);
    t.ok(
      landedAt >= pausedAt + PAUSE_MS - 50,
      `the debit was written by Redis ${landedAt - pausedAt} ms after the pause began, i.e. after it ended`,
    );
    t.ok(
      logged(gw.logs, 'settle failed; retrying').some((l) => l.request_id === id),
      "the gateway logged 'settle failed; retrying'",
    );
    const landed = await waitFor(
      () => logged(gw.logs, 'settle landed after retries').find((l) => l.request_id === id),
      2000,
      'the landed log line',
    );
    t.ok(Number(landed.attempts) >= 2, `it landed on attempt ${String(landed.attempts)}`);
    const runs = scriptRunsOf(monitor, id);
    // The script pipe drops a connection whose command timed out, and Redis discards what a closed
    // client left unread, so a timed-out attempt usually never runs; one that does is a replay (below).
    t.ok(
      runs >= 1 && runs <= Number(landed.attempts),
      `the settle script ran ${runs} time(s) in Redis for ${String(landed.attempts)} attempts`,
    );
    t.comment(`settle landed on attempt ${String(landed.attempts)}; Redis ran the settle script ${runs} times`);

    t.equal(entry.usage_source, 'upstream');
    t.equal(entry.completion_tokens, TOKENS);
    t.equal(entry.amount_micros, -expectedCost(SIM_SMALL, entry.prompt_tokens!, TOKENS), 'debit = the request cost');
    t.equal(entry.hold_micros, held.held_micros, 'the hold it released is the one taken');
    const acct = await accountOf(gw.admin, 'paused');
    t.equal(acct.held_micros, 0, 'the hold is released');
    t.equal(acct.balance_micros, grant + entry.amount_micros, 'balance = grant − the one debit');
    checkLedger(t, await ledgerOf(gw.admin, 'paused'), acct, new Set([id]));
    // The settle's idempotency is the request's field in its hold bucket (docs/ledger.md), no key of its
    // own: a bucket of the holds expiring in the same second, due the hold TTL (40 s + 20 s) after the hold.
    const buckets = await redis.client.keys('{acct:paused}:hb:*');
    const records = (await Promise.all(buckets.map(async (b) => [b, await redis.client.hget(b, id)] as const))).filter(([, v]) => v);
    t.strictSame(
      records.map(([, v]) => v),
      [`=${entry.id}`],
      'one record of the request: settled, with its entry id',
    );
    const due = Number(records[0]![0].split(':').at(-1));
    t.ok(due - pausedAt > 55_000 && due - pausedAt <= 61_000, `its bucket is due ${Math.round((due - pausedAt) / 1000)} s after the hold`);
    t.equal(await redis.client.exists(K.settled('paused', id)), 0, 'no settled marker key');
  });

  t.test('the hold expires during the outage: settle and reaper race, one debit either way', async (t) => {
    // Holds expire 800 ms after they are taken (total timeout 800 ms + margin 0). The stream would take
    // 2 s, so the total timeout cuts it right at the hold's expiry — while Redis is paused (1.5 s from
    // the first byte). When Redis resumes, the settle retries and the reaper (every 50 ms, its "now"
    // past the expiry) reach the overdue hold in whatever order they were queued.
    const gw = await startGateway(t, {
      redisUrl: redis.url,
      upstreamUrl: sim.url,
      config: {
        store: { command_timeout_ms: 300 },
        upstream: { total_timeout_ms: 800 },
        credit: { hold_margin_seconds: 0, reaper_interval_ms: 50 },
      },
    });
    const { key } = await gw.createKey({ account: 'raced', env: 'live' });
    const grant = 1_000_000;
    await gw.grant('raced', grant);
    const res = await chat(gw.url, key, streamBody({ tokens: 100, delay_ms: 20 }));
    t.equal(res.status, 200);
    const id = res.headers.get('x-request-id')!;
    const { held_micros: hold } = await accountOf(gw.admin, 'raced');
    await redis.client.call('CLIENT', 'PAUSE', '1500', 'ALL');
    const data = sseData(await res.text());
    t.match(data.at(-1), /"code":"upstream_error"/, 'the total timeout ended the stream with an SSE error event');

    await waitFor(
      async () => (await ledgerOf(gw.admin, 'raced').catch(() => [])).some((e) => e.kind === 'debit'),
      6000,
      'the debit after the pause',
    );
    // Give a reap that lost the race time to (wrongly) run after the settle.
    await new Promise((r) => setTimeout(r, 300));
    const final = await ledgerOf(gw.admin, 'raced');
    const debits = final.filter((e) => e.kind === 'debit');
    const expired = final.filter((e) => e.kind === 'hold_expired');
    t.equal(debits.length, 1, 'one debit');
    const debit = debits[0]!;
    t.comment(
      `ledger after the pause: ${final
        .slice(1)
        .map((e) => e.kind)
        .join(', ')}`,
    );
    if (expired.length > 0) {
      t.equal(expired.length, 1, 'at most one hold_expired');
      t.equal(expired[0]!.hold_micros, hold, 'the reaper released the whole hold');
      t.equal(debit.hold_micros, 0, 'so the settle released nothing');
    } else {
      t.equal(debit.hold_micros, hold, 'the settle released the hold; nothing left to reap');
    }
    t.ok(debit.completion_tokens! > 0, `the tokens produced before the cut are billed (${debit.completion_tokens})`);
    t.equal(
      debit.amount_micros,
      -expectedCost(SIM_SMALL, debit.prompt_tokens!, debit.completion_tokens!),
      "at the request's full cost either way",
    );
    const acct = await accountOf(gw.admin, 'raced');
    t.equal(acct.held_micros, 0, 'no hold left');
    t.equal(acct.balance_micros, grant + debit.amount_micros);
    checkLedger(t, final, acct, new Set([id]));
  });

  t.test('Redis stopped while the stream ends, restarted empty: the settle lands on the new server', async (t) => {
    const gw = await startGateway(t, { redisUrl: redis.url, upstreamUrl: sim.url, config: { store: { command_timeout_ms: 300 } } }); // outage: fail fast
    const { key } = await gw.createKey({ account: 'restarted', env: 'live' });
    await gw.grant('restarted', 1_000_000);

    // 20 tokens × 30 ms: the stream is still running when Redis goes away.
    const res = await chat(gw.url, key, streamBody({ tokens: TOKENS, delay_ms: 30 }));
    t.equal(res.status, 200);
    const id = res.headers.get('x-request-id')!;
    await redis.stop();
    t.equal(sseData(await res.text()).at(-1), '[DONE]', 'the stream completes with Redis gone');
    await waitFor(
      () => logged(gw.logs, 'settle failed; retrying').some((l) => l.request_id === id),
      3000,
      "'settle failed; retrying' in the log",
    );
    t.pass("the gateway logged 'settle failed; retrying'");
    // Let a few retries fail (100, 200, 400 ms back-off) before the server returns.
    await new Promise((r) => setTimeout(r, 800));

    await redis.start();
    const restartedAt = Date.now();
    const entries = await waitFor(
      async () => {
        const all = await ledgerOf(gw.admin, 'restarted').catch(() => []);
        return all.some((e) => e.request_id === id) && all;
      },
      10_000,
      'the debit on the restarted server',
    );
    t.comment(`debit landed ${Date.now() - restartedAt} ms after redis-server restarted`);
    const debits = entries.filter((e) => e.kind === 'debit');
    t.equal(debits.length, 1, 'one debit');
    t.equal(entries.length, 1, 'the grant went with the old data; only the debit is there');
    const entry = debits[0]!;
    t.equal(entry.completion_tokens, TOKENS);
    t.equal(entry.usage_source, 'upstream');
    t.equal(entry.amount_micros, -expectedCost(SIM_SMALL, entry.prompt_tokens!, TOKENS));
    t.equal(entry.hold_micros, 0, 'no hold to release: it went with the old data');
    const acct = await accountOf(gw.admin, 'restarted');
    t.equal(acct.held_micros, 0);
    checkLedger(t, entries, acct, new Set([id]));
  });
}
