// A client that leaves before the upstream answers (SPEC §1.2, §2a: the upstream request "is aborted at
// once", "within 100 ms"; the debit entry is visible "within 1 s of ... the client's abort"), on real
// Redis, where the credit hold is a network round trip: a client gone while the hold is in flight must
// not leave the upstream generating, nor the request hanging until the total timeout.
import { connect } from 'node:net';
import t from 'tap';
import { startGateway } from '../helpers/gateway.ts';
import { startRedis } from '../helpers/redis.ts';
import { waitFor } from '../helpers/wait.ts';
import { postChat, startSim, waitForDebit } from './chat-fixture.ts';

const redis = await startRedis(t);

/** Blocks Redis for `ms` with a busy Lua script (DEBUG SLEEP is disabled by default in Redis 7). */
function stallRedis(ms: number): Promise<unknown> {
  return redis!.client.eval(
    `local s = redis.call('TIME'); local t0 = s[1] * 1e6 + s[2]
    repeat local n = redis.call('TIME') until (n[1] * 1e6 + n[2]) - t0 >= tonumber(ARGV[1]) * 1000
    return 1`,
    0,
    ms,
  );
}

if (redis) {
  t.test('client gone while the credit hold is in flight: upstream not left running, settled within 1 s', async (t) => {
    const sim = await startSim(t);
    // total_timeout_ms 4 s (not the helper's 30 s) only so a stuck request cannot outlive the file's budget.
    const gw = await startGateway(t, { upstreamUrl: sim.url, redisUrl: redis.url, config: { upstream: { total_timeout_ms: 4000 } } });
    const { key } = await gw.createKey({ account: 'gone-a', env: 'live' });
    await gw.grant('gone-a', 100_000_000);
    // Warm the key cache so the only store call left on the request path is the hold.
    await (await postChat(gw, key, { model: 'sim-small', messages: [{ role: 'user', content: 'warm' }] })).arrayBuffer();
    sim.clear();

    const body = JSON.stringify({
      model: 'sim-small',
      messages: [{ role: 'user', content: 'long one' }],
      stream: true,
      sim: { tokens: 2000, delay_ms: 5 },
    });
    const stall = stallRedis(400);
    const socket = connect(Number(new URL(gw.url).port), '127.0.0.1');
    socket.on('error', () => {});
    await new Promise((r) => socket.once('connect', r));
    socket.write(
      `POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\nauthorization: Bearer ${key}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
    );
    // Leave while the hold waits on Redis: once the request is in flight (the gauge is read without Redis)
    // and has had a moment to reach its hold, well inside the stall.
    await waitFor(
      async () => /^tollgate_in_flight_requests [1-9]/m.test(await (await fetch(`${gw.adminUrl}/metrics`)).text()),
      300,
      'the request in flight',
    );
    await new Promise((r) => setTimeout(r, 30));
    socket.destroy();
    await stall;

    // The edge logs the request when the client's socket closes, with its id.
    let line: { request_id: string } | undefined;
    for (let i = 0; i < 50 && !line; i++) {
      line = gw.logs.map((l) => JSON.parse(l)).find((l) => l.route === '/v1/chat/completions' && l.aborted === true);
      if (!line) await new Promise((r) => setTimeout(r, 20));
    }
    t.ok(line, 'the abandoned request was logged');
    const debit = await waitForDebit(gw, 'gone-a', line!.request_id, 1200).catch((e: Error) => e);
    t.notOk(debit instanceof Error, 'settled within ~1 s of the client leaving, not at total_timeout_ms');

    // 2000 tokens at 5 ms is a 10 s completion: the upstream must stop generating it long before that
    // (the simulator marks a request aborted when it sees its socket close).
    t.ok(
      await waitFor(() => sim.requests.every((r) => r.aborted || r.finished), 3000, 'the upstream request to stop'),
      'no upstream request still running for a client that left',
    );
    t.notOk(
      sim.requests.some((r) => r.finished),
      'no completion generated to the end',
    );
  });

  t.test('client gone while its request waits in the pool for an upstream connection: settled within 1 s, never sent', async (t) => {
    const sim = await startSim(t);
    // One connection to the upstream (upstream.max_connections): the second request waits in undici's queue
    // behind the first's 8 s non-streaming generation; headers_timeout_ms above it so nothing else ends it.
    const gw = await startGateway(t, {
      upstreamUrl: sim.url,
      redisUrl: redis.url,
      config: { upstream: { max_connections: 1, headers_timeout_ms: 20_000 } },
    });
    const { key } = await gw.createKey({ account: 'gone-b', env: 'live' });
    await gw.grant('gone-b', 100_000_000);
    // Its answer is not awaited: the gateway's teardown ends it.
    void postChat(gw, key, {
      model: 'sim-small',
      messages: [{ role: 'user', content: 'long one' }],
      sim: { tokens: 100, delay_ms: 80 },
    }).catch(() => undefined);
    await sim.waitFor(() => true, 2000);
    const held = async () => (await gw.admin('/admin/accounts/gone-b')).body.held_micros as number;
    const firstHeld = await held();
    const ac = new AbortController();
    const second = fetch(`${gw.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'sim-small', messages: [{ role: 'user', content: 'queued' }] }),
      signal: ac.signal,
    }).catch((e: Error) => e);
    // Once its hold is taken (the account holds more than the first's), it is in the pool's queue: the gateway
    // dispatches in the same turn as the hold's answer, long before this admin read returns.
    await waitFor(async () => (await held()) > firstHeld, 2000, "the queued request's hold");
    ac.abort();
    t.match(await second, { name: 'AbortError' });
    let line: { request_id: string } | undefined;
    for (let i = 0; i < 50 && !line; i++) {
      line = gw.logs.map((l) => JSON.parse(l)).find((l) => l.route === '/v1/chat/completions' && l.aborted === true);
      if (!line) await new Promise((r) => setTimeout(r, 20));
    }
    t.ok(line, 'the abandoned request was logged');
    const debit = await waitForDebit(gw, 'gone-b', line!.request_id, 1200).catch((e: Error) => e);
    t.match(debit, { amount_micros: 0 }, 'settled within ~1 s of the client leaving, at 0, not when the connection freed');
    t.equal(sim.requests.length, 1, 'it never reached the upstream');
  });
}
