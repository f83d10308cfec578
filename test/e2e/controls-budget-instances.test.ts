// SPEC §15: a key's budget holds across instances. 20 concurrent streaming requests of one budgeted key,
// split over two gateways on one real Redis (each its own key cache, hold batches and process), never
// debit past the limit: the hold script checks spend + open holds atomically in the account's slot.
import t from 'tap';
import { startRedis } from '../helpers/redis.ts';
import { startGateway } from '../helpers/gateway.ts';
import { startSimulator } from '../../src/simulator/simulator.ts';
import { chat, ledgerOf, streamBody } from './credit-support.ts';
import { waitFor } from '../helpers/wait.ts';

const CROWD = 20;
const BODY = streamBody({ tokens: 30, delay_ms: 3 }, 'hello there', { max_tokens: 30 });

const redis = await startRedis(t);
if (redis) {
  t.test('two instances: concurrent requests of one key never spend past its budget', async (t) => {
    const sim = await startSimulator();
    t.teardown(() => sim.close());
    const a = await startGateway(t, { redisUrl: redis.url, upstreamUrl: sim.url });
    const b = await startGateway(t, { redisUrl: redis.url, upstreamUrl: sim.url });
    // One request's hold, from a probe on another account.
    const probe = await a.createKey({ account: 'probe2', env: 'live' });
    await a.grant('probe2', 10_000_000);
    await (await chat(a.url, probe.key, BODY)).text();
    const entry = await waitFor(async () => (await ledgerOf(a.admin, 'probe2')).find((e) => e.kind === 'debit'), 2000, 'probe debit');
    const hold = entry.hold_micros!;
    const limit = 4 * hold;
    const { key, id } = await a.createKey({ account: 'split', env: 'live', budget: { limit_micros: limit, period: 'day' } });
    await a.grant('split', 100 * hold);
    const results = await Promise.all(
      Array.from({ length: CROWD }, async (_, i) => {
        const res = await chat((i % 2 ? b : a).url, key, BODY);
        await res.text();
        return res.status;
      }),
    );
    const served = results.filter((s) => s === 200).length;
    t.equal(served + results.filter((s) => s === 402).length, CROWD, `200 or 402 only: ${results.join(',')}`);
    t.ok(served >= 4 && served < CROWD, `${served} served`);
    const debits = await waitFor(
      async () => {
        const d = (await ledgerOf(a.admin, 'split')).filter((e) => e.kind === 'debit' && e.key_id === id);
        return d.length >= served && d;
      },
      3000,
      'one debit per served request',
    );
    const spent = -debits.reduce((s, e) => s + e.amount_micros, 0);
    t.ok(spent <= limit, `debited ${spent} ≤ limit ${limit}`);
    t.equal((await b.admin(`/admin/keys/${id}`)).body.budget.spent_micros, spent, 'spent_micros is the ledger’s sum');
    t.equal((await a.admin('/admin/accounts/split')).body.held_micros, 0, 'nothing left held');
  });
}
