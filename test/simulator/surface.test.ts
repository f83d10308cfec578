// The simulator's /v1/responses, /v1/completions and /v1/embeddings (src/simulator/responses.ts,
// completions.ts): deterministic like chat, read by the official openai SDK directly (no gateway), with
// the same steering (tokens, usage, status, cut_after) as chat.
import t, { type Test } from 'tap';
import OpenAI from 'openai';
import { simCompletionText, startSimulator } from '../../src/simulator/simulator.ts';
import { simResponsesPromptTokens } from '../../src/simulator/responses.ts';
import { simEmbedding, simInputTokens, SIM_EMBEDDING_DIMENSIONS } from '../../src/simulator/completions.ts';

const sim = await startSimulator();
t.teardown(() => sim.close());
const openai = new OpenAI({ apiKey: 'x', baseURL: sim.url, maxRetries: 0 });

/** A streamed response's events as the SDK reads them, once their sequence numbers are checked to count up from 0. */
async function readEvents(t: Test, stream: AsyncIterable<OpenAI.Responses.ResponseStreamEvent>) {
  const events: OpenAI.Responses.ResponseStreamEvent[] = [];
  for await (const ev of stream) events.push(ev);
  t.same(
    events.map((e) => e.sequence_number),
    events.map((_, i) => i),
    'sequence numbers count up from 0',
  );
  return events;
}

/** The event types of one output text message streamed in `deltas` deltas. */
const textMessageEvents = (deltas: number) => [
  'response.output_item.added',
  'response.content_part.added',
  ...Array.from({ length: deltas }, () => 'response.output_text.delta'),
  'response.output_text.done',
  'response.content_part.done',
  'response.output_item.done',
];

t.test('responses: the final response, and the same text and usage as typed events', async (t) => {
  const body = { model: 'm', input: [{ role: 'user' as const, content: 'twelve chars' }], instructions: 'be brief', max_output_tokens: 5 };
  const r = await openai.responses.create(body, { headers: { 'x-sim-tokens': '9' } });
  t.equal(r.output_text, simCompletionText(5));
  t.equal(r.status, 'incomplete', 'cut by max_output_tokens');
  t.match(r.usage, { input_tokens: simResponsesPromptTokens(body), output_tokens: 5 });
  t.equal(simResponsesPromptTokens(body), Math.ceil(('twelve chars'.length + 'be brief'.length) / 4));

  const stream = await openai.responses.create({ model: 'm', input: 'hi', stream: true }, { headers: { 'x-sim-tokens': '3' } });
  const events = await readEvents(t, stream);
  t.same(
    events.map((e) => e.type),
    ['response.created', 'response.in_progress', ...textMessageEvents(3), 'response.completed'],
  );
  const done = events.at(-1) as OpenAI.Responses.ResponseCompletedEvent;
  t.match(done.response.usage, { input_tokens: 1, output_tokens: 3 });

  const helper = await openai.responses.stream({ model: 'm', input: 'again' }, { headers: { 'x-sim-tokens': '4' } }).finalResponse();
  t.equal(helper.output_text, simCompletionText(4), "the SDK's stream helper assembles the response");
});

t.test('responses: steered token_bytes and image_bytes (a long answer, a hosted image), as the SDK reads them', async (t) => {
  const stream = await openai.responses.create(
    { model: 'm', input: 'draw', stream: true },
    { headers: { 'x-sim-tokens': '3', 'x-sim-token-bytes': '20', 'x-sim-image-bytes': '1000' } },
  );
  const events = await readEvents(t, stream);
  t.same(
    events.map((e) => e.type),
    [
      'response.created',
      'response.in_progress',
      'response.output_item.added',
      'response.image_generation_call.in_progress',
      'response.image_generation_call.generating',
      'response.image_generation_call.partial_image',
      'response.image_generation_call.completed',
      'response.output_item.done',
      ...textMessageEvents(3),
      'response.completed',
    ],
  );
  const partial = events[5] as OpenAI.Responses.ResponseImageGenCallPartialImageEvent;
  t.equal(partial.partial_image_b64.length, 1000);
  const text = [0, 1, 2].map((i) => `tok${i}${'.'.repeat(15)} `).join('');
  t.equal((events[13] as OpenAI.Responses.ResponseTextDoneEvent).text, text, 'each token 20 bytes');
  const done = (events.at(-1) as OpenAI.Responses.ResponseCompletedEvent).response;
  t.match(done.output, [{ type: 'image_generation_call', result: partial.partial_image_b64 }, { type: 'message' }]);
  t.match(done.output[1], { content: [{ type: 'output_text', text }] }, 'the final response holds the text');
  t.match(done.usage, { output_tokens: 3 });
});

t.test('responses: usage absent is usage null; a cut closes the socket after N events', async (t) => {
  const r = await openai.responses.create({ model: 'm', input: 'x' }, { headers: { 'x-sim-usage': 'absent' } });
  t.equal(r.usage, null);
  const res = await fetch(`${sim.url}/responses`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-sim-cut-after': '6' },
    body: JSON.stringify({ model: 'm', input: 'x', stream: true }),
  });
  let text = '';
  try {
    for await (const part of res.body!) text += Buffer.from(part).toString();
  } catch {
    // the steered cut
  }
  t.equal(text.split('\n\n').filter(Boolean).length, 6);
});

t.test('completions: max_tokens defaults to 16; streams end with [DONE] and carry usage only when asked', async (t) => {
  const plain = await openai.completions.create({ model: 'm', prompt: 'abcdefgh' }, { headers: { 'x-sim-tokens': '40' } });
  t.equal(plain.choices[0]!.text, simCompletionText(16));
  t.equal(plain.choices[0]!.finish_reason, 'length');
  t.match(plain.usage, { prompt_tokens: 2, completion_tokens: 16 });
  for (const includeUsage of [false, true]) {
    const stream = await openai.completions.create(
      { model: 'm', prompt: ['ab', 'cdef'], stream: true, max_tokens: 3, ...(includeUsage && { stream_options: { include_usage: true } }) },
      { headers: { 'x-sim-tokens': '8' } },
    );
    let text = '';
    let usage;
    for await (const c of stream) {
      text += c.choices[0]?.text ?? '';
      if (c.usage) usage = c.usage;
    }
    t.equal(text, simCompletionText(3));
    t.same(usage, includeUsage ? { prompt_tokens: simInputTokens(['ab', 'cdef']), completion_tokens: 3, total_tokens: 5 } : undefined);
  }
});

t.test('embeddings: one deterministic vector per input, float or base64; usage is prompt tokens', async (t) => {
  const batch = await openai.embeddings.create({ model: 'e', input: ['one', 'two two', 'three'] });
  t.same(
    batch.data.map((d) => d.embedding),
    [0, 1, 2].map((i) => simEmbedding(i, SIM_EMBEDDING_DIMENSIONS)),
  );
  t.same(batch.usage, { prompt_tokens: 5, total_tokens: 5 }, '1 + 2 + 2: each string by length / 4, rounded up');
  const floats = await fetch(`${sim.url}/embeddings`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'e', input: 'x', dimensions: 2 }),
  });
  t.same(((await floats.json()) as any).data[0].embedding, simEmbedding(0, 2));
  const failed = await openai.embeddings
    .create({ model: 'e', input: 'x' }, { headers: { 'x-sim-status': '503' } })
    .catch((e: unknown) => e);
  t.match(failed, { status: 503 });
});

t.test('responses: previous_response_id prepends the stored history; GET /v1/responses/{id} returns usage', async (t) => {
  const first = await openai.responses.create({ model: 'm', input: 'x'.repeat(400) }, { headers: { 'x-sim-tokens': '7' } });
  t.match(first.usage, { input_tokens: 100, output_tokens: 7 });
  const next = await openai.responses.create(
    { model: 'm', input: 'abcd', previous_response_id: first.id },
    { headers: { 'x-sim-tokens': '3' } },
  );
  t.match(next.usage, { input_tokens: 100 + 7 + 1, output_tokens: 3 }, 'history (input + output) prepended to the new input');
  const third = await openai.responses.create({ model: 'm', input: 'abcd', previous_response_id: next.id, store: false });
  t.equal(third.usage?.input_tokens, 108 + 3 + 1, 'the chain grows');
  const got = await openai.responses.retrieve(next.id);
  t.match(got, { id: next.id, status: 'completed', usage: { input_tokens: 108, output_tokens: 3 } });
  const gone = (await openai.responses.retrieve(third.id).catch((e: unknown) => e)) as { status?: number };
  t.equal(gone.status, 404, 'store: false is not kept');
  await t.rejects(openai.responses.create({ model: 'm', input: 'hi', previous_response_id: 'resp_unknown' }), {
    status: 404,
    message: /Previous response with id 'resp_unknown' not found/,
  });

  // A stream abandoned after a few tokens: the stored response is incomplete, with the tokens produced.
  const ac = new AbortController();
  const stream = await openai.responses.create(
    { model: 'm', input: 'abcd', previous_response_id: first.id, stream: true },
    { headers: { 'x-sim-tokens': '50', 'x-sim-delay-ms': '20' }, signal: ac.signal },
  );
  let id = '';
  let deltas = 0;
  try {
    for await (const ev of stream) {
      if (ev.type === 'response.created') id = ev.response.id;
      if (ev.type === 'response.output_text.delta' && ++deltas === 3) ac.abort();
    }
  } catch {
    // the abort ends the iteration with an error or quietly, depending on when it lands
  }
  const rec = await sim.waitFor((r) => r.body?.previous_response_id === first.id && r.body?.stream === true && r.endedAt !== undefined);
  const cut = await openai.responses.retrieve(id);
  t.equal(cut.status, 'incomplete');
  t.match(cut.usage, { input_tokens: 108, output_tokens: rec.completionTokensSent });
  t.ok(rec.completionTokensSent >= 3 && rec.completionTokensSent < 50, `${rec.completionTokensSent} tokens produced before the abort`);
});

t.test('responses: an item_reference expands to the stored item, a prompt template to its tokens; unknown ones are 404', async (t) => {
  const first = await openai.responses.create({ model: 'm', input: 'x' }, { headers: { 'x-sim-tokens': '40' } });
  const item = first.output[0]!.id!;
  const ref = await openai.responses.create(
    {
      model: 'm',
      input: [
        { type: 'item_reference', id: item },
        { role: 'user', content: 'abcd' },
      ],
    },
    { headers: { 'x-sim-tokens': '2' } },
  );
  t.match(ref.usage, { input_tokens: 40 + 1 }, "the referenced message's 40 tokens, then the new input");
  const untyped = await fetch(`${sim.url}/responses`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'm', input: [{ id: item }, { id: item }] }),
  });
  t.match(((await untyped.json()) as any).usage, { input_tokens: 80 + 1 }, 'an item with neither type nor role is a reference');
  const templated = await openai.responses.create({
    model: 'm',
    input: 'abcd',
    prompt: { id: 'pmpt_sim_300', version: '1', variables: { name: 'abcdefgh', doc: { type: 'input_text', text: 'abcd' } } },
  });
  t.match(templated.usage, { input_tokens: 300 + 3 + 1 }, 'the template, its variables (12 characters) and the input');
  await t.rejects(openai.responses.create({ model: 'm', input: [{ type: 'item_reference', id: 'msg_unknown' }] }), {
    status: 404,
    message: /Item with id 'msg_unknown' not found/,
  });
  await t.rejects(openai.responses.create({ model: 'm', input: 'hi', prompt: { id: 'pmpt_other' } }), {
    status: 404,
    message: /Prompt with id 'pmpt_other' not found/,
  });
});

t.test("chat: vLLM's prompt_embeds content parts count their rows as input", async (t) => {
  const post = (content: unknown[], steer?: Record<string, unknown>) =>
    fetch(`${sim.url}/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'm', max_tokens: 1, messages: [{ role: 'user', content }], ...(steer && { sim: steer }) }),
    }).then((r) => r.json() as Promise<any>);
  const embeds = (data: string) => ({ type: 'prompt_embeds', data });
  t.equal((await post([embeds('A'.repeat(400))])).usage.prompt_tokens, 100, 'base64 length ÷ 4');
  t.equal((await post([{ type: 'text', text: 'abcd' }, embeds('A'.repeat(40)), embeds('AAAA')])).usage.prompt_tokens, 1 + 10 + 1);
  t.equal(
    (await post([{ type: 'text', text: 'abcd' }, embeds('AAAA'), embeds('AAAA')], { embeds_tokens: 5000 })).usage.prompt_tokens,
    1 + 2 * 5000,
    'steered: each part a sparse tensor',
  );
});

t.test("completions: vLLM's prompt_embeds count as input; an empty prompt beside them is none", async (t) => {
  const post = (body: Record<string, unknown>) =>
    fetch(`${sim.url}/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'm', max_tokens: 1, ...body }),
    }).then((r) => r.json() as Promise<any>);
  t.equal((await post({ prompt: '', prompt_embeds: 'A'.repeat(400) })).usage.prompt_tokens, 100, 'base64 length ÷ 4');
  t.equal((await post({ prompt: 'abcd', prompt_embeds: ['A'.repeat(40), 'A'.repeat(4)] })).usage.prompt_tokens, 10 + 1 + 1);
  t.equal(
    (await post({ prompt: '', prompt_embeds: 'AAAA', sim: { embeds_tokens: 5000 } })).usage.prompt_tokens,
    5000,
    'steered: a sparse tensor',
  );
});
