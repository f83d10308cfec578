// Issue 25 item 1 / SPEC §14 "Upstream health": a model's one upstream sits behind a TCP front the test
// can take down (every connection cut, new ones accepted and closed at once) and bring back.
//  1. 64 streams in flight fail together (one burst): it counts as one failure toward ejection, so with
//     eject_seconds 0.5 the model serves again within 2 s of the upstream being back (the burst used to
//     count 64 times: 12 doubling ejections, 16 s).
//  2. A longer outage with clients knocking, default back-off (10 s): with the upstream ejected, one
//     trial request a second still reaches it (half-open), and the model serves again within 2 s of its
//     return, whatever the back-off (used to be: no request at all until it ran out).
// Money invariant on the way: every stream that completed is debited once, the broken ones for what
// they produced, refused requests not at all; balance = ledger; nothing held.
import { createServer, connect, type Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import t from 'tap';
import { startGateway } from '../helpers/gateway.ts';
import { waitFor } from '../helpers/wait.ts';
import { startSim } from './chat-fixture.ts';
import { accountOf, chat, checkLedger, ledgerOf } from './credit-support.ts';

const RECOVERY_MS = 2000;

/** A TCP front to `port` that can be taken down (cutting every connection) and brought back. */
async function startFront(t: { teardown(fn: () => unknown): void }, port: number) {
  const open = new Set<Socket>();
  let down = false;
  let knocks = 0;
  const server = createServer((client) => {
    if (down) {
      knocks++;
      client.destroy();
      return;
    }
    const upstream = connect(port, '127.0.0.1');
    open.add(client).add(upstream);
    const close = () => {
      client.destroy();
      upstream.destroy();
      open.delete(client);
      open.delete(upstream);
    };
    client.on('error', close).on('close', close);
    upstream.on('error', close).on('close', close);
    client.pipe(upstream).pipe(client);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.teardown(() => {
    for (const s of open) s.destroy();
    return new Promise((r) => server.close(r));
  });
  const addr = server.address() as { port: number };
  return {
    url: `http://127.0.0.1:${addr.port}/v1`,
    /** Connections refused since the last down(). */
    get knocks() {
      return knocks;
    },
    down() {
      down = true;
      knocks = 0;
      for (const s of open) s.destroy();
    },
    up() {
      down = false;
    },
  };
}

const body = (sim: Record<string, unknown>) => ({ model: 'm', messages: [{ role: 'user', content: 'hi' }], stream: true, sim });

/** Sends a request every 50 ms until one completes; ms from `since` to that answer (bounded by `limitMs`). */
async function recovery(url: string, key: string, since: number, limitMs: number): Promise<number> {
  const until = since + limitMs;
  while (Date.now() < until) {
    const res = await chat(url, key, body({ tokens: 2 }));
    const text = await res.text();
    if (res.status === 200 && text.includes('[DONE]')) return Date.now() - since;
    await sleep(50);
  }
  return Infinity;
}

t.test('a burst of 64 broken streams counts once; with every upstream ejected a trial a second brings it back', async (t) => {
  const sim = await startSim(t);
  const front = await startFront(t, sim.port);
  const gw = await startGateway(t, {
    upstreamUrl: front.url,
    config: {
      upstream: { eject_seconds: 0.5, eject_after_failures: 5 },
      limits: { max_concurrent_per_key: 1000 },
      models: [{ name: 'm', max_output_tokens: 256, price: { input: 1, output: 1 }, upstreams: [{ url: front.url }] }],
    },
  });
  const { key } = await gw.createKey({ account: 'burst', env: 'live' });
  await gw.grant('burst', 1_000_000_000);

  // 1. One burst: 64 slow streams, all cut at once.
  const streams = Array.from({ length: 64 }, async () => {
    const res = await chat(gw.url, key, body({ tokens: 200, delay_ms: 20 }));
    return { status: res.status, text: await res.text().catch(() => '') };
  });
  await waitFor(() => sim.requests.filter((r) => r.chunksSent > 2 && !r.endedAt).length === 64, 15_000, '64 streams flowing');
  front.down();
  const broken = await Promise.all(streams);
  t.ok(
    broken.every((b) => b.status === 200 && !b.text.includes('[DONE]')),
    'all 64 streams started and broke without [DONE]',
  );
  front.up();
  const back = Date.now();
  const first = await recovery(gw.url, key, back, 20_000);
  t.ok(first <= RECOVERY_MS, `served again ${first} ms after the upstream came back (≤ ${RECOVERY_MS} ms)`);

  // 2. A longer outage, on a gateway with the default back-off (10 s, doubling): the upstream is ejected by
  // the first failures, and trial requests keep knocking about once a second while clients keep asking.
  const gw2 = await startGateway(t, {
    upstreamUrl: front.url,
    config: { models: [{ name: 'm', max_output_tokens: 256, price: { input: 1, output: 1 }, upstreams: [{ url: front.url }] }] },
  });
  const other = await gw2.createKey({ account: 'burst2', env: 'live' });
  await gw2.grant('burst2', 1_000_000_000);
  front.down();
  const outageMs = 3500;
  const until = Date.now() + outageMs;
  let refused = 0;
  while (Date.now() < until) {
    const res = await chat(gw2.url, other.key, body({ tokens: 2 }));
    await res.text();
    if (res.status !== 200) refused++;
    await sleep(50);
  }
  const knocks = front.knocks;
  t.ok(refused > 20, `${refused} requests refused during the ${outageMs} ms outage`);
  // eject_after_failures (5) connections eject it; then one trial a second (one upstream: no retries).
  t.ok(knocks >= 5 + 2, `the ejected upstream still got trial requests: ${knocks} connections in ${outageMs} ms`);
  t.ok(knocks <= 5 + outageMs / 1000 + 2, `…about one a second, not one per request (${knocks})`);
  front.up();
  const back2 = Date.now();
  const second = await recovery(gw2.url, other.key, back2, 20_000);
  t.ok(second <= RECOVERY_MS, `served again ${second} ms after a ${outageMs} ms outage with eject_seconds 10 (≤ ${RECOVERY_MS} ms)`);

  // Money: every broken stream billed for what it produced, every refusal free, ledger = balance.
  for (const [g, account, paid] of [
    [gw, 'burst', 65],
    [gw2, 'burst2', 1],
  ] as const) {
    const entries = await waitFor(
      async () => {
        const all = await ledgerOf(g.admin, account);
        return all.filter((e) => e.kind === 'debit' && e.amount_micros < 0).length >= paid && all;
      },
      10_000,
      `the ${paid} paid debits of ${account}`,
    );
    const state = await waitFor(
      async () => {
        const a = await accountOf(g.admin, account);
        return a.held_micros === 0 && a;
      },
      10_000,
      'nothing held',
    );
    checkLedger(t, entries, state);
  }
});
