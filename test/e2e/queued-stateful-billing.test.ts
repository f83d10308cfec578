// A review's reproduction (fixed): a stateful /v1/responses follow-up whose client leaves while it waits for an upstream
// connection (never sent) was billed its held input part (the context window), as if the upstream had read it.
import t from 'tap';
import { startGateway } from '../helpers/gateway.ts';
import { waitFor } from '../helpers/wait.ts';
import { postChat, startSim } from '../e2e/chat-fixture.ts';
import { accountOf, settledAccount } from '../e2e/credit-support.ts';

t.test('a stateful request abandoned in the connection queue, never sent, is billed nothing', async (t) => {
  const sim = await startSim(t);
  const gw = await startGateway(t, {
    upstreamUrl: sim.url,
    config: {
      upstream: { max_connections: 1 },
      models: [
        {
          name: 'm',
          max_output_tokens: 64,
          context_window: 16_384,
          price: { input: 1, output: 1 },
          upstreams: [{ url: sim.url, api_key: 'upstream-secret' }],
        },
      ],
    },
  });
  const { key: busy } = await gw.createKey({ account: 'qs-busy', env: 'live' });
  const { key } = await gw.createKey({ account: 'qs', env: 'live' });
  await gw.grant('qs-busy', 10_000_000);
  await gw.grant('qs', 10_000_000);
  const post = (body: object, signal?: AbortSignal) =>
    fetch(`${gw.url}/v1/responses`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'm', ...body }),
      ...(signal && { signal }),
    });
  const baseRes = await post({ input: 'hello', sim: { tokens: 4 } });
  const prev = ((await baseRes.json()) as { id: string }).id;
  const before = await settledAccount(gw, 'qs');
  // The only connection busy with another account's long stream.
  const occ = await postChat(gw, busy, {
    model: 'm',
    messages: [{ role: 'user', content: 'x' }],
    max_tokens: 16,
    stream: true,
    sim: { tokens: 16, delay_ms: 100 },
  });
  await sim.waitFor((q) => (q.body as { stream?: boolean } | undefined)?.stream === true, 2000);
  const seen = sim.requests.length;
  const ac = new AbortController();
  const sent = post({ input: 'go on', previous_response_id: prev, sim: { tokens: 4 } }, ac.signal).catch(() => undefined);
  await waitFor(async () => (await accountOf(gw.admin, 'qs')).held_micros > 0, 5000, 'its hold');
  ac.abort();
  await sent;
  await occ.text();
  const after = await settledAccount(gw, 'qs');
  t.equal(sim.requests.filter((r) => r.path.includes('/responses') && r.method === 'POST').length - (seen > 0 ? 0 : 0) >= 1, true);
  t.equal(sim.requests.length, seen, 'the follow-up never reached the upstream');
  t.equal(
    before.balance_micros - after.balance_micros,
    0,
    `debited ${before.balance_micros - after.balance_micros} µ for a request never sent`,
  );
});
