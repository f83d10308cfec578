// POST /v1/responses through the official openai SDK and raw HTTP (issue 19): exact debits from
// response.usage (input_tokens / output_tokens) plain and streamed, max_output_tokens sizing the hold and
// clamped to the model's cap, client abort and upstream cut billing what was produced (the cut ending
// with the Responses error event the SDK raises), failover before the first byte, 402 / 429 / 404.
import t, { type Test } from 'tap';
import OpenAI from 'openai';
import { simCompletionText } from '../../src/simulator/simulator.ts';
import { simResponsesPromptTokens } from '../../src/simulator/responses.ts';
import { createTokenizer, CHAT_OVERHEAD } from '../../src/meter/tokenizer.ts';
import { estimateResponsesPrompt } from '../../src/routes/responses.ts';
import { startGateway, type TestGateway } from '../helpers/gateway.ts';
import { startRedis } from '../helpers/redis.ts';
import {
  SIM_SMALL,
  expectedCost,
  sdk,
  startFixedUpstream,
  startSim,
  startSteeredFront,
  twoUpstreamGateway,
  waitForDebit,
  checkBooks,
} from './chat-fixture.ts';

const tokenizer = createTokenizer();
await tokenizer.load();

/** What the gateway's fallback counts for a plain string input (routes/responses.ts countResponsesPrompt). */
const fallbackPrompt = (input: string) => CHAT_OVERHEAD.perRequest + CHAT_OVERHEAD.perMessage + tokenizer.countText(input);

function postResponses(gw: TestGateway, key: string, body: unknown, headers: Record<string, string> = {}): Promise<Response> {
  return fetch(`${gw.url}/v1/responses`, {
    method: 'POST',
    headers: { ...gw.auth(key), 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
}

const redis = await startRedis(t);
const stores: [string, string | undefined][] = [
  ['embedded store', undefined],
  ...(redis ? [['redis', redis.url] as [string, string]] : []),
];

for (const [kind, redisUrl] of stores) {
  t.test(kind, async (t) => {
    const start = (t: Test, upstreamUrl: string) => startGateway(t, { upstreamUrl, ...(redisUrl !== undefined && { redisUrl }) });

    t.test('responses.create (plain): output_text, usage, and the exact debit; max_output_tokens sizes the hold', async (t) => {
      const sim = await startSim(t);
      const gw = await start(t, sim.url);
      const { key, id: keyId } = await gw.createKey({ account: 'resp-a', env: 'live' });
      await gw.grant('resp-a', 1_000_000);
      const client = sdk(gw, key);
      for (const [tokens, max] of [
        [7, 20],
        [30, 12],
      ] as const) {
        const body = { model: 'sim-small', input: 'Tell me about lighthouses, briefly.', max_output_tokens: max };
        const { data: response, response: raw } = await client.responses
          .create(body, { headers: { 'x-sim-tokens': String(tokens) } })
          .withResponse();
        const produced = Math.min(tokens, max);
        t.equal(response.output_text, simCompletionText(produced), 'output_text is the generated text');
        const prompt = simResponsesPromptTokens(body);
        t.match(response.usage, { input_tokens: prompt, output_tokens: produced });
        t.equal(response.status, produced < tokens ? 'incomplete' : 'completed');
        const e = await waitForDebit(gw, 'resp-a', raw.headers.get('x-request-id')!);
        t.match(e, {
          key_id: keyId,
          model: 'sim-small',
          prompt_tokens: prompt,
          completion_tokens: produced,
          usage_source: 'upstream',
          amount_micros: -expectedCost(SIM_SMALL, prompt, produced),
          hold_micros: expectedCost(SIM_SMALL, estimateResponsesPrompt(body), max),
        });
        t.equal(sim.requests.at(-1)!.path, '/v1/responses');
        t.match(sim.requests.at(-1)!.body, { model: 'sim/small-1', max_output_tokens: max }, 'model rewritten, cap sent');
      }
      await checkBooks(t, gw, 'resp-a');
    });

    t.test('responses.create (stream: true): typed events, usage from response.completed, exact debit', async (t) => {
      const sim = await startSim(t);
      const gw = await start(t, sim.url);
      const { key } = await gw.createKey({ account: 'resp-b', env: 'live' });
      await gw.grant('resp-b', 1_000_000);
      const client = sdk(gw, key);
      const body = { model: 'sim-small', input: [{ role: 'user' as const, content: 'Stream me twelve tokens.' }], stream: true as const };
      const { data: stream, response: raw } = await client.responses.create(body, { headers: { 'x-sim-tokens': '12' } }).withResponse();
      const types: string[] = [];
      let text = '';
      let usage: OpenAI.Responses.ResponseUsage | null | undefined;
      for await (const ev of stream) {
        types.push(ev.type);
        if (ev.type === 'response.output_text.delta') text += ev.delta;
        if (ev.type === 'response.completed') usage = ev.response.usage;
      }
      t.equal(types[0], 'response.created');
      t.equal(types.at(-1), 'response.completed');
      t.equal(types.filter((x) => x === 'response.output_text.delta').length, 12);
      t.equal(text, simCompletionText(12));
      const prompt = simResponsesPromptTokens(body);
      t.match(usage, { input_tokens: prompt, output_tokens: 12 });
      const e = await waitForDebit(gw, 'resp-b', raw.headers.get('x-request-id')!);
      t.match(e, {
        prompt_tokens: prompt,
        completion_tokens: 12,
        usage_source: 'upstream',
        amount_micros: -expectedCost(SIM_SMALL, prompt, 12),
      });

      // The SDK's stream helper assembles the final response, output_text included.
      const helper = client.responses.stream({ model: 'sim-small', input: 'again' }, { headers: { 'x-sim-tokens': '5' } });
      const final = await helper.finalResponse();
      t.equal(final.output_text, simCompletionText(5));
      t.match(final.usage, { input_tokens: simResponsesPromptTokens({ input: 'again' }), output_tokens: 5 });
      await checkBooks(t, gw, 'resp-b');
    });
  });
}

t.test('max_output_tokens above the model cap is clamped (not refused); absent → the cap', async (t) => {
  const sim = await startSim(t);
  const gw = await startGateway(t, { upstreamUrl: sim.url });
  const { key } = await gw.createKey({ account: 'resp-c', env: 'live' });
  await gw.grant('resp-c', 1_000_000);
  for (const [asked, sent] of [
    [100_000, 256],
    [undefined, 256],
  ] as const) {
    const body = { model: 'sim-small', input: 'hi', ...(asked !== undefined && { max_output_tokens: asked }) };
    const res = await postResponses(gw, key, body, { 'x-sim-tokens': '3' });
    t.equal(res.status, 200);
    await res.text();
    t.equal((sim.requests.at(-1)!.body as { max_output_tokens: number }).max_output_tokens, sent);
    const e = await waitForDebit(gw, 'resp-c', res.headers.get('x-request-id')!);
    t.equal(e.hold_micros, expectedCost(SIM_SMALL, estimateResponsesPrompt(body), sent));
  }
});

t.test('previous_response_id and store pass through untouched', async (t) => {
  const sim = await startSim(t);
  const gw = await startGateway(t, { upstreamUrl: sim.url });
  const { key } = await gw.createKey({ account: 'resp-d', env: 'test' });
  // The simulator keeps stored responses like a stateful upstream: the previous one must exist there.
  const first = (await (await postResponses(gw, key, { model: 'sim-small', input: 'first' })).json()) as { id: string };
  const res = await postResponses(gw, key, { model: 'sim-small', input: 'next', previous_response_id: first.id, store: true });
  t.equal(res.status, 200);
  t.match(await res.json(), { previous_response_id: first.id, store: true });
  t.match(sim.requests.at(-1)!.body, { previous_response_id: first.id, store: true });
  const unknown = await postResponses(gw, key, { model: 'sim-small', input: 'next', previous_response_id: 'resp_123' });
  t.equal(unknown.status, 404, 'an id the upstream does not know: its 404 passes through');
  await unknown.text();
});

t.test('usage missing: the tokenizer counts the input and the output text (estimated)', async (t) => {
  const sim = await startSim(t);
  const gw = await startGateway(t, { upstreamUrl: sim.url });
  const { key } = await gw.createKey({ account: 'resp-e', env: 'live' });
  await gw.grant('resp-e', 1_000_000);
  const input = 'count me without usage';
  const res = await postResponses(gw, key, { model: 'sim-small', input }, { 'x-sim-tokens': '9', 'x-sim-usage': 'absent' });
  t.equal(res.status, 200);
  await res.text();
  const e = await waitForDebit(gw, 'resp-e', res.headers.get('x-request-id')!);
  const completion = tokenizer.countText(simCompletionText(9));
  t.match(e, { usage_source: 'estimated', prompt_tokens: fallbackPrompt(input), completion_tokens: completion });
});

t.test('client abort mid-stream bills the produced tokens; the upstream is aborted', async (t) => {
  const sim = await startSim(t);
  const gw = await startGateway(t, { upstreamUrl: sim.url });
  const { key } = await gw.createKey({ account: 'resp-f', env: 'live' });
  await gw.grant('resp-f', 1_000_000);
  const input = 'stream slowly please';
  const res = await postResponses(gw, key, { model: 'sim-small', input, stream: true }, { 'x-sim-tokens': '200', 'x-sim-delay-ms': '10' });
  const rid = res.headers.get('x-request-id')!;
  const reader = res.body!.getReader();
  let got = '';
  while ((got.match(/"delta":"tok\d+ "/g) ?? []).length < 5) got += new TextDecoder().decode((await reader.read()).value);
  await reader.cancel();
  const rec = await sim.waitFor((r) => r.aborted, 2000);
  t.ok(rec.completionTokensSent < 200, 'generation stopped early');
  const e = await waitForDebit(gw, 'resp-f', rid);
  t.equal(e.usage_source, 'estimated');
  t.equal(e.prompt_tokens, fallbackPrompt(input));
  const seen = (got.match(/"delta":"tok\d+ "/g) ?? []).length;
  const possible = new Set<number>();
  for (let k = seen; k <= rec.completionTokensSent; k++) possible.add(tokenizer.countText(simCompletionText(k)));
  t.ok(
    possible.has(e.completion_tokens!),
    `completion ${e.completion_tokens} is what was produced (${seen}..${rec.completionTokensSent} tokens)`,
  );
  t.ok(e.completion_tokens! > 0, 'produced tokens are billed');
  await checkBooks(t, gw, 'resp-f');
});

t.test('upstream cut mid-stream: the Responses error event, no retry, the SDK raises an APIError, produced tokens billed', async (t) => {
  const {
    gw,
    key,
    sims: [a, b],
  } = await twoUpstreamGateway(t, 'resp-g');
  const input = 'a story';
  // 4 events before the first delta, then 5 deltas, then the socket closes.
  const res = await postResponses(gw, key, { model: 'm', input, stream: true }, { 'x-sim-tokens': '50', 'x-sim-cut-after': '9' });
  t.equal(res.status, 200);
  const raw = await res.text();
  const events = raw.split('\n\n').filter(Boolean);
  t.equal(events.length, 10, '9 events and the error event');
  t.equal(
    events.at(-1),
    `event: error\ndata: {"type":"error","code":"upstream_error","message":"The upstream stream failed before completing.","param":null}`,
  );
  t.equal(a.requests.length + b.requests.length, 1, 'never retried after the first byte');
  const e = await waitForDebit(gw, 'resp-g', res.headers.get('x-request-id')!);
  t.match(e, {
    usage_source: 'estimated',
    prompt_tokens: fallbackPrompt(input),
    completion_tokens: tokenizer.countText(simCompletionText(5)),
  });

  const stream = await sdk(gw, key).responses.create(
    { model: 'm', input, stream: true },
    { headers: { 'x-sim-tokens': '20', 'x-sim-cut-after': '7' } },
  );
  let text = '';
  const err = await (async () => {
    for await (const ev of stream) if (ev.type === 'response.output_text.delta') text += ev.delta;
  })().catch((e: unknown) => e);
  t.ok(err instanceof OpenAI.APIError, 'the SDK raises an APIError');
  t.match(err, { message: /upstream stream failed/ });
  t.equal(text, simCompletionText(3), 'the deltas before the cut were delivered');
  await checkBooks(t, gw, 'resp-g');
});

t.test('a stream whose upstream echoes 1.2 MB of instructions in one event completes, and is billed its usage', async (t) => {
  // OpenAI, vLLM and the simulator echo `instructions` in response.created and response.completed: an
  // event over 1 MiB for a request under max_body_bytes. Its non-streaming twin was always served.
  const sim = await startSim(t);
  const gw = await startGateway(t, { upstreamUrl: sim.url });
  const { key } = await gw.createKey({ account: 'resp-big', env: 'live' });
  await gw.grant('resp-big', 1_000_000_000);
  const body = { model: 'sim-small', instructions: 'Be brief. '.repeat(120_000), input: 'hi', stream: true };
  const res = await postResponses(gw, key, body, { 'x-sim-tokens': '5' });
  t.equal(res.status, 200);
  const raw = await res.text();
  t.match(raw, /event: response\.completed\n/, 'the stream ends as the upstream sent it');
  t.notMatch(raw, /event: error/);
  const e = await waitForDebit(gw, 'resp-big', res.headers.get('x-request-id')!, 5000);
  const prompt = simResponsesPromptTokens(body);
  t.match(e, { usage_source: 'upstream', prompt_tokens: prompt, completion_tokens: 5, amount_micros: -expectedCost(SIM_SMALL, prompt, 5) });
});

t.test(
  'an event past the bound of its request (1 MiB + 2 × the request) is passed through, not held: the client gets it whole',
  async (t) => {
    // The hold bound follows the request: a small request cannot make the gateway hold a 3 MiB event. A
    // Responses event past it is relayed as it arrives instead (relay.ts MAX_PASSED_EVENT_BYTES), byte for byte.
    const event = (o: unknown) => `event: ${(o as { type: string }).type}\ndata: ${JSON.stringify(o)}\n\n`;
    const upstreamBody = event({
      type: 'response.created',
      response: { id: 'resp_1', instructions: 'x'.repeat(3 * 1024 * 1024), usage: null },
    });
    const front = await startFixedUpstream(t, 200, { 'content-type': 'text/event-stream' }, upstreamBody);
    const gw = await startGateway(t, { upstreamUrl: front.url });
    const { key } = await gw.createKey({ account: 'resp-huge', env: 'live' });
    await gw.grant('resp-huge', 1_000_000_000);
    const res = await postResponses(gw, key, { model: 'sim-small', input: 'hi', stream: true });
    t.equal(res.status, 200);
    t.ok((await res.text()) === upstreamBody, 'the upstream body, byte for byte, without an error event');
    t.match(await waitForDebit(gw, 'resp-huge', res.headers.get('x-request-id')!), { usage_source: 'estimated' });
  },
);

t.test('failover before the first byte: a 503 upstream is skipped', async (t) => {
  const sim = await startSim(t);
  const front = await startSteeredFront(t, sim, { 'x-sim-status': '503' });
  const gw = await startGateway(t, {
    upstreamUrl: sim.url,
    config: {
      models: [{ name: 'm', max_output_tokens: 64, price: { input: 1, output: 1 }, upstreams: [{ url: front }, { url: sim.url }] }],
    },
  });
  const { key } = await gw.createKey({ account: 'resp-h', env: 'test' });
  for (let i = 0; i < 4; i++) {
    const r = await sdk(gw, key).responses.create({ model: 'm', input: 'x' }, { headers: { 'x-sim-tokens': '2' } });
    t.equal(r.output_text, simCompletionText(2));
  }
  t.ok(
    sim.requests.some((r) => r.headers['x-sim-status'] === '503'),
    'the failing upstream was tried',
  );
});

t.test('402 before the upstream is contacted; 429 past the request limit; 404 for an unknown model', async (t) => {
  const sim = await startSim(t);
  const gw = await startGateway(t, { upstreamUrl: sim.url });
  const { key } = await gw.createKey({ account: 'resp-i', env: 'live' });
  await gw.grant('resp-i', 100); // far below cost(prompt, 256 output tokens)
  const poor = await postResponses(gw, key, { model: 'sim-small', input: 'expensive' });
  t.equal(poor.status, 402);
  t.match(await poor.json(), { error: { code: 'insufficient_credit' } });
  t.equal(sim.requests.length, 0, 'the upstream was never contacted');

  const unknown = await postResponses(gw, key, { model: 'nope', input: 'x' });
  t.equal(unknown.status, 404);
  t.match(await unknown.json(), { error: { code: 'model_not_found' } });

  const { key: limited } = await gw.createKey({ account: 'resp-i', env: 'test', rate_limits: { requests_per_minute: 1 } });
  t.equal((await postResponses(gw, limited, { model: 'sim-small', input: 'one' })).status, 200);
  const second = await postResponses(gw, limited, { model: 'sim-small', input: 'two' });
  t.equal(second.status, 429);
  t.match(await second.json(), { error: { code: 'rate_limit_exceeded' } });

  const bad = await postResponses(gw, key, { model: 'sim-small', input: 5, max_output_tokens: 0 });
  t.equal(bad.status, 422);
});
