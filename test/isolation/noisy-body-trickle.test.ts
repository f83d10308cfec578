// SPEC §13 "the body budget is fair and pays for bytes, not promises", attack 1 of issue 24: 64 sockets
// of one free test key, each declaring a 4 MiB body and trickling one byte a second. Before, the
// declared lengths were reserved up front from the process budget and every other tenant got 503
// overloaded for as long as the sockets stayed (272 of 272 over 70 s). Now bytes are reserved as they
// arrive, a key holds at most limits.max_inflight_body_bytes_per_key, and a body not complete within
// server.body_timeout_ms is refused with 408. A victim account's requests are measured throughout.
import t from 'tap';
import { setTimeout as sleep } from 'node:timers/promises';
import { assertLatency, baseline, describe, gauge, healthzLoad, rawPost, startNoisyStack, victimLoad } from './noisy-fixture.ts';

const MiB = 1024 * 1024;
const stack = await startNoisyStack(t, {
  server: { body_timeout_ms: 5000 },
  rate_limits: { test_account: { requests_per_minute: 10_000, tokens_per_minute: 10_000_000 } },
});

if (stack) {
  const { gw } = stack;
  const victimKey = await stack.victim();

  t.test('64 sockets declaring 4 MiB and trickling a byte a second: the victim keeps being served', async (t) => {
    const attacker = await stack.key('mallory', 'test', { requests_per_minute: 10_000 });
    // As long as the attack (the 5 s body timeout): both windows meet the same share of a loaded box's stalls.
    const base = await baseline(gw, victimKey, 5000);
    t.equal(base.victim.ok, base.victim.total, `baseline: ${describe(base.victim)}`);

    const started = performance.now();
    const sockets = Array.from({ length: 64 }, () => rawPost(gw.url, '/v1/chat/completions', attacker, 4 * MiB));
    const answered = Promise.all(sockets.map((s) => s.response));
    // One byte a second on every socket until it is answered (bounded: 15 s).
    const trickle = (async () => {
      for (let i = 0; i < 15; i++) {
        for (const s of sockets) s.write(i === 0 ? '{' : ' ');
        if (await Promise.race([answered.then(() => true), sleep(1000).then(() => false)])) return;
      }
    })();
    const stop = Promise.race([answered, sleep(15_000)]);
    const heldMid = sleep(2500).then(() => gauge(gw, 'tollgate_inflight_body_bytes'));
    const [victim, healthz, replies] = await Promise.all([victimLoad(gw, victimKey, stop), healthzLoad(gw, stop), answered, trickle]);
    const elapsed = performance.now() - started;
    for (const s of sockets) s.socket.destroy();

    t.ok((await heldMid) < 64 * 1024, `the 64 promises of 4 MiB hold only the bytes that came: ${await heldMid} bytes`);
    const statuses: Record<number, number> = {};
    for (const r of replies) statuses[r.status] = (statuses[r.status] ?? 0) + 1;
    t.same(statuses, { 408: 64 }, 'every trickling body is refused with 408 once server.body_timeout_ms has passed');
    t.match(JSON.parse(replies[0]!.body), { error: { code: 'request_timeout' } });
    t.ok(elapsed < 12_000, `all answered in ${Math.round(elapsed)} ms (timeout 5000 ms)`);

    t.ok(victim.total >= 20, `the victim sent ${victim.total} requests during the attack`);
    t.ok(victim.ok / victim.total >= 0.99, `victim during the attack: ${describe(victim)}`);
    t.equal(healthz.ok, healthz.total, `/healthz: ${describe(healthz)}`);
    assertLatency(t, base, victim, healthz);
  });

  t.test('one key past limits.max_inflight_body_bytes_per_key (8 MiB): 429 concurrency_limit_exceeded, others served', async (t) => {
    const attacker = await stack.key('mallory2', 'test', { requests_per_minute: 10_000 });
    const body = Buffer.alloc(4 * MiB, ' ');
    Buffer.from('{"model":"sim-free","messages":[{"role":"user","content":"hi"}],"max_tokens":4}').copy(body);
    const first = Math.floor(3 * MiB);
    const a = rawPost(gw.url, '/v1/chat/completions', attacker, body.length);
    const b = rawPost(gw.url, '/v1/chat/completions', attacker, body.length);
    a.write(body.subarray(0, first));
    b.write(body.subarray(0, first));
    // Both bodies' first 3 MiB are in (6 MiB held by the key) before the third starts.
    for (let i = 0; i < 200 && (await gauge(gw, 'tollgate_inflight_body_bytes')) < 2 * first; i++) await sleep(25);
    t.ok((await gauge(gw, 'tollgate_inflight_body_bytes')) >= 2 * first, 'two bodies of the key are 6 MiB in');
    const c = rawPost(gw.url, '/v1/chat/completions', attacker, body.length);
    c.write(body.subarray(0, first));
    // Its refusal is answered once the rest of its body was drained or server.body_timeout_ms passed (so an
    // uploading client reads a 429, not a reset): complete the other two first, then read it.
    await sleep(300);
    t.ok((await gauge(gw, 'tollgate_inflight_body_bytes')) <= 2 * first + 64 * 1024, 'the third body reserved nothing past the cap');
    // Meanwhile another account is served as usual.
    const v = await fetch(`${gw.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${victimKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'sim-small', messages: [{ role: 'user', content: 'x' }], max_tokens: 4 }),
    });
    t.equal(v.status, 200, 'the victim is served while the key is at its cap');
    await v.arrayBuffer();
    a.write(body.subarray(first));
    b.write(body.subarray(first));
    const [ra, rb] = await Promise.all([a.response, b.response]);
    t.same([ra.status, rb.status], [200, 200], 'the two bodies under the cap complete and are served');
    const refused = await c.response;
    t.equal(refused.status, 429, 'the third body would pass the key cap');
    t.match(JSON.parse(refused.body), { error: { code: 'concurrency_limit_exceeded' } });
    t.match(refused.body, /bytes of request bodies in flight/);
    c.socket.destroy();
    a.socket.destroy();
    b.socket.destroy();
    for (let i = 0; i < 100 && (await gauge(gw, 'tollgate_inflight_body_bytes')) > 0; i++) await sleep(20);
    t.equal(await gauge(gw, 'tollgate_inflight_body_bytes'), 0, 'every byte given back');
  });
}
