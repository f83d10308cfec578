// Key budgets (SPEC §15, docs/keys.md): 20 concurrent streaming requests on a key whose budget covers
// only a few of them never take it past its limit, refusals are 402 key_budget_exceeded before the
// upstream, and the spend the admin API and GET /v1/key show equals the ledger's debits of that key —
// on a real Redis and on the embedded store.
import t from 'tap';
import type { Test } from 'tap';
import { startRedis } from '../helpers/redis.ts';
import { startGateway, type TestGateway } from '../helpers/gateway.ts';
import { startSimulator } from '../../src/simulator/simulator.ts';
import { chat, ledgerOf, streamBody } from './credit-support.ts';
import { waitFor } from '../helpers/wait.ts';

const CROWD = 20;
// 30 tokens × 3 ms: each stream lasts ≥ 90 ms so the 20 requests overlap.
const BODY = streamBody({ tokens: 30, delay_ms: 3 }, 'hello there', { max_tokens: 30 });

async function crowdOnBudget(t: Test, gw: TestGateway, simRequests: () => number): Promise<void> {
  // One request's hold and cost, from its ledger entry on another key of another account.
  const probe = await gw.createKey({ account: 'probe', env: 'live' });
  await gw.grant('probe', 10_000_000);
  await (await chat(gw.url, probe.key, BODY)).text();
  const probeEntry = await waitFor(async () => (await ledgerOf(gw.admin, 'probe')).find((e) => e.kind === 'debit'), 2000, 'probe debit');
  const hold = probeEntry.hold_micros!;
  const cost = -probeEntry.amount_micros;
  t.ok(cost > 0 && cost < hold, `one request holds ${hold} and costs ${cost}`);

  const limit = 4 * hold;
  t.ok(CROWD * cost > limit, 'without the budget the crowd would spend past the limit');
  const { key, id } = await gw.createKey({ account: 'team', env: 'live', budget: { limit_micros: limit, period: 'day' } });
  // Another key of the same account, without a budget: the account's credit is not what stops the crowd.
  const free = await gw.createKey({ account: 'team', env: 'live' });
  await gw.grant('team', 100 * hold);
  const before = simRequests();

  const results = await Promise.all(
    Array.from({ length: CROWD }, async () => {
      const res = await chat(gw.url, key, BODY);
      return { status: res.status, id: res.headers.get('x-request-id')!, text: await res.text() };
    }),
  );
  const served = results.filter((r) => r.status === 200);
  const refused = results.filter((r) => r.status === 402);
  t.equal(served.length + refused.length, CROWD, `every answer is 200 or 402: ${results.map((r) => r.status).join(',')}`);
  t.ok(refused.length > 0, `${served.length} served, ${refused.length} refused`);
  t.ok(served.length >= 4, 'at least the 4 holds the budget covers were served');
  t.ok(
    refused.every((r) => JSON.parse(r.text).error.code === 'key_budget_exceeded'),
    'every refusal is key_budget_exceeded',
  );
  t.equal(simRequests() - before, served.length, 'refused requests never reached the upstream');

  const debits = await waitFor(
    async () => {
      const d = (await ledgerOf(gw.admin, 'team')).filter((e) => e.kind === 'debit' && e.key_id === id);
      return d.length >= served.length && d;
    },
    3000,
    'one debit per served request',
  );
  const debited = -debits.reduce((s, e) => s + e.amount_micros, 0);
  t.ok(debited <= limit, `debited ${debited} ≤ limit ${limit}`);
  t.equal(debits.length, served.length);

  const shown = await gw.admin(`/admin/keys/${id}`);
  t.same(shown.body.budget, { limit_micros: limit, period: 'day', spent_micros: debited }, 'GET shows the ledger’s debits as spent');
  const self = (await (await fetch(`${gw.url}/v1/key`, { headers: gw.auth(key) })).json()) as { budget: unknown };
  t.same(self.budget, { limit_micros: limit, period: 'day', spent_micros: debited }, 'and so does GET /v1/key');
  const listed = (await gw.admin('/admin/keys?account=team')).body.data.find((k: { id: string }) => k.id === id);
  t.equal(listed.budget.spent_micros, debited, 'and the list');

  t.equal((await chat(gw.url, free.key, BODY)).status, 200, 'the account’s other key is not held back');

  // Raising the limit admits the key again (PATCH is read by the next request's key lookup).
  const raised = await gw.admin(`/admin/keys/${id}`, {
    method: 'PATCH',
    body: { budget: { limit_micros: limit + 10 * hold, period: 'day' } },
  });
  t.equal(raised.status, 200);
  t.equal(raised.body.budget.spent_micros, debited, 'a changed limit keeps the period’s spend');
  const again = await waitFor(
    async () => {
      const r = await chat(gw.url, key, BODY);
      await r.text();
      return r.status === 200 && r;
    },
    2000,
    'served after the raise',
  );
  t.equal(again.status, 200);
  const cleared = await gw.admin(`/admin/keys/${id}`, { method: 'PATCH', body: { budget: null } });
  t.equal(cleared.body.budget, null);
}

const redis = await startRedis(t);
if (redis) {
  t.test('Redis: 20 concurrent requests never take a budgeted key past its limit', async (t) => {
    const sim = await startSimulator();
    t.teardown(() => sim.close());
    const gw = await startGateway(t, { redisUrl: redis.url, upstreamUrl: sim.url });
    await crowdOnBudget(t, gw, () => sim.requests.length);
  });
}

t.test('embedded store: 20 concurrent requests never take a budgeted key past its limit', async (t) => {
  const sim = await startSimulator();
  t.teardown(() => sim.close());
  const gw = await startGateway(t, { upstreamUrl: sim.url });
  await crowdOnBudget(t, gw, () => sim.requests.length);
});

t.test('budget validation', async (t) => {
  const gw = await startGateway(t);
  for (const budget of [
    { limit_micros: -1, period: 'day' },
    { limit_micros: 5, period: 'week' },
    { period: 'day' },
    { limit_micros: 5, period: 'day', x: 1 },
    'big',
  ]) {
    const r = await gw.admin('/admin/keys', { body: { account: 'v', env: 'live', name: 'n', budget } });
    t.equal(r.status, 422, JSON.stringify(budget));
    t.equal(r.body.detail[0].loc[1], 'budget');
  }
});
