// Upstream failures before the first byte (SPEC §1.2, §2a): retried on the model's next upstream for
// connect errors, timeouts before headers, 429, 502, 503 and 504; a 500 is not retried; 4xx pass
// through unchanged; when every upstream fails, 502/503/504 by cause. Passive health ejects an upstream
// after eject_after_failures failures. Every live request that took a hold is settled.
import t from 'tap';
import { simCompletionText, simPromptTokens } from '../../src/simulator/simulator.ts';
import { errorBody } from '../../src/simulator/output.ts';
import { freePort } from '../helpers/ports.ts';
import { startGateway } from '../helpers/gateway.ts';
import {
  SIM_SMALL,
  accountVsLedger,
  expectedCost,
  hostOf,
  metricsText,
  postChat,
  sample,
  sdk,
  simSmallModel,
  startSim,
  startSteeredFront,
  waitForDebit,
} from './chat-fixture.ts';

const USER = [{ role: 'user', content: 'tell me something' }];

t.test('a refused first upstream (dead port, or a socket closed without an answer): served by the next', async (t) => {
  const good = await startSim(t);
  const bad = await startSim(t);
  const dead = `http://127.0.0.1:${await freePort()}/v1`;
  const refusing = await startSteeredFront(t, bad, { 'x-sim-refuse': 'true' });
  const gw = await startGateway(t, {
    upstreamUrl: good.url,
    config: { models: [simSmallModel('m-dead', [dead, good.url]), simSmallModel('m-refuse', [refusing, good.url])] },
  });
  const { key } = await gw.createKey({ account: 'fo-a', env: 'live' });
  await gw.grant('fo-a', 1_000_000);
  for (const name of ['m-dead', 'm-refuse']) {
    for (let i = 0; i < 3; i++) {
      const res = await postChat(gw, key, { model: name, messages: USER, sim: { tokens: 5 } });
      t.equal(res.status, 200, `${name} #${i}`);
      const body: any = await res.json();
      t.equal(body.choices[0].message.content, simCompletionText(5));
      const e = await waitForDebit(gw, 'fo-a', res.headers.get('x-request-id')!);
      t.match(
        e,
        { amount_micros: -expectedCost(SIM_SMALL, simPromptTokens({ messages: USER }), 5), usage_source: 'upstream' },
        'billed once, from the answering upstream',
      );
    }
  }
  t.equal(good.requests.length, 6, 'every request answered by the live upstream');
  const m = await metricsText(gw);
  t.ok(sample(m, 'tollgate_upstream_errors_total', { upstream: hostOf(dead), reason: 'econnrefused' }) >= 1, 'the dead upstream was tried');
  t.ok(bad.requests.length >= 1, 'the refusing upstream was tried');
  t.ok(sample(m, 'tollgate_upstream_errors_total', { upstream: hostOf(refusing) }) >= 1, 'and its failure counted');
  const s = await accountVsLedger(gw, 'fo-a');
  t.equal(s.balance, s.sum);
});

t.test('first upstream answers 503, 429 or 502 before any byte: retried on the next, the client never sees it', async (t) => {
  const good = await startSim(t);
  const bad = await startSim(t);
  const fronts: Record<number, string> = {};
  for (const s of [503, 429, 502, 504]) fronts[s] = await startSteeredFront(t, bad, { 'x-sim-status': String(s) });
  const gw = await startGateway(t, {
    upstreamUrl: good.url,
    config: { models: Object.entries(fronts).map(([s, url]) => simSmallModel(`m-${s}`, [url, good.url])) },
  });
  const { key } = await gw.createKey({ account: 'fo-b', env: 'live' });
  await gw.grant('fo-b', 1_000_000);
  const client = sdk(gw, key);
  for (const status of Object.keys(fronts)) {
    for (let i = 0; i < 2; i++) {
      const stream = await client.chat.completions.create(
        { model: `m-${status}`, messages: [{ role: 'user', content: 'go' }], stream: true },
        { headers: { 'x-sim-tokens': '6' } },
      );
      let text = '';
      for await (const ch of stream) text += ch.choices[0]?.delta.content ?? '';
      t.equal(text, simCompletionText(6), `m-${status} #${i} streamed from the good upstream`);
    }
    const m = await metricsText(gw);
    t.ok(
      sample(m, 'tollgate_upstream_errors_total', { upstream: hostOf(fronts[Number(status)]!), reason: `status_${status}` }) >= 1,
      `${status} counted as an upstream error`,
    );
  }
  t.equal(good.requests.length, 8);
  t.ok(bad.requests.length >= 4, 'each misbehaving upstream was tried');
  // Each stream is settled after its last byte: wait for the eighth debit (bounded), then compare.
  for (const until = Date.now() + 3000; Date.now() < until; await new Promise((r) => setTimeout(r, 20))) {
    if ((await accountVsLedger(gw, 'fo-b')).entries.filter((e) => e.kind === 'debit').length >= 8) break;
  }
  const s = await accountVsLedger(gw, 'fo-b');
  t.equal(s.entries.filter((e) => e.kind === 'debit').length, 8, 'one debit per client request, none per attempt');
  t.equal(s.balance, s.sum);
  t.equal(s.held, 0);
});

t.test('an upstream 500 is not retried: the client gets 502 upstream_error, one attempt, settled at 0', async (t) => {
  const a = await startSim(t);
  const b = await startSim(t);
  const gw = await startGateway(t, { upstreamUrl: a.url, config: { models: [simSmallModel('m', [a.url, b.url])] } });
  const { key } = await gw.createKey({ account: 'fo-c', env: 'live' });
  await gw.grant('fo-c', 1_000_000);
  for (const stream of [false, true]) {
    const res = await postChat(gw, key, { model: 'm', messages: USER, stream }, { 'x-sim-status': '500' });
    t.equal(res.status, 502, `stream ${stream}`);
    const body: any = await res.json();
    t.same(Object.keys(body.error).sort(), ['code', 'message', 'param', 'type']);
    t.match(body, { error: { code: 'upstream_error', type: 'upstream_error', param: null } });
    t.notMatch(JSON.stringify(body), 'simulated', 'the upstream body is not relayed');
    const e = await waitForDebit(gw, 'fo-c', res.headers.get('x-request-id')!);
    t.match(e, { amount_micros: 0 });
  }
  t.equal(a.requests.length + b.requests.length, 2, 'exactly one attempt per request');
  const s = await accountVsLedger(gw, 'fo-c');
  t.equal(s.balance, 1_000_000);
  t.equal(s.held, 0);
});

t.test('every upstream refused: 503 upstream_unavailable (SDK and fetch), hold released', async (t) => {
  const d1 = `http://127.0.0.1:${await freePort()}/v1`;
  const d2 = `http://127.0.0.1:${await freePort()}/v1`;
  const gw = await startGateway(t, { config: { models: [simSmallModel('m', [d1, d2])] } });
  const { key } = await gw.createKey({ account: 'fo-d', env: 'live' });
  await gw.grant('fo-d', 1_000_000);
  const res = await postChat(gw, key, { model: 'm', messages: USER });
  t.equal(res.status, 503);
  t.match(await res.json(), { error: { code: 'upstream_unavailable', type: 'upstream_error', param: null } });
  const err = await sdk(gw, key)
    .chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'x' }], stream: true })
    .catch((e: unknown) => e);
  t.match(err, { status: 503, code: 'upstream_unavailable' });
  const m = await metricsText(gw);
  t.equal(
    sample(m, 'tollgate_upstream_errors_total', { upstream: hostOf(d1) }) +
      sample(m, 'tollgate_upstream_errors_total', { upstream: hostOf(d2) }),
    4,
    'both tried, twice',
  );
  await waitForDebit(gw, 'fo-d', res.headers.get('x-request-id')!);
  const s = await accountVsLedger(gw, 'fo-d');
  t.equal(s.balance, 1_000_000);
  t.equal(s.held, 0);
});

t.test('every upstream answers 503 (or 429): 502 upstream_error after trying each once', async (t) => {
  const a = await startSim(t);
  const b = await startSim(t);
  const gw = await startGateway(t, { upstreamUrl: a.url, config: { models: [simSmallModel('m', [a.url, b.url])] } });
  const { key } = await gw.createKey({ account: 'fo-e', env: 'test' });
  for (const status of ['503', '429']) {
    a.clear();
    b.clear();
    const res = await postChat(gw, key, { model: 'm', messages: USER }, { 'x-sim-status': status });
    t.equal(res.status, 502, status);
    t.match(await res.json(), { error: { code: 'upstream_error' } });
    t.equal(a.requests.length, 1, `${status}: first upstream tried once`);
    t.equal(b.requests.length, 1, `${status}: second upstream tried once`);
  }
});

t.test('every upstream slower than headers_timeout_ms: 504 upstream_timeout; the upstream requests are aborted', async (t) => {
  const a = await startSim(t);
  const b = await startSim(t);
  const gw = await startGateway(t, {
    upstreamUrl: a.url,
    config: { upstream: { headers_timeout_ms: 150 }, models: [simSmallModel('m', [a.url, b.url])] },
  });
  const { key } = await gw.createKey({ account: 'fo-f', env: 'live' });
  await gw.grant('fo-f', 1_000_000);
  const res = await postChat(gw, key, { model: 'm', messages: USER, stream: true, sim: { headers_delay_ms: 3000 } });
  t.equal(res.status, 504);
  t.match(await res.json(), { error: { code: 'upstream_timeout', type: 'upstream_error', param: null } });
  t.equal(a.requests.length + b.requests.length, 2, 'both upstreams tried');
  await a.waitFor((r) => r.aborted, 1000);
  await b.waitFor((r) => r.aborted, 1000);
  t.pass('both attempts aborted by the gateway');
  const m = await metricsText(gw);
  t.equal(sample(m, 'tollgate_upstream_errors_total', { reason: 'headers_timeout' }), 2);
  const e = await waitForDebit(gw, 'fo-f', res.headers.get('x-request-id')!);
  t.match(e, { amount_micros: 0 });
});

t.test('one upstream times out and the other is refused: 504 every time, whatever the order tried', async (t) => {
  const slow = await startSim(t);
  const dead = `http://127.0.0.1:${await freePort()}/v1`;
  // eject_after_failures high so both stay in rotation for every request.
  const gw = await startGateway(t, {
    upstreamUrl: slow.url,
    config: { upstream: { headers_timeout_ms: 150, eject_after_failures: 100 }, models: [simSmallModel('m', [dead, slow.url])] },
  });
  const { key } = await gw.createKey({ account: 'fo-g', env: 'test' });
  const statuses: number[] = [];
  for (let i = 0; i < 4; i++) {
    const res = await postChat(gw, key, { model: 'm', messages: USER, sim: { headers_delay_ms: 3000 } });
    statuses.push(res.status);
    await res.arrayBuffer();
  }
  t.equal(slow.requests.length, 4, 'the slow upstream was tried every time');
  t.same(
    statuses,
    [504, 504, 504, 504],
    'a timeout before headers is 504 (SPEC §2a), not 502 when the refused upstream happened to be tried last',
  );
});

t.test('an upstream 400 passes through unchanged (status and body), is not retried, settles at 0', async (t) => {
  const a = await startSim(t);
  const b = await startSim(t);
  const gw = await startGateway(t, { upstreamUrl: a.url, config: { models: [simSmallModel('m', [a.url, b.url])] } });
  const { key } = await gw.createKey({ account: 'fo-h', env: 'live' });
  await gw.grant('fo-h', 1_000_000);
  for (const [status, stream] of [
    [400, false],
    [400, true],
    [404, false],
    [413, true],
  ] as const) {
    const res = await postChat(gw, key, { model: 'm', messages: USER, stream }, { 'x-sim-status': String(status) });
    t.equal(res.status, status, `${status} stream ${stream}`);
    t.match(res.headers.get('content-type'), /^application\/json/);
    t.equal(await res.text(), errorBody(status, `simulated upstream error ${status}`), 'the body byte for byte');
    const e = await waitForDebit(gw, 'fo-h', res.headers.get('x-request-id')!);
    t.match(e, { amount_micros: 0, prompt_tokens: 0, completion_tokens: 0 });
  }
  t.equal(a.requests.length + b.requests.length, 4, 'never retried');
  const err = await sdk(gw, key)
    .chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'x' }] }, { headers: { 'x-sim-status': '400' } })
    .catch((e: unknown) => e);
  t.match(err, { status: 400, code: 'sim_400', message: /simulated upstream error 400/ }, 'the SDK reads the upstream error');
  const s = await accountVsLedger(gw, 'fo-h');
  t.equal(s.balance, 1_000_000);
});

t.test('ejection: after eject_after_failures (2) failures the bad upstream is no longer tried', async (t) => {
  const good = await startSim(t);
  const bad = await startSim(t);
  const dead = `http://127.0.0.1:${await freePort()}/v1`;
  const failing = await startSteeredFront(t, bad, { 'x-sim-status': '503' });
  const gw = await startGateway(t, {
    upstreamUrl: good.url,
    config: {
      upstream: { eject_after_failures: 2, eject_seconds: 60 },
      models: [simSmallModel('m-dead', [dead, good.url]), simSmallModel('m-503', [failing, good.url])],
    },
  });
  const { key } = await gw.createKey({ account: 'fo-i', env: 'test' });
  const errorsOf = async (url: string) => sample(await metricsText(gw), 'tollgate_upstream_errors_total', { upstream: hostOf(url) });
  for (const [name, url] of [
    ['m-dead', dead],
    ['m-503', failing],
  ] as const) {
    // Until the second failure (the pick order rotates, so it may take a few requests).
    let sent = 0;
    while ((await errorsOf(url)) < 2 && sent < 12) {
      const res = await postChat(gw, key, { model: name, messages: USER });
      t.equal(res.status, 200);
      await res.arrayBuffer();
      sent++;
    }
    t.equal(await errorsOf(url), 2, `${name}: two failures recorded`);
    const badBefore = bad.requests.length;
    for (let i = 0; i < 6; i++) {
      const res = await postChat(gw, key, { model: name, messages: USER });
      t.equal(res.status, 200);
      await res.arrayBuffer();
    }
    t.equal(await errorsOf(url), 2, `${name}: no more failures once ejected`);
    t.equal(bad.requests.length, badBefore, `${name}: the ejected upstream receives nothing`);
  }
  t.equal(bad.requests.length, 2, 'the 503 upstream got exactly the two requests that ejected it');
});

t.test('total_timeout_ms bounds the whole request, retries included: no next upstream once it has passed', async (t) => {
  const a = await startSim(t);
  const b = await startSim(t);
  const gw = await startGateway(t, {
    upstreamUrl: a.url,
    config: { upstream: { total_timeout_ms: 300, headers_timeout_ms: 5000 }, models: [simSmallModel('m', [a.url, b.url])] },
  });
  const { key } = await gw.createKey({ account: 'fo-j', env: 'test' });
  // Each upstream answers after 1.5 s, well past the 300 ms total: the request must end as a timeout.
  const res = await postChat(gw, key, { model: 'm', messages: USER, sim: { headers_delay_ms: 1500 } });
  const body: any = await res.json();
  t.equal(res.status, 504, 'the total deadline ends the request');
  t.match(body, { error: { code: 'upstream_timeout' } });
  t.equal(a.requests.length + b.requests.length, 1, 'no upstream is tried after the total deadline');
});
