// A deleted key leaves nothing in its account's last-use hash (`{acct:A}:used`, docs/ledger-export.md
// "Layout"): that hash has no expiry and is read whole by every key list (GET /admin/keys, the console's
// keys and accounts pages), so a member who creates, uses and deletes keys (the key cap counts keys held,
// not keys made) grew it, and every later list with it, without bound. Real Redis, real requests through
// the simulator: a key deleted after its use was flushed, and one deleted before the flush lands.
import t from 'tap';
import * as K from '../../src/store/redis-keys.ts';
import { startRedis } from '../helpers/redis.ts';
import { startGateway } from '../helpers/gateway.ts';
import { waitFor } from '../helpers/wait.ts';
import { postChat, startSim } from '../e2e/chat-fixture.ts';

const redis = await startRedis(t);
if (redis) {
  const sim = await startSim(t);
  const used = (account: string) => redis.client.hgetall(K.keysUsed(account));

  async function use(gw: Awaited<ReturnType<typeof startGateway>>, key: string): Promise<void> {
    const r = await postChat(gw, key, {
      model: 'sim-small',
      messages: [{ role: 'user', content: 'hi' }],
      max_tokens: 8,
      sim: { tokens: 2 },
    });
    t.equal(r.status, 200, await r.text());
  }

  t.test("a key deleted after its last use was flushed leaves its account's last-use hash", async (t) => {
    const gw = await startGateway(t, { redisUrl: redis.url, upstreamUrl: sim.url, config: { usage: { flush_interval_ms: 20 } } });
    const keep = await gw.createKey({ account: 'churn', env: 'test' });
    await use(gw, keep.key);
    for (let i = 0; i < 5; i++) {
      const k = await gw.createKey({ account: 'churn', env: 'test' });
      await use(gw, k.key);
      await waitFor(async () => (await used('churn'))[k.id] !== undefined, 3000, 'the last use flushed');
      t.equal((await gw.admin(`/admin/keys/${k.id}`, { method: 'DELETE' })).status, 204);
    }
    t.same(Object.keys(await used('churn')), [keep.id], 'only the key the account still holds');
    const list = await gw.admin('/admin/keys?account=churn');
    t.same(
      list.body.data.map((k: any) => k.id),
      [keep.id],
    );
    t.ok(list.body.data[0].last_used_at, 'the kept key still shows its last use');
  });

  t.test('a flush that lands after the delete does not write the deleted key back', async (t) => {
    // A long flush interval: the delete comes first, the flush of the key's last request after it.
    const gw = await startGateway(t, { redisUrl: redis.url, upstreamUrl: sim.url, config: { usage: { flush_interval_ms: 1000 } } });
    const k = await gw.createKey({ account: 'racer', env: 'test' });
    await use(gw, k.key);
    t.equal((await gw.admin(`/admin/keys/${k.id}`, { method: 'DELETE' })).status, 204);
    await gw.gateway.usage.flush();
    t.same(await used('racer'), {}, 'nothing for the deleted key');
    const today = new Date().toISOString().slice(0, 10);
    t.equal((await gw.store.usageCells('racer', today, today)).length, 1, 'its usage cell is history and stays (usage.retention_days)');
  });
}
