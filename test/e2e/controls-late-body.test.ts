// A request authenticates before its body is read (SPEC §13 "admission before work"), and a body may take
// up to server.body_timeout_ms to arrive. A key disabled, expired or deleted while such a body was still
// arriving must not be forwarded or billed once the body is complete (SPEC §1.1, §15: refused within 1 s,
// everywhere): the metered route looks at the key again before its hold, and a share's creation before it
// publishes.
import t from 'tap';
import { request } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import { startRedis } from '../helpers/redis.ts';
import { startGateway, type TestGateway } from '../helpers/gateway.ts';
import { startSimulator } from '../../src/simulator/simulator.ts';
import { ledgerOf } from './credit-support.ts';
import { waitFor } from '../helpers/wait.ts';
import { sharesS3Config, startS3 } from '../helpers/s3.ts';

// One request per key at a time: a second request answering 429 proves the slow one holds the key's slot,
// i.e. it passed the gate (authenticated) and is waiting for its body.
const CONFIG = {
  auth: { failed_per_minute: 10_000_000 },
  server: { body_timeout_ms: 10_000 },
  limits: { max_concurrent_per_key: 1 },
};
const CHAT_BODY = JSON.stringify({ model: 'sim-small', messages: [{ role: 'user', content: 'hello there' }], max_tokens: 8 });

/** Sends the headers and the first half of the body now; `finish()` sends the rest and resolves with the answer. */
async function slowChat(gw: TestGateway, key: string, path = '/v1/chat/completions', BODY = CHAT_BODY) {
  const half = Math.floor(BODY.length / 2);
  const url = new URL(`${gw.url}${path}`);
  let finish = () => {};
  const answer = new Promise<{ status: number; body: any }>((resolve, reject) => {
    const req = request(
      {
        host: url.hostname,
        port: url.port,
        path: url.pathname,
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'content-length': Buffer.byteLength(BODY) },
      },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (text += c));
        res.on('end', () => resolve({ status: res.statusCode!, body: text ? JSON.parse(text) : undefined }));
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.write(BODY.slice(0, half));
    finish = () => req.end(BODY.slice(half));
  });
  return { finish: () => finish(), answer };
}

const status = async (gw: TestGateway, key: string) => (await fetch(`${gw.url}/v1/models`, { headers: gw.auth(key) })).status;

const redis = await startRedis(t);
const s3 = await startS3(t);
if (redis) {
  const patch = (a: TestGateway, id: string, body: unknown) => a.admin(`/admin/keys/${id}`, { method: 'PATCH', body });
  const cases: [string, (a: TestGateway, id: string) => Promise<unknown>][] = [
    ['disabled', (a, id) => patch(a, id, { active: false })],
    ['expired', (a, id) => patch(a, id, { expires_at: new Date().toISOString() })],
    ['deleted', (a, id) => a.admin(`/admin/keys/${id}`, { method: 'DELETE' })],
    ['rolled (grace 0)', (a, id) => a.admin(`/admin/keys/${id}/roll`, { method: 'POST' })],
  ];
  for (const [what, change] of cases) {
    t.test(`a key ${what} while its request's body arrives is refused when the body completes, not forwarded`, async (t) => {
      const sim = await startSimulator();
      t.teardown(() => sim.close());
      const a = await startGateway(t, { redisUrl: redis.url, upstreamUrl: sim.url, config: CONFIG });
      const b = await startGateway(t, { redisUrl: redis.url, upstreamUrl: sim.url, config: CONFIG });
      const account = `late-${what.replace(/\W/g, '')}`;
      const { key, id } = await a.createKey({ account, env: 'live' });
      await a.grant(account, 10_000_000);
      t.equal(await status(b, key), 200, 'B accepts (and caches) the key');

      const slow = await slowChat(b, key);
      await waitFor(async () => (await status(b, key)) === 429, 3000, 'the slow request to hold the key’s slot (past the gate)');
      const before = sim.requests.length;
      await change(a, id);
      await waitFor(async () => (await status(b, key)) === 401, 3000, `B refuses the ${what} key`);
      slow.finish();
      const r = await slow.answer;
      t.equal(r.status, 401, `the slow request is refused: ${JSON.stringify(r.body)}`);
      t.equal(r.body?.error?.code, 'invalid_api_key');
      t.equal(sim.requests.length, before, 'nothing reached the upstream');
      const debits = (await ledgerOf(a.admin, account)).filter((e) => e.kind === 'debit');
      t.equal(debits.length, 0, 'nothing was billed');
      const acct = (await a.admin(`/admin/accounts/${account}`)).body;
      t.equal(acct.held_micros, 0, 'nothing is left held');
    });
  }

  t.test('a key disabled while its share body arrives publishes nothing', async (t) => {
    const config = { ...CONFIG, shares: { s3: sharesS3Config(s3) } };
    const a = await startGateway(t, { redisUrl: redis.url, config });
    const b = await startGateway(t, { redisUrl: redis.url, config });
    const { key, id } = await a.createKey({ account: 'late-share', env: 'live' });
    t.equal(await status(b, key), 200, 'B accepts (and caches) the key');
    const share = JSON.stringify({ snapshot: { title: 'late', messages: [{ role: 'user', content: 'x'.repeat(2000) }] } });
    const slow = await slowChat(b, key, '/v1/shares', share);
    await waitFor(async () => (await status(b, key)) === 429, 3000, 'the slow share past the gate');
    await patch(a, id, { active: false });
    await waitFor(async () => (await status(b, key)) === 401, 3000, 'B refuses the disabled key');
    slow.finish();
    const r = await slow.answer;
    t.equal(r.status, 401, `the slow share is refused: ${JSON.stringify(r.body)}`);
    t.equal(r.body?.error?.code, 'invalid_api_key');
    t.same(await a.store.listShares('late-share', 10), [], 'nothing was published');
  });

  t.test('a key changed but still usable while its body arrives is served, under the record as it is now', async (t) => {
    const sim = await startSimulator();
    t.teardown(() => sim.close());
    const a = await startGateway(t, { redisUrl: redis.url, upstreamUrl: sim.url, config: CONFIG });
    const b = await startGateway(t, { redisUrl: redis.url, upstreamUrl: sim.url, config: CONFIG });
    const { key, id } = await a.createKey({ account: 'late-changed', env: 'live' });
    await a.grant('late-changed', 10_000_000);

    // Renamed: still usable, served.
    let slow = await slowChat(b, key);
    await waitFor(async () => (await status(b, key)) === 429, 3000, 'the slow request past the gate');
    await patch(a, id, { name: 'renamed' });
    await sleep(1000); // SPEC §1.1: a change reaches every instance within 1 s (the key's slot is taken: no probe)
    slow.finish();
    t.equal((await slow.answer).status, 200, 'a rename does not refuse the request');

    // A budget set to 0 while the body arrives: the hold is checked against it, not the record the gate saw.
    slow = await slowChat(b, key);
    await waitFor(async () => (await status(b, key)) === 429, 3000, 'the slow request past the gate');
    const before = sim.requests.length;
    await patch(a, id, { budget: { limit_micros: 0, period: 'day' } });
    await sleep(1000);
    slow.finish();
    const r = await slow.answer;
    t.equal(r.status, 402, `refused by the budget set meanwhile: ${JSON.stringify(r.body)}`);
    t.equal(r.body?.error?.code, 'key_budget_exceeded');
    t.equal(sim.requests.length, before, 'nothing reached the upstream');
  });
}
