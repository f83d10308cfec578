// A request whose client left while it waited for an upstream connection (upstream.max_connections
// reached) ends and settles at once (call.ts abort of a queued call), but undici keeps the dispatched
// request, its upstream payload included, in the pool's queue until a connection frees. Its body's bytes
// therefore stay reserved in the key's body budget until then (routes/metered.ts HeldBody.until): a key
// that fills the connections and then sends large bodies it abandons is refused past its budget, and the
// process's memory does not grow with the requests it abandons. Found by a review: with the bytes given
// back when the request ended, 150 of 200 abandoned 512 KiB requests were accepted and ~75 MiB stayed in
// the queue.
import vm from 'node:vm';
import v8 from 'node:v8';
import t from 'tap';
import { setTimeout as sleep } from 'node:timers/promises';
import { startGateway } from '../helpers/gateway.ts';
import { postChat, startSim } from './chat-fixture.ts';

/** ArrayBuffer bytes after a full collection (gc exposed at run time: tap gives no --expose-gc). */
function buffersAfterGc(): number {
  v8.setFlagsFromString('--expose-gc');
  (vm.runInNewContext('gc') as () => void)();
  return process.memoryUsage().arrayBuffers;
}

t.test('bodies of requests abandoned in the connection queue stay in the key budget until the pool lets go', async (t) => {
  const sim = await startSim(t);
  const gw = await startGateway(t, {
    upstreamUrl: sim.url,
    config: {
      upstream: { max_connections: 1 },
      // Slots above the 16 bodies the key's budget holds: the body budget, not the slots an abandoned request
      // also keeps (queued-abort-connections.test.ts), is what refuses here.
      limits: { max_concurrent_per_key: 64 },
      models: [
        {
          name: 'm',
          upstream_model: 'sim/small-1',
          max_output_tokens: 1000,
          context_window: 4_000_000,
          price: { input: 0.001, output: 0.001 },
          upstreams: [{ url: sim.url, api_key: 'upstream-secret' }],
        },
      ],
    },
  });
  const { key } = await gw.createKey({ account: 'qa', env: 'live' });
  await gw.grant('qa', 1_000_000_000_000);
  // One long stream holds the only connection (300 tokens × 50 ms).
  const first = await postChat(gw, key, {
    model: 'm',
    messages: [{ role: 'user', content: 'hi' }],
    stream: true,
    sim: { tokens: 300, delay_ms: 50 },
  });
  t.equal(first.status, 200);
  const reader = first.body!.getReader();
  const drained = (async () => {
    for (;;) if ((await reader.read()).done) break;
  })();
  await sleep(200);
  const before = buffersAfterGc();
  const big = 'x'.repeat(512 * 1024);
  const statuses: (number | string)[] = [];
  for (let batch = 0; batch < 50; batch++) {
    await Promise.all(
      Array.from({ length: 4 }, async () => {
        const ac = new AbortController();
        const timer = setTimeout(() => ac.abort(), 150);
        try {
          const r = await fetch(`${gw.url}/v1/chat/completions`, {
            method: 'POST',
            signal: ac.signal,
            headers: { ...gw.auth(key), 'content-type': 'application/json' },
            body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: big }], max_tokens: 8 }),
          });
          statuses.push(r.status);
          await r.arrayBuffer().catch(() => {});
        } catch {
          statuses.push('abandoned');
        } finally {
          clearTimeout(timer);
        }
      }),
    );
    await sleep(30);
  }
  const grew = buffersAfterGc() - before;
  const refused = statuses.filter((s) => s === 429).length;
  t.comment(
    `200 requests of 512 KiB: ${statuses.length - refused} abandoned, ${refused} refused 429; ArrayBuffers grew ${(grew / 2 ** 20).toFixed(1)} MiB`,
  );
  // The key's body budget (8 MiB) holds 16 bodies of 512 KiB: the rest are refused while the queue holds those.
  t.ok(refused >= 100, `most refused once the key's budget is held by queued bodies (${refused} of 200)`);
  t.ok(grew < 32 * 2 ** 20, `memory held by abandoned queued requests stays bounded (grew ${(grew / 2 ** 20).toFixed(1)} MiB)`);
  // Once the connection frees, the pool lets go of the queued requests and the budget is back.
  await drained;
  let ok = 0;
  for (let i = 0; i < 50 && ok === 0; i++) {
    const r = await postChat(gw, key, { model: 'm', messages: [{ role: 'user', content: big }], max_tokens: 8 });
    await r.arrayBuffer();
    if (r.status === 200) ok++;
    else await sleep(100);
  }
  t.equal(ok, 1, 'after the connection freed, a large request of the same key is served');
});
