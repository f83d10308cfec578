// Metering and credit of POST /v1/chat/completions (SPEC §1.2, §2a, §4): each live request debits
// exactly ceil(prompt × input + completion × output) micro-credits from the upstream's usage (0 is a
// real value, absent falls back to the tokenizer), writes one debit entry keyed by the response's
// x-request-id, and the balance equals the ledger sum after every test. Test keys never touch credit.
import t, { type Test } from 'tap';
import OpenAI from 'openai';
import { simCompletionText, simPromptTokens } from '../../src/simulator/simulator.ts';
import { createTokenizer } from '../../src/meter/tokenizer.ts';
import { estimatePromptTokens } from '../../src/credit/hold-estimate.ts';
import { startGateway } from '../helpers/gateway.ts';
import { startRedis } from '../helpers/redis.ts';
import {
  SIM_SMALL,
  accountVsLedger,
  expectedCost,
  ledger,
  postChat,
  sdk,
  startFixedUpstream,
  startSim,
  waitForDebit,
  checkBooks,
} from './chat-fixture.ts';

const tokenizer = createTokenizer();
await tokenizer.load();

/** `sim-small` hold for a raw-fetch body (SPEC §4: cost(prompt estimate, max output)). */
function expectedHold(body: { messages: unknown[]; max_tokens?: number; max_completion_tokens?: number }, raw: string): number {
  const maxOut = body.max_completion_tokens ?? body.max_tokens ?? 256;
  return expectedCost(SIM_SMALL, estimatePromptTokens(body, Buffer.byteLength(raw)), maxOut);
}

// The same suite on the embedded store and on real Redis (the Lua hold/settle path); null when no Redis.
const redis = await startRedis(t);
const stores: [string, string | undefined][] = [
  ['embedded store', undefined],
  ...(redis ? [['redis', redis.url] as [string, string]] : []),
];

for (const [kind, redisUrl] of stores) {
  const startGw = (t: Test, upstreamUrl: string) => startGateway(t, { upstreamUrl, ...(redisUrl !== undefined && { redisUrl }) });
  t.test(kind, async (t) => {
    t.test('non-streaming: debit = ceil(prompt × 1.5 + completion × 2.25) for several token counts, one entry per request', async (t) => {
      const sim = await startSim(t);
      const gw = await startGw(t, sim.url);
      const { key, id: keyId } = await gw.createKey({ account: 'bill-a', env: 'live' });
      await gw.grant('bill-a', 50_000);
      // Prompt lengths chosen so prompt × 1.5 is sometimes fractional, completions so × 2.25 has every quarter.
      const cases = [
        { content: 'a', tokens: 1 },
        { content: 'abcde', tokens: 2 },
        { content: 'x'.repeat(13), tokens: 3 },
        { content: 'y'.repeat(401), tokens: 0 },
        { content: 'z'.repeat(99), tokens: 255 },
        { content: 'w'.repeat(1234), tokens: 37 },
      ];
      let spent = 0;
      for (const c of cases) {
        const body = { model: 'sim-small', messages: [{ role: 'user', content: c.content }], sim: { tokens: c.tokens } };
        const raw = JSON.stringify(body);
        const res = await postChat(gw, key, raw);
        t.equal(res.status, 200);
        const json: any = await res.json();
        const prompt = simPromptTokens(body);
        t.same(json.usage, { prompt_tokens: prompt, completion_tokens: c.tokens, total_tokens: prompt + c.tokens });
        const rid = res.headers.get('x-request-id')!;
        const e = await waitForDebit(gw, 'bill-a', rid);
        const cost = expectedCost(SIM_SMALL, prompt, c.tokens);
        t.match(
          e,
          {
            kind: 'debit',
            amount_micros: -cost,
            request_id: rid,
            key_id: keyId,
            model: 'sim-small',
            prompt_tokens: prompt,
            completion_tokens: c.tokens,
            usage_source: 'upstream',
            hold_micros: expectedHold(body, raw),
          },
          `prompt ${prompt}, completion ${c.tokens} → ${cost}`,
        );
        t.ok(e.hold_micros! >= cost, 'the hold covered the cost');
        spent += cost;
      }
      const s = await accountVsLedger(gw, 'bill-a');
      t.equal(s.balance, 50_000 - spent);
      t.equal(s.entries.filter((e) => e.kind === 'debit').length, cases.length, 'one debit per request');
      await checkBooks(t, gw, 'bill-a');
    });

    t.test('streaming (SDK, with and without include_usage): the same exact debit from the usage chunk', async (t) => {
      const sim = await startSim(t);
      const gw = await startGw(t, sim.url);
      const { key, id: keyId } = await gw.createKey({ account: 'bill-b', env: 'live' });
      await gw.grant('bill-b', 100_000);
      const client = sdk(gw, key);
      for (const [tokens, includeUsage] of [
        [5, false],
        [5, true],
        [77, false],
        [200, true],
      ] as const) {
        const messages = [{ role: 'user' as const, content: 'q'.repeat(tokens * 3 + 1) }];
        const { data: stream, response } = await client.chat.completions
          .create(
            { model: 'sim-small', messages, stream: true, ...(includeUsage && { stream_options: { include_usage: true } }) },
            { headers: { 'x-sim-tokens': String(tokens) } },
          )
          .withResponse();
        let text = '';
        for await (const ch of stream) text += ch.choices[0]?.delta.content ?? '';
        t.equal(text, simCompletionText(tokens));
        const rid = response.headers.get('x-request-id')!;
        const prompt = simPromptTokens({ messages });
        const e = await waitForDebit(gw, 'bill-b', rid);
        t.match(
          e,
          {
            amount_micros: -expectedCost(SIM_SMALL, prompt, tokens),
            key_id: keyId,
            model: 'sim-small',
            prompt_tokens: prompt,
            completion_tokens: tokens,
            usage_source: 'upstream',
          },
          `${tokens} tokens, include_usage ${includeUsage}`,
        );
        t.ok(e.hold_micros! > 0);
      }
      await checkBooks(t, gw, 'bill-b');
    });

    t.test('usage reported as zero is real usage: source upstream, cost 0, entry still written', async (t) => {
      const sim = await startSim(t);
      const gw = await startGw(t, sim.url);
      const { key } = await gw.createKey({ account: 'bill-c', env: 'live' });
      await gw.grant('bill-c', 10_000);
      for (const stream of [false, true]) {
        const res = await postChat(gw, key, {
          model: 'sim-small',
          messages: [{ role: 'user', content: 'hello world' }],
          stream,
          sim: { usage: 'zero', tokens: 6 },
        });
        t.equal(res.status, 200);
        const text = await res.text();
        t.match(text, 'tok5', 'the text was produced');
        const e = await waitForDebit(gw, 'bill-c', res.headers.get('x-request-id')!);
        t.match(e, { amount_micros: 0, prompt_tokens: 0, completion_tokens: 0, usage_source: 'upstream' }, `stream ${stream}`);
        t.ok(e.hold_micros! > 0, 'the hold was recorded');
      }
      t.equal((await accountVsLedger(gw, 'bill-c')).balance, 10_000, 'nothing debited');
      await checkBooks(t, gw, 'bill-c');
    });

    t.test('usage absent: source estimated, tokens from the tokenizer over the messages and the produced text', async (t) => {
      const sim = await startSim(t);
      const gw = await startGw(t, sim.url);
      const { key } = await gw.createKey({ account: 'bill-d', env: 'live' });
      await gw.grant('bill-d', 100_000);
      const messages = [
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: 'Count to twelve for me, slowly and clearly.' },
      ];
      const prompt = tokenizer.countPromptTokens(messages);
      const completion = tokenizer.countText(simCompletionText(12));
      t.ok(completion > 0);
      for (const stream of [false, true]) {
        const res = await postChat(gw, key, { model: 'sim-small', messages, stream, sim: { usage: 'absent', tokens: 12 } });
        t.equal(res.status, 200);
        const text = await res.text();
        t.notMatch(text, '"usage"', 'the simulator reported no usage');
        const e = await waitForDebit(gw, 'bill-d', res.headers.get('x-request-id')!);
        t.match(
          e,
          {
            usage_source: 'estimated',
            prompt_tokens: prompt,
            completion_tokens: completion,
            amount_micros: -expectedCost(SIM_SMALL, prompt, completion),
          },
          `stream ${stream}`,
        );
      }
      await checkBooks(t, gw, 'bill-d');
    });

    t.test('a free model still writes a debit entry at cost 0', async (t) => {
      const sim = await startSim(t);
      const gw = await startGw(t, sim.url);
      const { key } = await gw.createKey({ account: 'bill-e', env: 'live' });
      await gw.grant('bill-e', 1);
      const res = await postChat(gw, key, { model: 'sim-free', messages: [{ role: 'user', content: 'free' }], sim: { tokens: 20 } });
      t.equal(res.status, 200);
      await res.arrayBuffer();
      const e = await waitForDebit(gw, 'bill-e', res.headers.get('x-request-id')!);
      t.match(e, { amount_micros: 0, model: 'sim-free', completion_tokens: 20, usage_source: 'upstream', hold_micros: 0 });
      await checkBooks(t, gw, 'bill-e');
    });

    t.test('the hold uses max_completion_tokens over max_tokens over the model maximum', async (t) => {
      const sim = await startSim(t);
      const gw = await startGw(t, sim.url);
      const { key } = await gw.createKey({ account: 'bill-j', env: 'live' });
      await gw.grant('bill-j', 1_000_000);
      const bodies = [
        { model: 'sim-small', messages: [{ role: 'user', content: 'both' }], max_tokens: 100, max_completion_tokens: 3 },
        { model: 'sim-small', messages: [{ role: 'user', content: 'only max_tokens' }], max_tokens: 9 },
        { model: 'sim-small', messages: [{ role: 'user', content: 'neither' }] },
      ];
      const holds: number[] = [];
      for (const body of bodies) {
        const raw = JSON.stringify(body);
        const res = await postChat(gw, key, raw);
        t.equal(res.status, 200);
        await res.arrayBuffer();
        const e = await waitForDebit(gw, 'bill-j', res.headers.get('x-request-id')!);
        t.equal(e.hold_micros, expectedHold(body, raw));
        holds.push(e.hold_micros!);
      }
      t.ok(holds[0]! < holds[1]! && holds[1]! < holds[2]!, '3 < 9 < 256 output tokens held');
      await checkBooks(t, gw, 'bill-j');
    });

    t.test('an upstream that ignores max_tokens: the overrun is debited in full and recorded, even past the balance', async (t) => {
      const sim = await startSim(t);
      const gw = await startGw(t, sim.url);
      const { key } = await gw.createKey({ account: 'bill-k', env: 'live' });
      const body = {
        model: 'sim-small',
        messages: [{ role: 'user', content: 'short' }],
        max_tokens: 2,
        sim: { tokens: 400, ignore_max_tokens: true },
      };
      const raw = JSON.stringify(body);
      const hold = expectedHold(body, raw);
      await gw.grant('bill-k', hold); // exactly enough for the hold
      const res = await postChat(gw, key, raw);
      t.equal(res.status, 200);
      const json: any = await res.json();
      t.equal(json.usage.completion_tokens, 400, 'the upstream overran max_tokens');
      const e = await waitForDebit(gw, 'bill-k', res.headers.get('x-request-id')!);
      const cost = expectedCost(SIM_SMALL, simPromptTokens(body), 400);
      t.ok(cost > hold);
      t.match(e, { amount_micros: -cost, completion_tokens: 400, usage_source: 'upstream', hold_micros: hold });
      const s = await accountVsLedger(gw, 'bill-k');
      t.equal(s.balance, hold - cost, 'the balance goes negative by the overrun');
      const again = await postChat(gw, key, raw);
      t.equal(again.status, 402, 'and the account is then refused');
      await again.arrayBuffer();
      await checkBooks(t, gw, 'bill-k');
    });

    t.test('test keys never touch credit, but still work (even on an account without credit)', async (t) => {
      const sim = await startSim(t);
      const gw = await startGw(t, sim.url);
      const funded = await gw.createKey({ account: 'bill-f', env: 'test' });
      const broke = await gw.createKey({ account: 'bill-g', env: 'test' });
      await gw.grant('bill-f', 1_000);
      for (const k of [funded.key, broke.key]) {
        for (const stream of [false, true]) {
          const res = await postChat(gw, k, {
            model: 'sim-small',
            messages: [{ role: 'user', content: 'x'.repeat(50) }],
            stream,
            sim: { tokens: 30 },
          });
          t.equal(res.status, 200);
          t.match(await res.text(), 'tok29');
        }
      }
      // Settles of live keys land within 1 s; give a wrongly settled test request the same chance.
      await new Promise((r) => setTimeout(r, 300));
      const f = await accountVsLedger(gw, 'bill-f');
      t.same(
        f.entries.map((e) => e.kind),
        ['grant'],
        'only the grant',
      );
      t.equal(f.balance, 1_000);
      t.equal(f.held, 0);
      t.same(await ledger(gw, 'bill-g'), [], 'the unfunded account has no entries');
      t.equal(sim.requests.length, 4, 'every request was served');
      await checkBooks(t, gw, 'bill-f');
      await checkBooks(t, gw, 'bill-g');
    });

    t.test('a live key on an account with zero balance: 402 insufficient_credit, and the upstream sees nothing', async (t) => {
      const sim = await startSim(t);
      const gw = await startGw(t, sim.url);
      const { key } = await gw.createKey({ account: 'bill-h', env: 'live' });
      for (const stream of [false, true]) {
        const res = await postChat(gw, key, { model: 'sim-small', messages: [{ role: 'user', content: 'hi' }], stream });
        t.equal(res.status, 402);
        const body: any = await res.json();
        t.match(body, { error: { type: 'insufficient_credit', code: 'insufficient_credit', param: null, message: String } });
        t.same(Object.keys(body.error).sort(), ['code', 'message', 'param', 'type']);
      }
      // 100 micros would cover the real cost (~4) but not the hold: (64 + 8 + 4 + 2) × 1.5 + 1 × 2.25 → 120.
      await gw.grant('bill-h', 100);
      const res = await postChat(gw, key, { model: 'sim-small', messages: [{ role: 'user', content: 'hi' }], max_tokens: 1 });
      t.equal(res.status, 402, 'the hold counts the prompt estimate, not only max_tokens');
      await res.arrayBuffer();
      t.equal(sim.requests.length, 0, 'nothing reached the simulator');
      t.same(
        (await ledger(gw, 'bill-h')).map((e) => e.kind),
        ['grant'],
        'no debit for a refused request',
      );
      await checkBooks(t, gw, 'bill-h');
    });

    t.test('the SDK sees 402 as an APIError that is not retried', async (t) => {
      const sim = await startSim(t);
      const gw = await startGw(t, sim.url);
      const { key } = await gw.createKey({ account: 'bill-i', env: 'live' });
      const client = new OpenAI({ apiKey: key, baseURL: `${gw.url}/v1`, maxRetries: 2 });
      const err = await client.chat.completions
        .create({ model: 'sim-small', messages: [{ role: 'user', content: 'hi' }] })
        .catch((e: unknown) => e);
      t.match(err, { status: 402, code: 'insufficient_credit', type: 'insufficient_credit' });
      t.equal(sim.requests.length, 0);
      t.equal(gw.logs.filter((l) => l.includes('"route":"/v1/chat/completions"')).length, 1, 'one attempt: x-should-retry false');
    });
  });
}

t.test('a streaming request answered with a JSON completion (upstream ignored stream): relayed, billed from its usage', async (t) => {
  const completion = JSON.stringify({
    id: 'c',
    object: 'chat.completion',
    created: 1,
    model: 'm',
    choices: [{ index: 0, message: { role: 'assistant', content: 'hello there friend' }, finish_reason: 'stop' }],
    usage: { prompt_tokens: 10, completion_tokens: 50, total_tokens: 60 },
  });
  const up = await startFixedUpstream(t, 200, { 'content-type': 'application/json' }, completion);
  const gw = await startGateway(t, { upstreamUrl: up.url });
  const { key } = await gw.createKey({ account: 'bill-z', env: 'live' });
  await gw.grant('bill-z', 1_000_000);
  const res = await postChat(gw, key, { model: 'sim-small', messages: [{ role: 'user', content: 'x' }], stream: true });
  t.equal(res.status, 200);
  t.equal(await res.text(), completion, 'the body as the upstream sent it');
  const e = await waitForDebit(gw, 'bill-z', res.headers.get('x-request-id')!);
  t.match(
    e,
    { usage_source: 'upstream', prompt_tokens: 10, completion_tokens: 50, amount_micros: -expectedCost(SIM_SMALL, 10, 50) },
    'the upstream usage is authoritative (SPEC §1.2)',
  );
});

t.test('a non-streaming request answered with SSE (upstream forced streaming): relayed, billed from the usage chunk', async (t) => {
  const sse =
    'data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}\n\n' +
    'data: {"id":"c","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":7,"completion_tokens":30,"total_tokens":37}}\n\ndata: [DONE]\n\n';
  const up = await startFixedUpstream(t, 200, { 'content-type': 'text/event-stream' }, sse);
  const gw = await startGateway(t, { upstreamUrl: up.url });
  const { key } = await gw.createKey({ account: 'bill-y', env: 'live' });
  await gw.grant('bill-y', 1_000_000);
  const res = await postChat(gw, key, { model: 'sim-small', messages: [{ role: 'user', content: 'x' }] });
  t.equal(res.status, 200);
  await res.arrayBuffer();
  const e = await waitForDebit(gw, 'bill-y', res.headers.get('x-request-id')!);
  t.match(e, { usage_source: 'upstream', prompt_tokens: 7, completion_tokens: 30 }, 'the upstream usage is authoritative (SPEC §1.2)');
});
