// A Redis that refuses commands before running them: a script past `busy-reply-threshold` makes it answer
// every other command `BUSY …` at once (the same path as a Cluster's CLUSTERDOWN, a server still LOADING its
// data set or a replica's MASTERDOWN: credit.ts REFUSED_BEFORE_RUN). A hold refused that way certainly did
// not run, so nothing is settled for it: its request is answered 503 store_unavailable at once, reaches no
// upstream and leaves no ledger entry. Before, such a hold counted as may-have-run and a settle at 0 was
// sent for it in the background, retried through the outage and written to the ledger as a zero debit once
// Redis answered again: one entry per refused request (test/cluster/partition.test.ts has CLUSTERDOWN).
import t from 'tap';
import { startRedis } from '../helpers/redis.ts';
import { startGateway } from '../helpers/gateway.ts';
import { waitFor } from '../helpers/wait.ts';
import { accountVsLedger, postChat, startSim } from './chat-fixture.ts';

const redis = await startRedis(t);
if (redis) {
  t.test('a hold Redis refused before running it is answered 503 and settles nothing', async (t) => {
    const sim = await startSim(t);
    const gw = await startGateway(t, { redisUrl: redis.url, upstreamUrl: sim.url, config: { store: { command_timeout_ms: 3000 } } });
    const body = { model: 'sim-small', messages: [{ role: 'user', content: 'hello' }], max_tokens: 16, sim: { tokens: 8 } };
    const live = await gw.createKey({ account: 'refused', env: 'live' });
    await gw.grant('refused', 100_000_000);
    const served: string[] = [];
    const serve = async () => {
      const r = await postChat(gw, live.key, body);
      await r.arrayBuffer();
      if (r.status === 200) served.push(r.headers.get('x-request-id')!);
      return r.status;
    };
    t.equal(await serve(), 200, 'served before (the key is cached)');

    // A script that runs until it is killed, from a connection of its own; past the threshold Redis answers
    // every other command BUSY.
    const blocker = redis.client.duplicate();
    const killer = redis.client.duplicate();
    t.teardown(() => {
      blocker.disconnect();
      killer.disconnect();
    });
    await killer.config('SET', 'busy-reply-threshold', '100');
    const looping = blocker.eval('local i = 0 while true do i = i + 1 end', 0).catch((e: Error) => e);
    await waitFor(
      async () =>
        (
          await killer.ping().then(
            () => '',
            (e: Error) => e.message,
          )
        ).startsWith('BUSY'),
      5000,
      'Redis to answer BUSY',
      20,
    );
    const upstreamCalls = sim.requests.length;
    const refused: string[] = [];
    for (let i = 0; i < 5; i++) {
      const r = await postChat(gw, live.key, body);
      const j = (await r.json()) as { error?: { code?: string } };
      t.same([r.status, j.error?.code], [503, 'store_unavailable'], `request ${i} while Redis is busy: 503 store_unavailable`);
      refused.push(r.headers.get('x-request-id')!);
    }
    t.equal(sim.requests.length, upstreamCalls, 'no refused request reached the upstream');
    // Long enough for a background settle to have failed and been scheduled again (100 ms, then 200 ms).
    await new Promise((r) => setTimeout(r, 400));
    await killer.call('SCRIPT', 'KILL');
    t.match(String(await looping), /killed/i, 'the busy script was killed');

    await waitFor(async () => (await serve()) === 200, 5000, 'served again once Redis answers', 50);
    // The served requests' debits land; a settle retried for a refused hold would land within its next
    // backoff (≤ 800 ms after these 5 failures): wait past that before looking for one.
    await waitFor(
      async () => {
        const { entries } = await accountVsLedger(gw, 'refused');
        return served.every((id) => entries.some((e) => e.kind === 'debit' && e.request_id === id));
      },
      5000,
      'the served requests debited',
      50,
    );
    await new Promise((r) => setTimeout(r, 2000));
    const { balance, held, sum, entries } = await accountVsLedger(gw, 'refused');
    const strays = entries.filter((e) => e.request_id !== undefined && refused.includes(e.request_id));
    t.same(
      strays.map((e) => `${e.kind} ${e.amount_micros}`),
      [],
      'no ledger entry for a refused request (no settle at 0)',
    );
    t.equal(entries.filter((e) => e.kind === 'debit').length, served.length, 'one debit per served request');
    t.equal(held, 0, 'nothing held');
    t.equal(balance, sum, 'balance = Σ ledger');
  });
}
