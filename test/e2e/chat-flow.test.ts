// Flow through the proxy (SPEC §1.2): a slow client holds the upstream back instead of the gateway
// buffering the stream, and the upstreams of a model are balanced by least outstanding requests.
import { request } from 'node:http';
import t from 'tap';
import { startGateway } from '../helpers/gateway.ts';
import { postChat, startSim, startSteeredFront } from './chat-fixture.ts';

t.test('backpressure: a client that stops reading stops the upstream; nothing is lost once it reads again', async (t) => {
  const sim = await startSim(t);
  const gw = await startGateway(t, { upstreamUrl: sim.url });
  const { key } = await gw.createKey({ account: 'flow-a', env: 'live' });
  await gw.grant('flow-a', 1e12);
  const TOKENS = 100_000; // ~21 MB of SSE: far more than the socket buffers between the three processes
  const body = JSON.stringify({
    model: 'sim-small',
    messages: [{ role: 'user', content: 'x' }],
    stream: true,
    max_tokens: TOKENS,
    sim: { tokens: TOKENS, ignore_max_tokens: true },
  });
  const res = await new Promise<import('node:http').IncomingMessage>((resolve, reject) => {
    const req = request(
      `${gw.url}/v1/chat/completions`,
      { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' } },
      resolve,
    );
    req.on('error', reject);
    req.end(body);
  });
  t.equal(res.statusCode, 200);
  res.pause();
  // Wait until the simulator's output stops moving (it is blocked on a full socket).
  const rec = await sim.waitFor(() => true);
  let last = -1;
  for (let i = 0; i < 60 && rec.chunksSent !== last; i++) {
    last = rec.chunksSent;
    await new Promise((r) => setTimeout(r, 100));
  }
  t.equal(rec.chunksSent, last, 'the upstream stalled while the client did not read');
  t.notOk(rec.finished, 'the upstream could not finish into the gateway');
  t.ok(rec.chunksSent < TOKENS, `stalled at ${rec.chunksSent} of ${TOKENS + 3} chunks`);

  let text = '';
  res.setEncoding('utf8');
  res.on('data', (c: string) => (text += c));
  res.resume();
  await new Promise((r) => res.once('end', r));
  t.ok(rec.finished, 'the upstream finished once the client read again');
  t.ok(text.endsWith('data: [DONE]\n\n'));
  t.equal(text.split('\n\n').length - 1, TOKENS + 3, 'every event arrived: role, tokens, finish, [DONE]');
  t.match(text, `"content":"tok${TOKENS - 1} "`);
});

t.test('least outstanding: while one upstream is busy on slow requests, new ones go to the idle one', async (t) => {
  const fast = await startSim(t);
  const slowSim = await startSim(t);
  const slow = await startSteeredFront(t, slowSim, { 'x-sim-headers-delay-ms': '800' });
  const model = {
    name: 'm',
    upstream_model: 'sim/small-1',
    max_output_tokens: 256,
    price: { input: 1.5, output: 2.25 },
    upstreams: [{ url: slow }, { url: fast.url }],
  };
  const gw = await startGateway(t, { upstreamUrl: fast.url, config: { models: [model] } });
  const { key } = await gw.createKey({ account: 'flow-b', env: 'live' });
  await gw.grant('flow-b', 1e9);
  const pending: Promise<number>[] = [];
  for (let i = 0; i < 12; i++) {
    pending.push(
      postChat(gw, key, { model: 'm', messages: [{ role: 'user', content: 'x' }] }).then(async (r) => (await r.arrayBuffer(), r.status)),
    );
    await new Promise((r) => setTimeout(r, 25));
  }
  t.same(await Promise.all(pending), Array(12).fill(200));
  // Only ties send traffic to the slow one: the first request, and none once it is busy.
  t.ok(slowSim.requests.length <= 2, `slow upstream got ${slowSim.requests.length} of 12`);
  t.ok(fast.requests.length >= 10, `fast upstream got ${fast.requests.length} of 12`);
});
