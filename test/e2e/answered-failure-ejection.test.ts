// An upstream's answered failure — a 5xx or 429 answer to a request it was sent, or an answer broken
// after its headers — can be the request's own doing: vLLM answers 500 to some inputs, one tenant can
// saturate an upstream into 429s, or break its own streams. Such failures count toward ejecting the
// upstream blamed on the request's account (SPEC §13's tenant): an ejection only one account's failures
// caused stands for that account alone, and another account's requests still reach the upstream, whose
// first answer ends the ejection. Before, one tenant's 5 bad requests ejected a model's upstream for every
// tenant for `eject_seconds` (SPEC §14). A dead upstream (500 to everyone) is still ejected for everyone
// once a second account fails on it.
import t, { type Test } from 'tap';
import { setTimeout as sleep } from 'node:timers/promises';
import { startGateway, type TestGateway } from '../helpers/gateway.ts';
import { waitFor } from '../helpers/wait.ts';
import { postChat, simSmallModel, startSim, startSteeredFront } from './chat-fixture.ts';

const USER = [{ role: 'user', content: 'tell me something' }];

async function gatewayOf(t: Test, urls: string[], prefix: string) {
  const gw = await startGateway(t, {
    upstreamUrl: urls[0]!,
    config: {
      upstream: { eject_after_failures: 5, eject_seconds: 10 },
      models: [simSmallModel('m', urls)],
    },
  });
  const { key: attacker } = await gw.createKey({ account: `${prefix}-attacker`, env: 'live' });
  const { key: victim } = await gw.createKey({ account: `${prefix}-victim`, env: 'live' });
  await gw.grant(`${prefix}-attacker`, 1_000_000);
  await gw.grant(`${prefix}-victim`, 1_000_000);
  return { gw, attacker, victim };
}

/**
 * The attacker sends `body` from `lanes` loops (its requests' statuses kept) while the victim sends plain requests
 * for 3 s once the attacker's failures have ejected the upstream for the attacker (it got a 503).
 */
async function attackAndMeasure(gw: TestGateway, attacker: string, victim: string, body: object, lanes = 1) {
  const attackStatuses: number[] = [];
  let attacking = true;
  const attack = Promise.all(
    Array.from({ length: lanes }, async () => {
      while (attacking) {
        const res = await postChat(gw, attacker, { model: 'm', messages: USER, ...body });
        await res.arrayBuffer();
        attackStatuses.push(res.status);
        await sleep(10);
      }
    }),
  );
  try {
    await waitFor(() => attackStatuses.includes(503), 10_000, 'the upstream ejected for the attacker');
    const victimStatuses: { status: number; at: number }[] = [];
    const t0 = Date.now();
    while (Date.now() - t0 < 3000) {
      const res = await postChat(gw, victim, { model: 'm', messages: USER, sim: { tokens: 3 } });
      await res.arrayBuffer();
      victimStatuses.push({ status: res.status, at: Date.now() - t0 });
      await sleep(20);
    }
    return { attackStatuses, victimStatuses };
  } finally {
    attacking = false;
    await attack;
  }
}

/** The victim's requests not served: their count, and each one's status and time. */
function refusedOf(statuses: { status: number; at: number }[]): string {
  const refused = statuses.filter((s) => s.status !== 200);
  return refused.length === 0 ? '' : `${refused.length} refused: ${refused.map((s) => `${s.status}@${s.at}ms`).join(' ')}`;
}

t.test("one tenant's requests its upstream answers 500 do not refuse another tenant", async (t) => {
  const sim = await startSim(t);
  const { gw, attacker, victim } = await gatewayOf(t, [sim.url], 'af-500');
  // A request the upstream answers 500 (as vLLM does for some inputs), sent in a loop.
  const { attackStatuses, victimStatuses } = await attackAndMeasure(gw, attacker, victim, { sim: { status: 500 } });
  // The gateway answers an upstream's 500 with 502 upstream_error (SPEC §2a).
  t.ok(attackStatuses.filter((s) => s === 502).length >= 5, 'the attacker got its failures');
  t.ok(victimStatuses.length >= 20, `the victim kept sending (${victimStatuses.length} requests)`);
  t.equal(refusedOf(victimStatuses), '', `every one of the victim's ${victimStatuses.length} requests was served`);
});

t.test("one tenant's 429s on both upstreams of a model do not refuse another tenant", async (t) => {
  const a = await startSim(t);
  const b = await startSim(t);
  const { gw, attacker, victim } = await gatewayOf(t, [a.url, b.url], 'af-429');
  // 429 (like 502-504) is retried on the next upstream: each attacker request fails on both.
  const { attackStatuses, victimStatuses } = await attackAndMeasure(gw, attacker, victim, { sim: { status: 429 } });
  t.ok(attackStatuses.filter((s) => s === 502).length >= 5, 'the attacker got its failures');
  t.equal(refusedOf(victimStatuses), '', `every one of the victim's ${victimStatuses.length} requests was served`);
});

t.test("one tenant's streams its upstream breaks after their first byte do not refuse another tenant", async (t) => {
  const sim = await startSim(t);
  const { gw, attacker, victim } = await gatewayOf(t, [sim.url], 'af-cut');
  // The upstream sends one chunk of each stream, then closes the connection. Each stream's headers are a
  // success: only concurrent streams break 5 in a row.
  const { attackStatuses, victimStatuses } = await attackAndMeasure(
    gw,
    attacker,
    victim,
    { stream: true, sim: { tokens: 8, delay_ms: 50, cut_after: 2 } },
    8,
  );
  t.ok(attackStatuses.filter((s) => s === 200).length >= 5, 'the attacker got its broken streams');
  t.equal(refusedOf(victimStatuses), '', `every one of the victim's ${victimStatuses.length} requests was served`);
});

t.test('an upstream that answers everyone 500 is ejected for everyone once a second account fails on it', async (t) => {
  const sim = await startSim(t);
  const dead = await startSteeredFront(t, sim, { 'x-sim-status': '500' });
  const { gw, attacker: x, victim: y } = await gatewayOf(t, [dead], 'af-dead');
  const send = async (key: string) => {
    const res = await postChat(gw, key, { model: 'm', messages: USER, sim: { tokens: 3 } });
    await res.arrayBuffer();
    return res.status;
  };
  const xs: number[] = [];
  for (let i = 0; i < 5; i++) xs.push(await send(x));
  t.same(xs, [502, 502, 502, 502, 502], "x's requests fail");
  // Ejected for x (its one trial a second aside); y's first request still goes there: it could be x's own.
  const seen = sim.requests.length;
  t.equal(await send(y), 502, "y's first request fails too");
  t.equal(sim.requests.length, seen + 1, 'it reached the upstream');
  // Two accounts failed on it: ejected for everyone, one trial a second.
  const statuses: number[] = [];
  const t0 = Date.now();
  await Promise.all(
    [x, y].map(async (key) => {
      while (Date.now() - t0 < 2000) {
        statuses.push(await send(key));
        await sleep(20);
      }
    }),
  );
  const trials = sim.requests.length - seen - 1;
  t.ok(trials <= 4, `the dead upstream got one trial a second (${trials} in ${Date.now() - t0} ms)`);
  t.ok(statuses.filter((s) => s === 503).length >= 20, `both accounts refused at once (${statuses.join(',')})`);
  t.equal(statuses.filter((s) => s !== 503 && s !== 502).length, 0, 'nothing else');
});
