// SPEC §13 against a client that never reads its answers. Before, a response's body budget and concurrency
// slot were given back only when the response closed, and nothing timed out writing a response: 16 large
// answers nobody read held the whole 64 MiB body budget for as long as their sockets stayed open, and
// another account got 0 of 122 requests served (503 overloaded). Now a response whose bytes wait on a
// client that takes none of them for server.write_timeout_ms has its connection destroyed: the request
// ends as "client gone" (billed for what was produced, its hold settled), its budget and slot come back.
// A stream whose upstream is slow between events has nothing waiting and is never cut by it.
import t from 'tap';
import { connect, type Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { ADMIN_TOKEN } from '../helpers/gateway.ts';
import { describe, gauge, startNoisyStack, victimLoad } from './noisy-fixture.ts';

const KiB = 1024;
const BUDGET = 4096 * KiB;
const WRITE_TIMEOUT_MS = 2500;
const stack = await startNoisyStack(t, {
  server: { write_timeout_ms: WRITE_TIMEOUT_MS },
  // A small process budget: eight bodies of 512 KiB fill it (the default 64 MiB takes sixteen of 4 MiB).
  limits: { max_inflight_body_bytes: BUDGET, max_inflight_body_bytes_per_key: 1024 * KiB },
});

/** A live chat request asking the simulator for a ~20 MB stream, padded with whitespace to exactly `size` bytes. */
function bigAnswerBody(size: number): Buffer {
  const json = JSON.stringify({
    model: 'sim-small',
    messages: [{ role: 'user', content: 'tell me everything' }],
    stream: true,
    sim: { tokens: 100_000, ignore_max_tokens: true },
  });
  const body = Buffer.alloc(size, ' ');
  body.write(json);
  return body;
}

async function admin(gwAdmin: string, path: string): Promise<Record<string, unknown>> {
  const r = await fetch(`${gwAdmin}${path}`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
  return (await r.json()) as Record<string, unknown>;
}

async function waitUntil(what: string, check: () => Promise<boolean> | boolean, ms: number): Promise<number> {
  const t0 = performance.now();
  for (;;) {
    if (await check()) return performance.now() - t0;
    if (performance.now() - t0 > ms) throw new Error(`${what}: not within ${ms} ms`);
    await sleep(25);
  }
}

if (stack) {
  const { gw } = stack;
  const victimKey = await stack.victim();

  t.test('answers nobody reads: the connections are cut after write_timeout_ms, the victim is served again', async (t) => {
    // The attacker: one funded account, four live keys, two requests each (the per-key cap is 1 MiB).
    const keys = [await stack.victim('mallory')];
    for (let i = 1; i < 4; i++) keys.push(await stack.key('mallory', 'live'));
    const before = await victimLoad(gw, victimKey, sleep(300), 2000, 0);
    t.equal(before.ok, before.total, `victim before the attack: ${describe(before)}`);

    const u = new URL(gw.url);
    const body = bigAnswerBody(512 * KiB);
    const sockets: { s: Socket; got: number; tail: string; closed: Promise<void> }[] = [];
    for (const key of keys) {
      for (let i = 0; i < 2; i++) {
        const s = connect(Number(u.port), u.hostname);
        const entry = { s, got: 0, tail: '', closed: new Promise<void>((resolve) => s.on('close', () => resolve())) };
        s.on('error', () => {});
        // Reads the first bytes (the stream has started), then stops reading; the socket stays open.
        s.on('data', (b: Buffer) => {
          if (entry.got === 0) s.pause();
          entry.got += b.length;
          entry.tail = (entry.tail + b.toString('latin1')).slice(-64);
        });
        s.write(
          `POST /v1/chat/completions HTTP/1.1\r\nhost: ${u.host}\r\nauthorization: Bearer ${key}\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\n\r\n`,
        );
        s.write(body);
        sockets.push(entry);
      }
    }
    await waitUntil('every attack body is read', async () => (await gauge(gw, 'tollgate_inflight_body_bytes')) === BUDGET, 10_000);
    const pinnedAt = performance.now();
    t.pass(`the eight bodies hold the whole process budget (${BUDGET} bytes)`);
    // While the answers wait on their client, another account is refused: the attack is real.
    const refused = await fetch(`${gw.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${victimKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'sim-small', messages: [{ role: 'user', content: 'hello' }], max_tokens: 8 }),
    });
    await refused.arrayBuffer();
    t.equal(refused.status, 503, 'meanwhile another account is refused (503 overloaded)');
    await waitUntil('every attack stream has started', () => sockets.every((x) => x.got > 0), 5000);

    // The attacker keeps its sockets open and reads nothing more: the gateway cuts the responses itself.
    await waitUntil(
      'the body budget is given back',
      async () => (await gauge(gw, 'tollgate_inflight_body_bytes')) === 0,
      4 * WRITE_TIMEOUT_MS + 5000,
    );
    const releasedAfter = performance.now() - pinnedAt;
    t.ok(
      releasedAfter < 3 * WRITE_TIMEOUT_MS + 2000,
      `tollgate_inflight_body_bytes back to 0 ${Math.round(releasedAfter)} ms after it was full`,
    );

    const victim = await victimLoad(gw, victimKey, sleep(2000));
    t.ok(victim.total >= 10, `the victim sent ${victim.total} requests after the cut`);
    t.ok(victim.ok / victim.total >= 0.99, `victim once write_timeout_ms has passed: ${describe(victim)}`);

    // Reading again, the attacker finds each stream cut: what the kernel buffers held, then the close, no [DONE].
    for (const x of sockets) x.s.resume();
    await Promise.race([Promise.all(sockets.map((x) => x.closed)), sleep(10_000)]);
    const cut = sockets.filter((x) => x.s.destroyed && !x.tail.includes('[DONE]'));
    t.equal(
      cut.length,
      8,
      `every attack stream was closed by the gateway before its end (${sockets.map((x) => x.got).join(', ')} bytes of ~20 MB)`,
    );

    // The attacker's eight requests are settled: no hold left, one debit each for what was produced.
    await waitUntil('the holds are released', async () => (await admin(gw.adminUrl, '/admin/accounts/mallory')).held_micros === 0, 5000);
    t.pass('no hold left on the attacking account');
    const ledger = (await admin(gw.adminUrl, '/admin/accounts/mallory/ledger?limit=100')).entries as {
      kind: string;
      amount_micros: number;
    }[];
    const debits = ledger.filter((e) => e.kind === 'debit');
    t.equal(debits.length, 8, 'one debit per cut request');
    t.ok(
      debits.every((e) => e.amount_micros < 0),
      'each billed for what it produced',
    );
    await waitUntil('the request lines are written', () => (gw.output().match(/"relay_end":"client_gone"/g) ?? []).length >= 8, 5000);
    t.pass('the eight requests ended as client_gone');
    for (const x of sockets) x.s.destroy();
  });

  t.test('a slow upstream with gaps longer than write_timeout_ms is not cut', async (t) => {
    // Two tokens 1.5 × write_timeout_ms apart: the response is quiet (nothing waiting for the client), not stalled.
    const r = await fetch(`${gw.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${victimKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'sim-small',
        messages: [{ role: 'user', content: 'slowly' }],
        max_tokens: 8,
        stream: true,
        sim: { tokens: 2, delay_ms: Math.round(WRITE_TIMEOUT_MS * 1.5) },
      }),
    });
    t.equal(r.status, 200);
    const text = await r.text();
    t.match(text, /data: \[DONE\]/, 'the stream completes with [DONE]');
    t.equal((text.match(/"content":"tok/g) ?? []).length, 2, 'both tokens arrived');
  });
}
