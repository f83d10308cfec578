// SPEC §13 "the body budget is fair": one key holds at most limits.max_inflight_body_bytes_per_key of
// bodies, share bodies included. Before, `POST /v1/shares` read its body under the process budget alone:
// one default test key held the whole 64 MiB with 59 stalled uploads and another account's requests got
// 503 overloaded (115 of 146). Now a share body is read under its key's own cap, as a chat body is: the
// uploads past 8 MiB are refused with 429 concurrency_limit_exceeded, and another account keeps
// chatting and publishing while the attacker's sockets stall.
import t from 'tap';
import { setTimeout as sleep } from 'node:timers/promises';
import { sharesS3Config, startS3 } from '../helpers/s3.ts';
import { describe, gauge, rawPost, startNoisyStack, victimLoad, type RawPost } from './noisy-fixture.ts';

const MiB = 1024 * 1024;
const PROCESS_BUDGET = 64 * MiB; // limits.max_inflight_body_bytes (default)
const KEY_CAP = 8 * MiB; // limits.max_inflight_body_bytes_per_key (default)
// shares/share-body.ts maxShareBodyBytes with the defaults: 1 MiB snapshot + 64 KiB envelope + 20 files × 4 KiB.
const DECLARED = MiB + 64 * 1024 + 20 * 4 * 1024;
const PER = 1_150_000; // bytes each stalled upload sends (leading whitespace: valid JSON so far)

const s3 = await startS3(t);
const stack = await startNoisyStack(t, { shares: { s3: sharesS3Config(s3) } });

if (stack) {
  const { gw } = stack;
  const victimKey = await stack.victim();

  t.test("one key's stalled share uploads stop at its own cap; another account chats and publishes", async (t) => {
    const attacker = await stack.key('mallory', 'test');
    // Enough sockets to fill the process budget, as the attack did: 58 × 1.15 MB, then one topping it up.
    const sockets: RawPost[] = [];
    for (let i = 0; i < Math.floor(PROCESS_BUDGET / PER); i++) {
      const s = rawPost(gw.url, '/v1/shares', attacker, DECLARED);
      s.write(Buffer.alloc(PER, ' '));
      sockets.push(s);
    }
    // Until what the key holds stops growing (bounded: 3 s).
    let held = -1;
    for (let i = 0; i < 30; i++) {
      await sleep(100);
      const now = await gauge(gw, 'tollgate_inflight_body_bytes');
      if (now === held && now > 0) break;
      held = now;
    }
    const top = rawPost(gw.url, '/v1/shares', attacker, DECLARED);
    top.write(Buffer.alloc(Math.min(PER, Math.max(0, PROCESS_BUDGET - held - 50)), ' '));
    sockets.push(top);
    await sleep(500);
    held = await gauge(gw, 'tollgate_inflight_body_bytes');
    t.ok(held <= KEY_CAP, `the key holds ${held} body bytes (its cap: ${KEY_CAP}; the process's: ${PROCESS_BUDGET})`);

    // Another account, while the attacker's sockets stall (server.body_timeout_ms: 10 s by default).
    const victim = await victimLoad(gw, victimKey, sleep(2500));
    const published = await fetch(`${gw.url}/v1/shares`, {
      method: 'POST',
      headers: { authorization: `Bearer ${victimKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ snapshot: { title: 'mine', messages: [{ role: 'user', content: 'hello' }] } }),
    });
    t.equal(published.status, 201, `the victim publishes a share: ${published.status}`);
    await published.arrayBuffer();
    t.ok(victim.total >= 10, `the victim sent ${victim.total} chat requests during the attack`);
    t.ok(victim.ok / victim.total >= 0.99, `victim (another account): ${describe(victim)}`);

    // Every upload is answered: those past the key's cap with 429, those under it with 408 once they time out.
    const replies = await Promise.race([Promise.all(sockets.map((s) => s.response)), sleep(20_000).then(() => null)]);
    for (const s of sockets) s.socket.destroy();
    t.ok(replies, 'every upload answered within 20 s');
    const statuses: Record<number, number> = {};
    for (const r of replies ?? []) statuses[r.status] = (statuses[r.status] ?? 0) + 1;
    t.comment(`attacker's uploads: ${JSON.stringify(statuses)}`);
    t.ok((statuses[429] ?? 0) >= sockets.length - Math.ceil(KEY_CAP / PER), `past the cap: 429 (${statuses[429] ?? 0})`);
    t.notOk(statuses[503], 'none reached the process budget (503 overloaded)');
    const refused = replies?.find((r) => r.status === 429);
    t.match(JSON.parse(refused?.body ?? '{}'), { error: { code: 'concurrency_limit_exceeded' } });
    for (let i = 0; i < 100 && (await gauge(gw, 'tollgate_inflight_body_bytes')) > 0; i++) await sleep(20);
    t.equal(await gauge(gw, 'tollgate_inflight_body_bytes'), 0, 'every byte given back');
  });
}
