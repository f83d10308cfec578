// A non-streaming answer's headers come only once its whole generation is done, so a long non-streaming
// generation times out before its headers (upstream.headers_timeout_ms) exactly like a hung upstream.
// Such a timeout counts toward ejecting the upstream only when that upstream answered nobody while the
// attempt waited (it looks hung); an upstream that answered other requests meanwhile is alive. Otherwise
// one tenant's concurrent long non-streaming requests eject every healthy upstream of a model and other
// tenants get 503 upstream_unavailable (SPEC §13 isolation, §14 upstream health). On an upstream nobody
// else uses they do count, blamed on their account: the ejection stands for that account alone, and
// another account is still served there. A hung upstream (it accepts requests and answers none) is still
// ejected while its sibling answers everyone, and for everyone once two accounts have waited on it.
import t from 'tap';
import { setTimeout as sleep } from 'node:timers/promises';
import { startGateway } from '../helpers/gateway.ts';
import { waitFor } from '../helpers/wait.ts';
import { hostOf, metricsText, postChat, sample, simSmallModel, startSim, startSteeredFront } from './chat-fixture.ts';

const USER = [{ role: 'user', content: 'tell me something' }];
/** 100 tokens, 50 ms each: a 5 s generation, far past the 300 ms headers timeout (fired within ~1 s). */
const LONG = { tokens: 100, delay_ms: 50 };

/** Sends short non-streaming requests from `lanes` concurrent loops until `stop()`; the statuses seen. */
function steadyTraffic(gw: Awaited<ReturnType<typeof startGateway>>, key: string, modelName: string, lanes: number) {
  const statuses: number[] = [];
  let running = true;
  const loops = Array.from({ length: lanes }, async () => {
    while (running) {
      const res = await postChat(gw, key, { model: modelName, messages: USER, sim: { tokens: 3 } });
      await res.arrayBuffer();
      statuses.push(res.status);
      await sleep(20);
    }
  });
  return {
    statuses,
    async stop() {
      running = false;
      await Promise.all(loops);
    },
  };
}

t.test("one tenant's long non-streaming generations do not eject the model's healthy upstreams", async (t) => {
  const a = await startSim(t);
  const b = await startSim(t);
  const gw = await startGateway(t, {
    upstreamUrl: a.url,
    config: {
      upstream: { headers_timeout_ms: 300, eject_after_failures: 5, eject_seconds: 60 },
      models: [simSmallModel('pair', [a.url, b.url])],
    },
  });
  const { key: attacker } = await gw.createKey({ account: 'lg-attacker', env: 'live' });
  const { key: victim } = await gw.createKey({ account: 'lg-victim', env: 'live' });
  await gw.grant('lg-attacker', 1_000_000);
  await gw.grant('lg-victim', 1_000_000);

  const traffic = steadyTraffic(gw, victim, 'pair', 3);
  await waitFor(() => traffic.statuses.length >= 4, 5000, 'the victim is served before the attack');
  // Two waves of 10 concurrent long non-streaming requests (large max_tokens): each times out on both
  // upstreams in turn (SPEC §1.2 retries a timeout before headers), then 504.
  const attackStatuses: number[] = [];
  for (let wave = 0; wave < 2; wave++) {
    await Promise.all(
      Array.from({ length: 10 }, async () => {
        const res = await postChat(gw, attacker, { model: 'pair', messages: USER, max_tokens: 256, sim: LONG });
        await res.arrayBuffer();
        attackStatuses.push(res.status);
      }),
    );
  }
  await sleep(1500); // the aftermath: an ejection would show as 503s here, until a half-open trial
  await traffic.stop();

  t.ok(
    attackStatuses.every((s) => s === 504 || s === 503),
    `the attacker's generations never finished (${attackStatuses.join(',')})`,
  );
  const m = await metricsText(gw);
  t.ok(
    sample(m, 'tollgate_upstream_errors_total', { upstream: hostOf(a.url), reason: 'headers_timeout' }) >= 5,
    'a timed out at least 5 times',
  );
  t.ok(
    sample(m, 'tollgate_upstream_errors_total', { upstream: hostOf(b.url), reason: 'headers_timeout' }) >= 5,
    'b timed out at least 5 times',
  );
  const refused = traffic.statuses.filter((s) => s !== 200);
  t.ok(traffic.statuses.length >= 20, `the victim kept sending (${traffic.statuses.length} requests)`);
  t.equal(refused.length, 0, `every one of the victim's requests was served: no upstream was ejected (${[...new Set(refused)].join(',')})`);

  // Both upstreams still serve their share.
  const [aBefore, bBefore] = [a.requests.length, b.requests.length];
  for (let i = 0; i < 6; i++) t.equal((await postChat(gw, victim, { model: 'pair', messages: USER, sim: { tokens: 3 } })).status, 200);
  t.ok(a.requests.length - aBefore >= 2 && b.requests.length - bBefore >= 2, 'both upstreams serve afterwards');
});

t.test('a hung upstream (accepts, answers nobody) is still ejected while its sibling answers everyone', async (t) => {
  const sim = await startSim(t);
  const good = await startSim(t);
  // Every request through this front waits 10 minutes for its headers: it answers nobody.
  const hung = await startSteeredFront(t, sim, { 'x-sim-headers-delay-ms': '600000' });
  const gw = await startGateway(t, {
    upstreamUrl: good.url,
    config: {
      upstream: { headers_timeout_ms: 300, eject_after_failures: 2, eject_seconds: 60 },
      models: [simSmallModel('pair', [hung, good.url])],
    },
  });
  const { key } = await gw.createKey({ account: 'lg-hung', env: 'live' });
  await gw.grant('lg-hung', 1_000_000);

  // Non-streaming traffic from three loops: the hung upstream's attempts time out (retried on the good
  // one, so every client is served) while the good upstream answers the others all along.
  const traffic = steadyTraffic(gw, key, 'pair', 3);
  await waitFor(
    async () => sample(await metricsText(gw), 'tollgate_upstream_errors_total', { upstream: hostOf(hung), reason: 'headers_timeout' }) >= 2,
    10_000,
    'two timeouts on the hung upstream',
    50,
  );
  await sleep(500); // attempts of the ejecting burst still in flight end
  const hungSeen = sim.requests.length;
  const goodSeen = good.requests.length;
  await waitFor(() => good.requests.length >= goodSeen + 30, 10_000, '30 more requests served');
  await traffic.stop();
  t.equal(sim.requests.length, hungSeen, 'the hung upstream gets nothing more: ejected');
  t.equal(traffic.statuses.filter((s) => s !== 200).length, 0, 'every request served (the hung attempts retried on the good upstream)');
  const errors = sample(await metricsText(gw), 'tollgate_upstream_errors_total', { upstream: hostOf(hung), reason: 'headers_timeout' });
  t.ok(errors >= 2 && errors <= 3 + 2, `ejected after its burst of timeouts (${errors})`);
});

t.test("one account's long generations on an upstream nobody else uses do not refuse another account", async (t) => {
  const sim = await startSim(t);
  const gw = await startGateway(t, {
    upstreamUrl: sim.url,
    config: {
      upstream: { headers_timeout_ms: 300, eject_after_failures: 5, eject_seconds: 60 },
      models: [simSmallModel('solo', [sim.url])],
    },
  });
  const { key: attacker } = await gw.createKey({ account: 'lg-idle-attacker', env: 'live' });
  const { key: victim } = await gw.createKey({ account: 'lg-idle-victim', env: 'live' });
  await gw.grant('lg-idle-attacker', 1_000_000);
  await gw.grant('lg-idle-victim', 1_000_000);

  // Five loops of long non-streaming generations, the upstream's only traffic: each times out before its
  // headers with nobody else answered meanwhile, until the attacker's own requests are refused (ejected).
  const attackStatuses: number[] = [];
  let attacking = true;
  const attack = Array.from({ length: 5 }, async () => {
    while (attacking) {
      const res = await postChat(gw, attacker, { model: 'solo', messages: USER, max_tokens: 256, sim: LONG });
      await res.arrayBuffer();
      attackStatuses.push(res.status);
    }
  });
  await waitFor(() => attackStatuses.includes(503), 10_000, 'the upstream ejected for the attacker');

  // Another account arrives and sends in a loop while the attack goes on.
  const victimStatuses: { status: number; at: number }[] = [];
  const t0 = Date.now();
  while (Date.now() - t0 < 3000) {
    const res = await postChat(gw, victim, { model: 'solo', messages: USER, sim: { tokens: 3 } });
    await res.arrayBuffer();
    victimStatuses.push({ status: res.status, at: Date.now() - t0 });
    await sleep(20);
  }
  attacking = false;
  await Promise.all(attack);

  const refused = victimStatuses.filter((s) => s.status !== 200);
  t.ok(victimStatuses.length >= 20, `the victim kept sending (${victimStatuses.length} requests)`);
  t.equal(
    refused.length,
    0,
    `every one of the victim's requests was served (refused: ${refused.map((s) => `${s.status}@${s.at}ms`).join(' ')})`,
  );
});

t.test('a hung upstream two accounts wait on is ejected for everyone', async (t) => {
  const sim = await startSim(t);
  const hung = await startSteeredFront(t, sim, { 'x-sim-headers-delay-ms': '600000' });
  const gw = await startGateway(t, {
    upstreamUrl: sim.url,
    config: {
      upstream: { headers_timeout_ms: 300, eject_after_failures: 2, eject_seconds: 60 },
      models: [simSmallModel('solo', [hung])],
    },
  });
  const { key: x } = await gw.createKey({ account: 'lg-hung-x', env: 'live' });
  const { key: y } = await gw.createKey({ account: 'lg-hung-y', env: 'live' });
  await gw.grant('lg-hung-x', 1_000_000);
  await gw.grant('lg-hung-y', 1_000_000);
  const send = async (key: string) => {
    const res = await postChat(gw, key, { model: 'solo', messages: USER, sim: { tokens: 3 } });
    await res.arrayBuffer();
    return res.status;
  };

  // x's two timeouts eject it for x; y's first request still goes there (it could be x's long answers).
  t.same([await send(x), await send(x)], [504, 504], "x's requests time out");
  t.equal(await send(y), 504, "y's first request waits on it too");
  // Two accounts saw it hang: ejected for everyone, one half-open trial a second (each waits its timeout).
  const seen = sim.requests.length;
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
  const trials = sim.requests.length - seen;
  t.ok(trials <= 4, `the hung upstream got one trial a second (${trials} in ${Date.now() - t0} ms)`);
  t.ok(statuses.filter((s) => s === 503).length >= 20, `both accounts refused at once (${statuses.join(',')})`);
  t.equal(statuses.filter((s) => s !== 503 && s !== 504).length, 0, 'nothing else');
});
