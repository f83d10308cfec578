// vLLM's /v1/completions with `echo: true` and `logprobs: N` streams the prompt's text and a logprob entry
// per prompt token (N + 1 alternatives each) in its FIRST chunk (serving_completion.py; vLLM asks the
// engine for prompt logprobs when echo is set): ~185 bytes per prompt token at N = 5, so a 30k-token
// prompt of a 120 KB request makes a 5.7 MB event, past the hold bound (relay.ts maxEventBytes: 1 MiB
// plus twice the request). The upstream was fine: the stream must reach the client byte for byte, be
// billed the upstream's usage, and not count as a broken stream; without usage, the echoed prompt is
// not billed as completion.
import t from 'tap';
import { simCompletionsPromptTokens } from '../../src/simulator/completions.ts';
import { maxEventBytes } from '../../src/meter/relay.ts';
import { createTokenizer } from '../../src/meter/tokenizer.ts';
import { SIM_SMALL, checkBooks, expectedCost, liveGateway, metricsText, sample, sseData, waitForDebit } from './chat-fixture.ts';

function post(url: string, headers: Record<string, string>, body: unknown): Promise<Response> {
  return fetch(url, { method: 'POST', headers: { ...headers, 'content-type': 'application/json' }, body: JSON.stringify(body) });
}

/** A simulator's stream with its per-request parts (id, timestamp) made equal. */
const normal = (s: string) => s.replaceAll(/cmpl-sim-\d+/g, 'cmpl-sim-N').replaceAll(/"created":\d+/g, '"created":0');

// 120,000 characters: 30,000 simulated prompt tokens.
const PROMPT = 'The quick brown fox jumps over. '.repeat(3750);
const TOKENS = 4;
/** A streamed echo of PROMPT with 5 logprobs a token: its first chunk is megabytes. */
const ECHO_LOGPROBS = { model: 'sim-small', prompt: PROMPT, echo: true, logprobs: 5, max_tokens: 16, stream: true };
const tokenizer = createTokenizer();
await tokenizer.load();

t.test('echo with logprobs: a first chunk of megabytes is relayed byte for byte, billed the usage, not a broken stream', async (t) => {
  const { sim: simulator, gw, key } = await liveGateway(t, 'echo-lp', 100_000_000);
  const body = { ...ECHO_LOGPROBS, stream_options: { include_usage: true }, sim: { tokens: TOKENS } };

  const direct = await (await post(`${simulator.url}/completions`, {}, { ...body, model: 'sim/small-1' })).text();
  const res = await post(`${gw.url}/v1/completions`, gw.auth(key), body);
  t.equal(res.status, 200);
  const text = await res.text();

  const data = sseData(text);
  t.notOk(data[0]!.startsWith('{"error"'), 'the stream starts with the first chunk, not the error chunk');
  t.ok(
    data[0]!.length > maxEventBytes(JSON.stringify(body).length) * 3,
    `the first event (${data[0]!.length} bytes) is far past the event bound`,
  );
  t.ok(JSON.parse(data[0]!).choices?.[0]?.text?.startsWith(PROMPT), 'the first chunk echoes the prompt');
  t.equal(data.at(-1), '[DONE]', 'the stream ends with [DONE], not the error chunk');
  t.notOk(
    data.some((d) => d.startsWith('{"error"')),
    'no error chunk',
  );
  t.ok(normal(text) === normal(direct), 'the client got the upstream stream byte for byte');

  const e = await waitForDebit(gw, 'echo-lp', res.headers.get('x-request-id')!);
  const prompt = simCompletionsPromptTokens(body, {});
  t.match(e, {
    usage_source: 'upstream',
    prompt_tokens: prompt,
    completion_tokens: TOKENS,
    amount_micros: -expectedCost(SIM_SMALL, prompt, TOKENS),
  });
  t.equal(sample(await metricsText(gw), 'tollgate_upstream_errors_total', { reason: 'stream_broken' }), 0, 'not counted toward ejection');
  await checkBooks(t, gw, 'echo-lp');
});

t.test('echo with logprobs and no usage from the upstream: the echoed prompt is not billed as completion', async (t) => {
  const { gw, key } = await liveGateway(t, 'echo-nu', 100_000_000);
  const body = { ...ECHO_LOGPROBS, sim: { tokens: TOKENS, usage: 'absent' } };
  const res = await post(`${gw.url}/v1/completions`, gw.auth(key), body);
  t.equal(res.status, 200);
  const data = sseData(await res.text());
  t.equal(data.at(-1), '[DONE]', 'the stream ends with [DONE], not the error chunk');

  const e = await waitForDebit(gw, 'echo-nu', res.headers.get('x-request-id')!);
  // The first chunk (the echo and its first token) was relayed, not kept: without usage the request is
  // billed the output it was held for (max_tokens), as a JSON answer too large to keep is, and its prompt.
  t.match(e, { usage_source: 'estimated', completion_tokens: 16 });
  // Counted by the tokenizer (in bounded slices: a few tokens more than in one piece), not the byte estimate (120,000).
  const counted = tokenizer.countText(PROMPT);
  t.ok(Math.abs(e.prompt_tokens! - counted) < counted / 100, `prompt billed ${e.prompt_tokens}, counted ${counted}`);
  t.equal(sample(await metricsText(gw), 'tollgate_upstream_errors_total', { reason: 'stream_broken' }), 0, 'not counted toward ejection');
  await checkBooks(t, gw, 'echo-nu');
});

for (const stream of [true, false]) {
  t.test(`echo under the event bound, no usage (stream ${stream}): the echoed prompt is not billed as completion`, async (t) => {
    // Held whole, the echo is text like any other: it was counted as completion (701 prompt tokens billed twice).
    const { gw, key } = await liveGateway(t, 'echo-s', 100_000_000);
    const prompt = PROMPT.slice(0, 3200);
    const body = { model: 'sim-small', prompt, echo: true, max_tokens: 16, stream, sim: { tokens: TOKENS, usage: 'absent' } };
    const res = await post(`${gw.url}/v1/completions`, gw.auth(key), body);
    t.equal(res.status, 200);
    const text = await res.text();
    t.ok(text.includes(prompt), 'the answer echoes the prompt');
    const e = await waitForDebit(gw, 'echo-s', res.headers.get('x-request-id')!);
    t.match(e, { usage_source: 'estimated', prompt_tokens: tokenizer.countText(prompt), completion_tokens: 16 });
    await checkBooks(t, gw, 'echo-s');
  });
}
