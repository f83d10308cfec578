// Requests a client abandons while they wait in the pool for an upstream connection (upstream.max_connections
// reached) end at once (call.ts abort of a queued call), but undici keeps each one in the pool's queue until a
// connection frees. Two costs of that queue to the other tenants, measured here with an attacker key and a
// victim account behind it (a review finding):
// - each abandoned request, when its turn came, made undici destroy the connection it was given and open a new
//   one for the next request: a victim queued behind them waited for as many connection setups;
// - their count was bounded by nothing but the key's request rate: the key's concurrency slot was given back
//   when the request ended, so a key could pile up any number of them in the queue.
import t, { type Test } from 'tap';
import { startGateway, type TestGateway } from '../helpers/gateway.ts';
import { waitFor } from '../helpers/wait.ts';
import { postChat, startSim } from './chat-fixture.ts';
import type { Simulator } from '../../src/simulator/simulator.ts';

const MODEL = {
  name: 'm',
  upstream_model: 'sim/small-1',
  max_output_tokens: 16,
  price: { input: 1, output: 1 },
};

async function setUp(t: Test, limits: Record<string, number>) {
  const sim = await startSim(t);
  const gw = await startGateway(t, {
    upstreamUrl: sim.url,
    config: {
      upstream: { max_connections: 1, headers_timeout_ms: 20_000 },
      limits,
      models: [{ ...MODEL, upstreams: [{ url: sim.url, api_key: 'upstream-secret' }] }],
    },
  });
  const keyOf = async (account: string) => {
    const { key } = await gw.createKey({ account, env: 'live' });
    await gw.grant(account, 1_000_000_000);
    return key;
  };
  return { sim, gw, keyOf };
}

const small = { model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 8 };

/** The account's held credit: one hold per request admitted and not yet settled. */
async function held(gw: TestGateway, account: string): Promise<number> {
  return (await gw.admin(`/admin/accounts/${account}`)).body.held_micros as number;
}

/** One long stream on the only upstream connection, once the upstream has it; `ended` resolves (its time) once its body ended. */
async function occupy(gw: TestGateway, sim: Simulator, key: string, ms: number): Promise<{ ended: Promise<number> }> {
  const r = await postChat(gw, key, { ...small, max_tokens: 16, stream: true, sim: { tokens: 16, delay_ms: Math.ceil(ms / 16) } });
  await sim.waitFor((q) => (q.body as { stream?: boolean } | undefined)?.stream === true, 2000);
  return { ended: r.text().then(() => performance.now()) };
}

/**
 * Sends `n` small requests of `key` and waits until every one is admitted (its hold taken: it is then in the
 * pool's queue, the gateway dispatches in the same turn as the hold's answer), then abandons them all.
 */
async function abandonQueued(gw: TestGateway, key: string, account: string, n: number): Promise<void> {
  const base = await held(gw, account);
  const acs: AbortController[] = [];
  const sent: Promise<unknown>[] = [];
  const send = () => {
    const ac = new AbortController();
    acs.push(ac);
    sent.push(
      fetch(`${gw.url}/v1/chat/completions`, {
        method: 'POST',
        signal: ac.signal,
        headers: { ...gw.auth(key), 'content-type': 'application/json' },
        body: JSON.stringify(small),
      }).then(
        (r) => Promise.reject(new Error(`answered ${r.status} while queued`)),
        () => undefined,
      ),
    );
  };
  send();
  const one = (await waitFor(async () => (await held(gw, account)) - base, 5000, "the first request's hold")) as number;
  for (let i = 1; i < n; i++) send();
  await waitFor(async () => (await held(gw, account)) - base >= n * one, 10_000, `${n} holds`);
  for (const ac of acs) ac.abort();
  await Promise.all(sent);
}

t.test('requests abandoned in the connection queue cost no reconnection and no delay to the next tenant', async (t) => {
  // The key's and account's slots above the abandoned count: this is about what each one costs, not how many.
  const { sim, gw, keyOf } = await setUp(t, { max_concurrent_per_key: 512, max_concurrent_per_account: 512 });
  const busy = await keyOf('busy');
  const attacker = await keyOf('attacker');
  const victim = await keyOf('victim');
  // A request of the victim's first, so the connection is open and its key cached.
  t.equal((await postChat(gw, victim, small)).status, 200);
  const occupied = await occupy(gw, sim, busy, 3000);
  const before = sim.connections;
  const N = 240;
  await abandonQueued(gw, attacker, 'attacker', N);
  // The victim's request waits behind the abandoned ones for the connection.
  const victimReply = postChat(gw, victim, small).then(async (r) => ({ status: r.status, text: await r.text(), at: performance.now() }));
  const freedAt = await occupied.ended;
  const v = await victimReply;
  const opened = sim.connections - before;
  const waited = v.at - freedAt;
  t.comment(
    `${N} abandoned queued requests: ${opened} upstream connections opened; the victim ended ${waited.toFixed(1)} ms after the connection freed`,
  );
  t.equal(v.status, 200, "the victim's request is served");
  t.ok(opened <= 3, `no connection per abandoned request (${opened} opened for ${N} abandoned)`);
  t.equal(sim.requests.length, 3, 'none of the abandoned requests reached the upstream');
});

t.test("a key's requests abandoned in the connection queue keep its concurrency slots until the pool lets go", async (t) => {
  const { sim, gw, keyOf } = await setUp(t, { max_concurrent_per_key: 8 });
  const busy = await keyOf('busy');
  const attacker = await keyOf('attacker');
  const occupied = await occupy(gw, sim, busy, 1500);
  await abandonQueued(gw, attacker, 'attacker', 8);
  // The 8 abandoned requests still wait in the pool: the key's next 8 are refused at the edge, not queued.
  const next = await Promise.all(
    Array.from({ length: 8 }, async () => {
      const r = await postChat(gw, attacker, small).catch(() => undefined);
      if (!r) return 'no answer';
      await r.arrayBuffer();
      return `${r.status} ${r.headers.get('x-ratelimit-scope')}`;
    }),
  );
  t.same(next, Array(8).fill('429 key'), 'refused while its abandoned requests hold the queue');
  // Once the connection frees, the pool lets go of them and the key has its slots back.
  await occupied.ended;
  await waitFor(async () => (await postChat(gw, attacker, small)).status === 200, 5000, "the key's slots back");
  t.pass('served once the queue let go');
});
