// After the first byte reaches the client there is no retry (SPEC §1.2, §2a): a stream that breaks ends
// with one SSE error event and no [DONE], the SDK raises an APIError, and the ledger bills what the
// upstream produced (tokenizer-estimated when usage never arrived). A client that leaves aborts the
// upstream and is billed for what was produced.
import t from 'tap';
import OpenAI from 'openai';
import { simCompletionText, simPromptTokens } from '../../src/simulator/simulator.ts';
import { createTokenizer } from '../../src/meter/tokenizer.ts';
import { startGateway } from '../helpers/gateway.ts';
import {
  SIM_SMALL,
  accountVsLedger,
  expectedCost,
  postChat,
  sdk,
  sseData,
  startSim,
  twoUpstreamGateway,
  waitForDebit,
} from './chat-fixture.ts';

const tokenizer = createTokenizer();
await tokenizer.load();

const ERROR_EVENT = { error: { message: String, type: 'upstream_error', code: 'upstream_error', param: null } };

t.test(
  'cut after N chunks (raw SSE): N chunks, then the error event, no [DONE], one upstream request, partial tokens billed',
  async (t) => {
    const { gw, key, requests } = await twoUpstreamGateway(t, 'cut-a');
    const messages = [{ role: 'user', content: 'Write a long story about a lighthouse keeper.' }];
    for (const n of [1, 4, 9]) {
      const before = requests().length;
      const res = await postChat(gw, key, { model: 'm', messages, stream: true, sim: { tokens: 50, cut_after: n } });
      t.equal(res.status, 200, 'the stream had started');
      const raw = await res.text();
      const data = sseData(raw);
      t.equal(data.length, n + 1, `${n} chunks + the error event`);
      for (const d of data.slice(0, n)) t.match(JSON.parse(d), { object: 'chat.completion.chunk' });
      const last = JSON.parse(data.at(-1)!);
      t.match(last, ERROR_EVENT);
      t.same(Object.keys(last.error).sort(), ['code', 'message', 'param', 'type'], 'exactly the four fields');
      t.notMatch(raw, '[DONE]', 'no [DONE]');
      t.ok(raw.endsWith('\n\n'), 'the error event is complete');
      t.equal(requests().length - before, 1, 'never retried after the first byte');

      const produced = simCompletionText(n - 1); // chunk 0 is the role chunk
      const e = await waitForDebit(gw, 'cut-a', res.headers.get('x-request-id')!);
      const prompt = tokenizer.countPromptTokens(messages);
      const completion = tokenizer.countText(produced);
      t.match(
        e,
        {
          usage_source: 'estimated',
          prompt_tokens: prompt,
          completion_tokens: completion,
          amount_micros: -expectedCost(SIM_SMALL, prompt, completion),
        },
        `cut after ${n}`,
      );
    }
    const s = await accountVsLedger(gw, 'cut-a');
    t.equal(s.balance, s.sum);
    t.equal(s.held, 0);
  },
);

t.test('the OpenAI SDK raises an APIError for the error event, after the content that arrived', async (t) => {
  const { gw, key, requests } = await twoUpstreamGateway(t, 'cut-b');
  const stream = await sdk(gw, key).chat.completions.create(
    { model: 'm', messages: [{ role: 'user', content: 'go' }], stream: true },
    { headers: { 'x-sim-tokens': '20', 'x-sim-cut-after': '6' } },
  );
  let text = '';
  const err = await (async () => {
    for await (const ch of stream) text += ch.choices[0]?.delta.content ?? '';
  })().catch((e: unknown) => e);
  t.ok(err instanceof OpenAI.APIError, 'APIError');
  t.match(err, { code: 'upstream_error', type: 'upstream_error', message: /upstream/ });
  t.equal(text, simCompletionText(5), 'the chunks before the cut were delivered');
  t.equal(requests().length, 1);
});

t.test('a stream cut after its usage chunk (before [DONE]) is billed from that usage', async (t) => {
  const { gw, key } = await twoUpstreamGateway(t, 'cut-c');
  const messages = [{ role: 'user', content: 'twelve chars' }];
  // 3 tokens: role, 3 tokens, finish, usage = 6 chunks, all sent; then the socket closes without [DONE].
  const res = await postChat(gw, key, { model: 'm', messages, stream: true, sim: { tokens: 3, cut_after: 100 } });
  const data = sseData(await res.text());
  t.equal(data.length, 6, '5 chunks (the usage one dropped: not asked for) + the error event');
  t.match(JSON.parse(data.at(-1)!), ERROR_EVENT);
  t.notOk(data.includes('[DONE]'));
  const e = await waitForDebit(gw, 'cut-c', res.headers.get('x-request-id')!);
  const prompt = simPromptTokens({ messages });
  t.match(e, { usage_source: 'upstream', prompt_tokens: prompt, completion_tokens: 3, amount_micros: -expectedCost(SIM_SMALL, prompt, 3) });
});

t.test(
  'a non-streaming body cut mid-way: the client sees a broken response, the prompt and the text that arrived are billed (estimated)',
  async (t) => {
    const { gw, key, requests } = await twoUpstreamGateway(t, 'cut-d');
    const messages = [{ role: 'user', content: 'a question' }];
    const res = await postChat(gw, key, { model: 'm', messages, sim: { tokens: 40, cut_after: 1 } });
    t.equal(res.status, 200);
    const read = await res.text().then(
      () => 'complete',
      () => 'broken',
    );
    t.equal(read, 'broken', 'the body ends in a transport error, not a truncated document that looks whole');
    t.equal(requests().length, 1, 'not retried');
    const e = await waitForDebit(gw, 'cut-d', res.headers.get('x-request-id')!);
    t.match(e, { usage_source: 'estimated', prompt_tokens: tokenizer.countPromptTokens(messages) });
    // The simulator sends half of the body: a part of its content arrived, and is what is counted.
    const text = simCompletionText(40);
    const prefixes = new Set<number>();
    for (let k = 1; k <= text.length; k++) prefixes.add(tokenizer.countText(text.slice(0, k)));
    t.ok(
      e.completion_tokens! > 0 && prefixes.has(e.completion_tokens!),
      `${e.completion_tokens} completion tokens: a prefix of the content`,
    );
    t.equal(e.amount_micros, -expectedCost(SIM_SMALL, e.prompt_tokens!, e.completion_tokens!));
  },
);

t.test('an upstream idle longer than idle_timeout_ms mid-stream: error event, upstream aborted, nothing retried', async (t) => {
  const sim = await startSim(t);
  const gw = await startGateway(t, { upstreamUrl: sim.url, config: { upstream: { idle_timeout_ms: 200 } } });
  const { key } = await gw.createKey({ account: 'cut-f', env: 'live' });
  await gw.grant('cut-f', 1_000_000);
  const messages = [{ role: 'user', content: 'then stall' }];
  // The role chunk goes out at once, then the simulator waits 5 s before the first token.
  const res = await postChat(gw, key, { model: 'sim-small', messages, stream: true, sim: { tokens: 3, delay_ms: 5000 } });
  t.equal(res.status, 200);
  const data = sseData(await res.text());
  t.equal(data.length, 2, 'the role chunk, then the error event');
  t.match(JSON.parse(data[1]!), ERROR_EVENT);
  await sim.waitFor((r) => r.aborted, 2000);
  t.equal(sim.requests.length, 1);
  const e = await waitForDebit(gw, 'cut-f', res.headers.get('x-request-id')!);
  t.match(e, { usage_source: 'estimated', prompt_tokens: tokenizer.countPromptTokens(messages), completion_tokens: 0 });
});

t.test('client abort mid-stream: the upstream request is aborted and the produced tokens are billed (estimated)', async (t) => {
  const { gw, key, sims } = await twoUpstreamGateway(t, 'cut-e');
  const messages = [{ role: 'user', content: 'stream slowly' }];
  const res = await postChat(gw, key, { model: 'm', messages, stream: true, sim: { tokens: 500, delay_ms: 10 } });
  const rid = res.headers.get('x-request-id')!;
  const reader = res.body!.getReader();
  let got = '';
  while ((got.match(/tok\d+ /g) ?? []).length < 5) got += new TextDecoder().decode((await reader.read()).value);
  await reader.cancel();
  const rec = await Promise.any(sims.map((s) => s.waitFor((r) => r.aborted, 2000)));
  t.ok(rec.aborted, 'the simulator saw the gateway abort its request');
  t.ok(rec.completionTokensSent < 500, 'generation stopped early');
  const e = await waitForDebit(gw, 'cut-e', rid);
  t.equal(e.usage_source, 'estimated');
  t.equal(e.prompt_tokens, tokenizer.countPromptTokens(messages));
  // The gateway bills what it received: at least what the client saw, at most what the simulator wrote.
  const seen = (got.match(/tok\d+ /g) ?? []).length;
  const possible = new Set<number>();
  for (let k = seen; k <= rec.completionTokensSent; k++) possible.add(tokenizer.countText(simCompletionText(k)));
  t.ok(
    possible.has(e.completion_tokens!),
    `completion ${e.completion_tokens} within what was produced (${seen}..${rec.completionTokensSent} tokens)`,
  );
  const s = await accountVsLedger(gw, 'cut-e');
  t.equal(s.balance, s.sum);
  t.equal(s.held, 0);
});

t.test('client abort while a non-streaming completion is still generating: upstream aborted, settled at once', async (t) => {
  const sim = await startSim(t);
  const gw = await startGateway(t, { upstreamUrl: sim.url });
  const { key } = await gw.createKey({ account: 'cut-g', env: 'live' });
  await gw.grant('cut-g', 1_000_000);
  const ac = new AbortController();
  // A non-streaming answer comes after every token's delay: 200 × 25 ms = 5 s before headers.
  const pending = fetch(`${gw.url}/v1/chat/completions`, {
    method: 'POST',
    signal: ac.signal,
    headers: { ...gw.auth(key), 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'sim-small', messages: [{ role: 'user', content: 'slow' }], sim: { tokens: 200, delay_ms: 25 } }),
  }).catch((e: unknown) => e);
  await sim.waitFor(() => true);
  ac.abort();
  t.match(await pending, { name: 'AbortError' });
  const rec = await sim.waitFor((r) => r.aborted, 2000);
  t.notOk(rec.finished, 'the upstream was cut before it answered');
  // The edge logs the abandoned request with its id; its debit follows within a second.
  const line = gw.logs.map((l) => JSON.parse(l)).find((l) => l.route === '/v1/chat/completions' && l.aborted === true);
  t.ok(line);
  const e = await waitForDebit(gw, 'cut-g', line.request_id, 1000);
  t.match(e, { amount_micros: 0, completion_tokens: 0 }, 'nothing was produced, nothing is billed');
  const s = await accountVsLedger(gw, 'cut-g');
  t.equal(s.held, 0, 'the hold is released');
});
