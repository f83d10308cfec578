// SPEC §13 "parsing cost is bounded before parsing" and "admission before work", attack 2 of issue 24:
// four 4 MiB bodies holding arrays nested a million deep, from a key already over its rate limit. Before,
// each was parsed (~2 s) and re-serialised (~3 s) on the main thread before the rate limit was even
// checked: /healthz took 11 s to answer and every tenant froze with it. Now the over-limit key is refused
// before its body is read (drained, never parsed), and a key under its limit gets 422 json_invalid from a
// linear depth scan before JSON.parse runs. A victim account and /healthz are measured throughout.
import t from 'tap';
import { setTimeout as sleep } from 'node:timers/promises';
import { assertLatency, baseline, describe, healthzLoad, postChatBody, startNoisyStack, victimLoad } from './noisy-fixture.ts';

const MAX_BODY = 4 * 1024 * 1024;
const DEPTH = 1_000_000;

/** A 4 MiB chat body whose `deep` field nests arrays a million deep (the rest is a padding string). */
function deepBody(): Buffer {
  const head = '{"model":"sim-small","messages":[{"role":"user","content":"hi"}],"deep":';
  const tail = ',"pad":"';
  const pad = MAX_BODY - head.length - 2 * DEPTH - tail.length - 2;
  return Buffer.from(head + '['.repeat(DEPTH) + ']'.repeat(DEPTH) + tail + 'x'.repeat(pad) + '"}');
}

const stack = await startNoisyStack(t);

if (stack) {
  const { gw } = stack;
  const victimKey = await stack.victim();
  const body = deepBody();

  t.test('four million-deep 4 MiB bodies from a key over its rate limit: refused unread, nobody waits', async (t) => {
    t.equal(body.length, MAX_BODY);
    const attacker = await stack.key('mallory', 'test', { requests_per_minute: 1 });
    const first = await postChatBody(
      gw.url,
      attacker,
      Buffer.from('{"model":"sim-free","messages":[{"role":"user","content":"x"}],"max_tokens":2}'),
    );
    t.equal(first.status, 200, 'the key spends its one request');
    const base = await baseline(gw, victimKey, 1500);

    let done!: () => void;
    const stop = new Promise<void>((r) => (done = r));
    const loads = Promise.all([victimLoad(gw, victimKey, stop, 30_000), healthzLoad(gw, stop, 30_000)]);
    await sleep(200);
    const replies = await Promise.all([0, 1, 2, 3].map(() => postChatBody(gw.url, attacker, body)));
    await sleep(300);
    done();
    const [victim, healthz] = await loads;

    t.same(
      replies.map((r) => r.status),
      [429, 429, 429, 429],
      'all four refused by the rate limit',
    );
    t.match(JSON.parse(replies[0]!.text), { error: { code: 'rate_limit_exceeded' } });
    t.ok(healthz.total >= 5, `${healthz.total} /healthz probes during the attack`);
    t.equal(healthz.ok, healthz.total, `/healthz: ${describe(healthz)}`);
    t.ok(victim.ok / victim.total >= 0.99, `victim: ${describe(victim)}`);
    assertLatency(t, base, victim, healthz);
  });

  t.test('the same bodies from a key under its limit: 422 json_invalid (nesting too deep), found before parsing', async (t) => {
    // Four keys: one key's bodies are capped at 8 MiB in flight (limits.max_inflight_body_bytes_per_key).
    const attackers = await Promise.all([0, 1, 2, 3].map(() => stack.key('mallory2', 'test', { requests_per_minute: 1000 })));
    const base = await baseline(gw, victimKey, 1500);
    let done!: () => void;
    const stop = new Promise<void>((r) => (done = r));
    const loads = Promise.all([victimLoad(gw, victimKey, stop, 30_000), healthzLoad(gw, stop, 30_000)]);
    await sleep(200);
    const replies = await Promise.all(attackers.map((k) => postChatBody(gw.url, k, body)));
    await sleep(300);
    done();
    const [victim, healthz] = await loads;

    t.same(
      replies.map((r) => r.status),
      [422, 422, 422, 422],
    );
    const detail = JSON.parse(replies[0]!.text).detail[0];
    t.match(detail, { loc: ['body'], type: 'json_invalid', msg: 'JSON decode error', input: null });
    t.match(detail.ctx.error, /nesting too deep/);
    t.equal(healthz.ok, healthz.total, `/healthz: ${describe(healthz)}`);
    t.ok(victim.ok / victim.total >= 0.99, `victim: ${describe(victim)}`);
    assertLatency(t, base, victim, healthz);
  });
}
