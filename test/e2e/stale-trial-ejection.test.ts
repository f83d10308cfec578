// A review's reproduction (fixed): a request of another account sent to an upstream ejected for one account is marked a trial
// at its start; if it fails after a sibling request's answer already ended the ejection, it re-ejected the
// upstream at once (failed(): attempt.trial), although the upstream just answered and is off probation.
import t from 'tap';
import { setTimeout as sleep } from 'node:timers/promises';
import { startGateway } from '../helpers/gateway.ts';
import { waitFor } from '../helpers/wait.ts';
import { postChat, simSmallModel, startSim } from '../e2e/chat-fixture.ts';

const USER = [{ role: 'user', content: 'tell me something' }];

t.test('one ordinary failure of a request started during a per-account ejection re-ejects a healthy upstream', async (t) => {
  const sim = await startSim(t);
  const gw = await startGateway(t, {
    upstreamUrl: sim.url,
    config: { upstream: { eject_after_failures: 5, eject_seconds: 10 }, models: [simSmallModel('m', [sim.url])] },
  });
  for (const a of ['st-a', 'st-b']) await gw.grant(a, 1_000_000);
  const { key: a } = await gw.createKey({ account: 'st-a', env: 'live' });
  const { key: b } = await gw.createKey({ account: 'st-b', env: 'live' });
  const send = async (key: string, sim?: object) => {
    const r = await postChat(gw, key, { model: 'm', messages: USER, sim: { tokens: 3, ...sim } });
    await r.arrayBuffer();
    return r.status;
  };
  // A's 5 requests answered 500: the only upstream is ejected for A alone.
  for (let i = 0; i < 5; i++) t.equal(await send(a, { status: 500 }), 502);
  t.equal(await send(a, { status: 500 }), 502, "A's half-open trial fails: re-ejected for A");
  t.equal(await send(a), 503, 'ejected for A (no trial this second)');
  // B sends two at once: one answered at once (ends the ejection), one answered 500 300 ms later (B's own input).
  const [ok, bad] = await Promise.all([send(b), send(b, { status: 500, headers_delay_ms: 300 })]);
  t.same([ok, bad], [200, 502]);
  // One failure of a healthy upstream that just answered: 1 of 5 toward ejection, nobody refused.
  const statuses: number[] = [];
  for (let i = 0; i < 20; i++) {
    statuses.push(await send(b));
    await sleep(10);
  }
  t.same(
    statuses.filter((s) => s !== 200),
    [],
    `B's next 20 requests served (${statuses.join(',')})`,
  );
});
