// Chat completions in the admin listener's Prometheus text (SPEC §7): tokens by model and kind, credit
// debited, upstream time to first byte, the gateway's own overhead, requests by route/model/status/env;
// and no key, key id, account or request id in any label.
import t from 'tap';
import { simPromptTokens } from '../../src/simulator/simulator.ts';
import { startGateway } from '../helpers/gateway.ts';
import { waitFor } from '../helpers/wait.ts';
import { SIM_SMALL, expectedCost, metricsText, postChat, sample, startSim, waitForDebit } from './chat-fixture.ts';

const ROUTE = '/v1/chat/completions';

t.test('chat metrics add up to what was served and billed', async (t) => {
  const sim = await startSim(t);
  const gw = await startGateway(t, { upstreamUrl: sim.url });
  const live = await gw.createKey({ account: 'acct-metrics-zq', env: 'live' });
  const test = await gw.createKey({ account: 'acct-metrics-tq', env: 'test' });
  const broke = await gw.createKey({ account: 'acct-metrics-broke', env: 'live' });
  await gw.grant('acct-metrics-zq', 1_000_000);

  const runs = [
    { content: 'x'.repeat(40), tokens: 7, stream: false },
    { content: 'y'.repeat(9), tokens: 30, stream: true },
    { content: 'z', tokens: 1, stream: true },
  ];
  let prompt = 0;
  let completion = 0;
  let cost = 0;
  const ids: string[] = [];
  for (const r of runs) {
    const body = { model: 'sim-small', messages: [{ role: 'user', content: r.content }], stream: r.stream, sim: { tokens: r.tokens } };
    const res = await postChat(gw, live.key, body);
    t.equal(res.status, 200);
    await res.arrayBuffer();
    ids.push(res.headers.get('x-request-id')!);
    await waitForDebit(gw, 'acct-metrics-zq', ids.at(-1)!);
    prompt += simPromptTokens(body);
    completion += r.tokens;
    cost += expectedCost(SIM_SMALL, simPromptTokens(body), r.tokens);
  }
  const extra = [
    await postChat(gw, test.key, { model: 'sim-free', messages: [{ role: 'user', content: 'free' }], sim: { tokens: 3 } }),
    await postChat(gw, broke.key, { model: 'sim-small', messages: [{ role: 'user', content: 'no money' }] }),
    await postChat(gw, live.key, { model: 'sim-small', messages: [] }),
  ];
  for (const r of extra) {
    await r.arrayBuffer();
    ids.push(r.headers.get('x-request-id')!);
  }

  // Request counters are written when the response closes and the handler has returned (after its billing).
  const m = await waitFor(
    async () => {
      const text = await metricsText(gw);
      return sample(text, 'tollgate_requests_total', { route: ROUTE }) >= 6 && text;
    },
    5000,
    'the last request counted',
  );

  t.equal(sample(m, 'tollgate_tokens_total', { model: 'sim-small', kind: 'prompt' }), prompt, 'prompt tokens');
  t.equal(sample(m, 'tollgate_tokens_total', { model: 'sim-small', kind: 'completion' }), completion, 'completion tokens');
  t.equal(
    sample(m, 'tollgate_tokens_total', { model: 'sim-small', kind: 'completion', source: 'upstream' }),
    completion,
    'all from upstream usage',
  );
  t.equal(sample(m, 'tollgate_tokens_total', { model: 'sim-free', kind: 'completion' }), 3, 'test keys count tokens too');
  t.equal(sample(m, 'tollgate_credit_debited_micros_total', { model: 'sim-small' }), cost, 'credit debited = Σ exact costs');
  t.equal(sample(m, 'tollgate_credit_debited_micros_total', { model: 'sim-free' }), 0, 'test keys debit nothing');
  t.equal(sample(m, 'tollgate_upstream_ttfb_seconds_count', { model: 'sim-small' }), 3, 'one TTFB per answered sim-small request');
  t.ok(sample(m, 'tollgate_upstream_ttfb_seconds_sum', { model: 'sim-small' }) > 0);
  t.equal(sample(m, 'tollgate_gateway_overhead_seconds_count', { route: ROUTE }), 4, 'overhead observed for each proxied request');
  t.ok(sample(m, 'tollgate_gateway_overhead_seconds_sum', { route: ROUTE }) > 0);
  t.equal(sample(m, 'tollgate_requests_total', { route: ROUTE, model: 'sim-small', status: '200', env: 'live' }), 3);
  t.equal(sample(m, 'tollgate_requests_total', { route: ROUTE, model: 'sim-free', status: '200', env: 'test' }), 1);
  t.equal(sample(m, 'tollgate_requests_total', { route: ROUTE, model: 'sim-small', status: '402', env: 'live' }), 1);
  t.equal(sample(m, 'tollgate_requests_total', { route: ROUTE, status: '422', env: 'live' }), 1);

  // No identifying value in any label.
  const secrets = [
    live.key,
    test.key,
    broke.key,
    live.id,
    test.id,
    broke.id,
    'acct-metrics-zq',
    'acct-metrics-tq',
    'acct-metrics-broke',
    ...ids,
  ];
  const labelled = m.split('\n').filter((l) => !l.startsWith('#') && l.includes('{'));
  t.ok(labelled.length > 10);
  for (const s of secrets)
    t.notOk(
      labelled.some((l) => l.includes(s)),
      `${s.slice(0, 12)}… appears in no label`,
    );
  t.notMatch(m, /req_[1-9A-HJ-NP-Za-km-z]{22}/, 'no request id');
  t.notMatch(m, /svc-(live|test)-/, 'no key');
  t.notMatch(m, /key_[1-9A-HJ-NP-Za-km-z]{16}/, 'no key id');
});

t.test('upstream errors by upstream and reason are bounded labels (host:port, reason)', async (t) => {
  const sim = await startSim(t);
  const gw = await startGateway(t, { upstreamUrl: sim.url });
  const { key } = await gw.createKey({ account: 'acct-metrics-err', env: 'test' });
  for (const status of ['503', '503', '429']) {
    const res = await postChat(gw, key, { model: 'sim-small', messages: [{ role: 'user', content: 'x' }] }, { 'x-sim-status': status });
    t.equal(res.status, 502);
    await res.arrayBuffer();
  }
  const m = await metricsText(gw);
  const host = new URL(sim.url).host;
  t.equal(sample(m, 'tollgate_upstream_errors_total', { upstream: host, reason: 'status_503' }), 2);
  t.equal(sample(m, 'tollgate_upstream_errors_total', { upstream: host, reason: 'status_429' }), 1);
  t.notMatch(m, 'upstream-secret', 'the upstream credential appears nowhere');
});

t.test('one log line per chat request with tokens, cost, upstream and timings; no key material', async (t) => {
  const sim = await startSim(t);
  const gw = await startGateway(t, { upstreamUrl: sim.url });
  const { key, id } = await gw.createKey({ account: 'acct-log', env: 'live' });
  await gw.grant('acct-log', 1_000_000);
  const body = { model: 'sim-small', messages: [{ role: 'user', content: 'log me please' }], stream: true, sim: { tokens: 11 } };
  const res = await postChat(gw, key, body);
  await res.arrayBuffer();
  const rid = res.headers.get('x-request-id')!;
  await waitForDebit(gw, 'acct-log', rid);
  const lines = gw.logs.map((l) => JSON.parse(l)).filter((l) => l.request_id === rid);
  t.equal(lines.length, 1, 'exactly one line for the request');
  const prompt = simPromptTokens(body);
  t.match(lines[0], {
    request_id: rid,
    key_id: id,
    account: 'acct-log',
    model: 'sim-small',
    status: 200,
    route: ROUTE,
    prompt_tokens: prompt,
    completion_tokens: 11,
    usage_source: 'upstream',
    cost_micros: expectedCost(SIM_SMALL, prompt, 11),
    upstream: new URL(sim.url).host,
    duration_ms: Number,
    overhead_us: Number,
  });
  t.notOk(
    gw.logs.some((l) => l.includes(key) || l.includes(key.slice(9))),
    'the key appears in no log line',
  );
  t.notOk(
    gw.logs.some((l) => l.includes('upstream-secret')),
    'nor the upstream credential',
  );
});

t.test('in-flight stream gauge returns to 0 after complete, cut and abandoned streams', async (t) => {
  const sim = await startSim(t);
  const gw = await startGateway(t, { upstreamUrl: sim.url });
  const { key } = await gw.createKey({ account: 'acct-gauge', env: 'test' });
  const msg = [{ role: 'user', content: 'x' }];
  await (await postChat(gw, key, { model: 'sim-small', messages: msg, stream: true })).arrayBuffer();
  await (await postChat(gw, key, { model: 'sim-small', messages: msg, stream: true, sim: { cut_after: 2 } })).arrayBuffer();
  const slow = await postChat(gw, key, { model: 'sim-small', messages: msg, stream: true, sim: { tokens: 1000, delay_ms: 10 } });
  const reader = slow.body!.getReader();
  await reader.read();
  t.equal(sample(await metricsText(gw), 'tollgate_in_flight_streams'), 1, 'one stream open');
  await reader.cancel();
  await sim.waitFor((r) => r.aborted, 2000);
  t.ok(
    await waitFor(async () => sample(await metricsText(gw), 'tollgate_in_flight_streams') === 0, 5000, 'the stream to close'),
    'no stream open once the client left',
  );
});
