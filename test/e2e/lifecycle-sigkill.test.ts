// A gateway process killed with SIGKILL while it holds credit (SPEC §4): its hold stays until it
// expires (request timeout + margin), then another instance's reaper releases it with a `hold_expired`
// ledger entry (amount 0, the hold recorded), and the account's available credit recovers.
// The victim is a real `node src/main.ts`; the survivor an in-process gateway on the same redis-server.
import t from 'tap';
import { startRedis } from '../helpers/redis.ts';
import { startGateway } from '../helpers/gateway.ts';
import { startSimulator } from '../../src/simulator/simulator.ts';
import { accountOf, chat, checkLedger, ledgerOf, spawnGateway, streamBody } from './credit-support.ts';
import { sseData } from './chat-fixture.ts';
import { waitFor } from '../helpers/wait.ts';

// Holds of the child expire total_timeout + margin = 1.5 s + 1 s after they are taken.
const TOTAL_TIMEOUT_MS = 1500;
const MARGIN_S = 1;
const HOLD_TTL_MS = TOTAL_TIMEOUT_MS + MARGIN_S * 1000;

const redis = await startRedis(t);
if (redis) {
  t.test('SIGKILL while holding: the hold is reaped after expiry by the other instances, once', async (t) => {
    const sim = await startSimulator();
    t.teardown(() => sim.close());
    const survivor = await startGateway(t, { redisUrl: redis.url, upstreamUrl: sim.url, config: { credit: { reaper_interval_ms: 100 } } });
    // A second survivor reaps the same index at the same pace: the hold must still be released once.
    await startGateway(t, { redisUrl: redis.url, upstreamUrl: sim.url, config: { credit: { reaper_interval_ms: 100 } } });
    const { key } = await survivor.createKey({ account: 'killed', env: 'live' });
    const grant = 1_000_000;
    await survivor.grant('killed', grant);
    const victim = await spawnGateway(t, {
      redisUrl: redis.url,
      upstreamUrl: sim.url,
      config: { upstream: { total_timeout_ms: TOTAL_TIMEOUT_MS }, credit: { hold_margin_seconds: MARGIN_S } },
    });

    const sentAt = Date.now();
    // 200 tokens × 20 ms: a 4 s stream, killed a few chunks in.
    const res = await chat(victim.url, key, streamBody({ tokens: 200, delay_ms: 20 }));
    t.equal(res.status, 200, 'the child gateway streams');
    const id = res.headers.get('x-request-id')!;
    const body = res.text();
    body.catch(() => {});
    const { held_micros: hold } = await waitFor(
      async () => {
        const a = await accountOf(survivor.admin, 'killed');
        return a.held_micros > 0 && a;
      },
      1000,
      'the hold to be visible',
    );
    await sim.waitFor((r) => r.headers['x-request-id'] === id && r.chunksSent >= 3, 2000);

    victim.child.kill('SIGKILL');
    const { signal } = await victim.exited;
    t.equal(signal, 'SIGKILL', 'the child died without a chance to settle');
    const text = await body.then(
      (s) => s,
      () => '',
    );
    t.not(sseData(text).at(-1), '[DONE]', 'the client did not get a complete stream');
    const rec = await sim.waitFor((r) => r.headers['x-request-id'] === id && r.endedAt !== undefined, 2000);
    t.equal(rec.aborted, true, 'the upstream saw its request dropped');

    const orphaned = await accountOf(survivor.admin, 'killed');
    t.equal(orphaned.held_micros, hold, 'right after the kill the hold is still there (not expired yet)');
    t.equal(orphaned.balance_micros - orphaned.held_micros, grant - hold, 'and it still reduces the available credit');

    const entries = await waitFor(
      async () => {
        const all = await ledgerOf(survivor.admin, 'killed');
        return all.some((e) => e.kind === 'hold_expired') && all;
      },
      HOLD_TTL_MS + 3000,
      'the hold_expired entry',
    );
    const expired = entries.filter((e) => e.kind === 'hold_expired');
    t.equal(expired.length, 1, 'one hold_expired entry, though two instances reap');
    const entry = expired[0]!;
    t.equal(entry.amount_micros, 0, 'amount 0: nothing is debited for an unknown outcome');
    t.equal(entry.hold_micros, hold, 'the released hold is recorded');
    t.equal(entry.request_id, id, 'with the request id of the orphaned request');
    const reapedAt = Number(entry.id.split('-')[0]);
    t.ok(
      reapedAt >= sentAt + HOLD_TTL_MS,
      `reaped ${reapedAt - sentAt} ms after the request, not before the hold's expiry (${HOLD_TTL_MS} ms)`,
    );

    const acct = await accountOf(survivor.admin, 'killed');
    t.equal(acct.held_micros, 0, 'held back to 0');
    t.equal(acct.balance_micros - acct.held_micros, grant, 'the available balance recovered in full');
    checkLedger(t, entries, acct, new Set());
    t.same(
      entries.map((e) => e.kind),
      ['grant', 'hold_expired'],
      'no debit: the killed process never settled',
    );

    // The survivor still serves the account afterwards, with its own settle.
    const after = await chat(survivor.url, key, streamBody({ tokens: 3 }));
    t.equal(after.status, 200);
    await after.text();
    const afterId = after.headers.get('x-request-id')!;
    const final = await waitFor(
      async () => {
        const all = await ledgerOf(survivor.admin, 'killed');
        return all.some((e) => e.kind === 'debit') && all;
      },
      1000,
      'the survivor debit',
    );
    checkLedger(t, final, await accountOf(survivor.admin, 'killed'), new Set([afterId]));
  });
}
