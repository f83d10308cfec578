// SPEC §4 "no debit exceeds its hold" for input the gateway never sees in the body. On /v1/responses an
// input item `{"type":"item_reference","id":…}` (or `{"id":…}` alone) and a stored prompt template
// (`"prompt": {"id":…}`) make the upstream expand content of its own; on /v1/completions vLLM's
// `prompt_embeds`, and on /v1/chat/completions its `{"type":"prompt_embeds","data":…}` content parts, are
// tensors whose rows are tokens the text estimate never counts (a sparse tensor makes many rows of a few
// bytes). On /v1/chat/completions vLLM's `chat_template` (or `chat_template_kwargs.chat_template`) is a
// Jinja template whose loops make a short string render a prompt of any size. The simulator expands them
// all deterministically (src/simulator/responses.ts, completions.ts, output.ts: a template's `range(N)`
// renders the messages N times). Each is held at the model's context window (per completions embeds
// item; once for a chat request, whose parts all go into one prompt), so
//  - concurrent requests on one key never take the balance negative, and no debit exceeds its hold;
//  - one that ends without usage is billed from the upstream's stored response (Responses), else the held
//    input part plus the output counted — never the visible input alone.
import t, { type Test } from 'tap';
import OpenAI from 'openai';
import type { TestGateway } from '../helpers/gateway.ts';
import { startTokenPriced, abandonResponsesStream } from './chat-fixture.ts';
import { simPromptTokens } from '../../src/simulator/simulator.ts';
import { checkLedger, debitOf, ledgerOf, poorCrowd, settledAccount } from './credit-support.ts';

const CONTEXT_WINDOW = 16_384;

function setup(t: Test) {
  return startTokenPriced(t, { maxOutputTokens: 8192, contextWindow: CONTEXT_WINDOW });
}

function post(gw: { url: string }, key: string, path: string, body: Record<string, unknown>, signal?: AbortSignal): Promise<Response> {
  return fetch(`${gw.url}${path}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'm', ...body }),
    ...(signal && { signal }),
  });
}

/** 32 concurrent requests of `body` to `path` on a poor account (credit-support poorCrowd). */
function crowd(t: Test, gw: TestGateway, account: string, grant: number, path: string, body: Record<string, unknown>, prompt: number) {
  return poorCrowd(t, gw, account, grant, prompt, (key) => post(gw, key, path, body));
}

t.test('responses: item_reference and stored prompt templates on a poor account never overspend', async (t) => {
  const { gw } = await setup(t);
  // The referenced item: a stored response's output message of 6,000 tokens.
  const { key } = await gw.createKey({ account: 'rich', env: 'live' });
  await gw.grant('rich', 1_000_000);
  const res = await post(gw, key, '/v1/responses', { input: 'hi', max_output_tokens: 6000, sim: { tokens: 6000 } });
  const stored = (await res.json()) as { id: string; output: { id: string }[] };
  t.equal(res.status, 200, 'the referenced response is stored');
  const item = stored.output[0]!.id;
  const tail = { max_output_tokens: 16, sim: { tokens: 4 } };

  // input 'hi' is 1 simulator token, each output 4; the reference adds 6,000, the template 9,000 + 'Paris'.
  await crowd(
    t,
    gw,
    'ref',
    20_000,
    '/v1/responses',
    {
      input: [
        { type: 'item_reference', id: item },
        { role: 'user', content: 'hi' },
      ],
      ...tail,
    },
    6001,
  );
  await crowd(t, gw, 'ref-untyped', 20_000, '/v1/responses', { input: [{ id: item }, { role: 'user', content: 'hi' }], ...tail }, 6001);
  await crowd(
    t,
    gw,
    'template',
    20_000,
    '/v1/responses',
    { input: 'hi', prompt: { id: 'pmpt_sim_9000', version: '2', variables: { city: 'Paris' } }, ...tail },
    9003,
  );
});

t.test('completions: prompt_embeds on a poor account never overspend', async (t) => {
  const { gw } = await setup(t);
  const tail = { max_tokens: 16, sim: { tokens: 4 } };
  // A sparse tensor: 12,000 rows in a few bytes (vLLM densifies it), one embeds item.
  await crowd(
    t,
    gw,
    'sparse',
    20_000,
    '/v1/completions',
    { prompt: '', prompt_embeds: 'AAAA'.repeat(16), ...tail, sim: { ...tail.sim, embeds_tokens: 12_000 } },
    12_000,
  );
  // Two dense items of 20,000 base64 characters, 5,000 tokens each for the simulator.
  const dense = 'AAAA'.repeat(5000);
  await crowd(t, gw, 'dense', 40_000, '/v1/completions', { prompt: '', prompt_embeds: [dense, dense], ...tail }, 10_000);
});

t.test('chat: prompt_embeds content parts on a poor account never overspend', async (t) => {
  const { gw } = await setup(t);
  const tail = { max_tokens: 16, sim: { tokens: 4 } };
  const embeds = (data: string) => ({ type: 'prompt_embeds', data });
  const user = (...parts: unknown[]) => [{ role: 'user', content: [{ type: 'text', text: 'hi' }, ...parts] }];
  // A sparse tensor: 12,000 rows in a few bytes (vLLM densifies it), one part beside the text 'hi' (1 token).
  await crowd(
    t,
    gw,
    'chat-sparse',
    20_000,
    '/v1/chat/completions',
    { messages: user(embeds('AAAA'.repeat(16))), ...tail, sim: { ...tail.sim, embeds_tokens: 12_000 } },
    12_001,
  );
  // Two dense parts of 20,000 base64 characters, 5,000 tokens each for the simulator.
  const dense = 'AAAA'.repeat(5000);
  await crowd(t, gw, 'chat-dense', 40_000, '/v1/chat/completions', { messages: user(embeds(dense), embeds(dense)), ...tail }, 10_001);
  // Text in vLLM's text-like part types (Responses-style input_text, thinking): 40,000 characters, 10,000
  // tokens for the simulator, which was held at the 2,048-token non-text allowance.
  await crowd(
    t,
    gw,
    'chat-input-text',
    50_000,
    '/v1/chat/completions',
    { messages: user({ type: 'input_text', text: 'x'.repeat(40_000) }), ...tail },
    10_001,
  );
  // vLLM's multimodal embeddings parts: the tensor under the type's name, its rows the image's / audio's
  // placeholder tokens; sparse again.
  await crowd(
    t,
    gw,
    'chat-image-embeds',
    20_000,
    '/v1/chat/completions',
    { messages: user({ type: 'image_embeds', image_embeds: 'AAAA' }), ...tail, sim: { ...tail.sim, embeds_tokens: 12_000 } },
    12_001,
  );
});

/** A 79-byte chat template whose loop renders the messages 120 times (the simulator's `range(N)` rule). */
const LOOP_TEMPLATE = '{% for _ in range(120) %}{% for m in messages %}{{ m.content }}{% endfor %}{% endfor %}';

t.test('chat: a request chat_template on a poor account never overspends', async (t) => {
  const { gw } = await setup(t);
  const tail = { max_tokens: 16, sim: { tokens: 4 } };
  // 400 characters (100 simulator tokens) rendered 120 times: 12,000 input tokens from a 0.6 KB body.
  const messages = [{ role: 'user', content: 'x'.repeat(400) }];
  for (const [account, extra] of [
    ['template', { chat_template: LOOP_TEMPLATE }],
    ['template-kwargs', { chat_template_kwargs: { chat_template: LOOP_TEMPLATE } }],
  ] as const) {
    const prompt = simPromptTokens({ messages, ...extra });
    t.ok(prompt >= 12_000, `${account}: the upstream renders ${prompt} input tokens`);
    await crowd(t, gw, account, 20_000, '/v1/chat/completions', { messages, ...extra, ...tail }, prompt);
  }
});

t.test('chat: a request chat_template answered without usage is billed the held input part, not the messages alone', async (t) => {
  const { gw } = await setup(t);
  const { key } = await gw.createKey({ account: 'template-nousage', env: 'live' });
  await gw.grant('template-nousage', 1_000_000);
  for (const extra of [{ chat_template: LOOP_TEMPLATE }, { chat_template_kwargs: { chat_template: LOOP_TEMPLATE } }]) {
    for (const stream of [false, true]) {
      const name = `${Object.keys(extra)[0]}, stream ${stream}`;
      const res = await post(gw, key, '/v1/chat/completions', {
        messages: [{ role: 'user', content: 'x'.repeat(400) }],
        ...extra,
        max_tokens: 16,
        stream,
        sim: { tokens: 4, usage: 'absent' },
      });
      t.equal(res.status, 200);
      await res.text();
      const entry = await debitOf(gw, 'template-nousage', res.headers.get('x-request-id')!);
      t.equal(entry.prompt_tokens, CONTEXT_WINDOW, `${name}: billed the context window held, not the messages counted`);
      t.ok(entry.completion_tokens! >= 4, `${name}: and the ${entry.completion_tokens} output tokens counted`);
      t.equal(entry.usage_source, 'estimated');
      t.ok(-entry.amount_micros <= entry.hold_micros!, `${name}: within its hold`);
    }
  }
  checkLedger(t, await ledgerOf(gw.admin, 'template-nousage'), await settledAccount(gw, 'template-nousage'));
});

t.test(
  'responses: a template request abandoned before response.completed is billed from the upstream GET, else the context window',
  async (t) => {
    const { sim, gw } = await setup(t);
    const { key } = await gw.createKey({ account: 'cut', env: 'live' });
    await gw.grant('cut', 10_000_000);
    const prompt = { id: 'pmpt_sim_9000', variables: { city: 'Paris' } };

    /** A streamed request abandoned after 6 deltas; returns its request id. */
    async function abandoned(extra: Record<string, unknown>): Promise<string> {
      const ac = new AbortController();
      const body = { input: 'hi', prompt, stream: true, sim: { tokens: 100, delay_ms: 20 }, ...extra };
      const res = await post(gw, key, '/v1/responses', body, ac.signal);
      if (res.status !== 200) throw new Error(`request: ${res.status} ${await res.text()}`);
      return abandonResponsesStream(t, res, ac);
    }

    // 1. The upstream stored it: its usage, the template included, is what is billed.
    const id = await abandoned({});
    const entry = await debitOf(gw, 'cut', id);
    const rec = await sim.waitFor((r) => r.headers['x-request-id'] === id && r.endedAt !== undefined);
    t.ok(
      sim.requests.some((r) => r.method === 'GET' && r.path === `/v1/responses/resp_sim_${rec.id}`),
      'the gateway asked the upstream for the stored response',
    );
    t.match(entry, { prompt_tokens: 9003, usage_source: 'upstream' }, 'billed the input the upstream rendered, template included');
    t.ok(-entry.amount_micros <= entry.hold_micros!, 'within its hold');

    // 2. Not stored (store: false, the GET is a 404): the held input part plus the output counted.
    const id2 = await abandoned({ store: false });
    const entry2 = await debitOf(gw, 'cut', id2);
    t.match(entry2, { prompt_tokens: CONTEXT_WINDOW, usage_source: 'estimated' }, 'the context window, not the visible input alone');
    t.ok(entry2.completion_tokens! >= 6, `and the ${entry2.completion_tokens} output tokens counted`);
    t.ok(-entry2.amount_micros <= entry2.hold_micros!, 'within its hold');
    checkLedger(t, await ledgerOf(gw.admin, 'cut'), await settledAccount(gw, 'cut'));
  },
);

t.test('completions: prompt_embeds answered without usage are billed the held input part, not the text prompt alone', async (t) => {
  const { gw } = await setup(t);
  const { key } = await gw.createKey({ account: 'nousage', env: 'live' });
  await gw.grant('nousage', 1_000_000);
  const res = await post(gw, key, '/v1/completions', {
    prompt: '',
    prompt_embeds: 'AAAA'.repeat(16),
    max_tokens: 16,
    sim: { tokens: 4, usage: 'absent', embeds_tokens: 12_000 },
  });
  t.equal(res.status, 200);
  await res.text();
  const entry = await debitOf(gw, 'nousage', res.headers.get('x-request-id')!);
  t.ok(entry.prompt_tokens! >= CONTEXT_WINDOW, `billed ${entry.prompt_tokens} input tokens: the context window held for the embeds item`);
  t.equal(entry.usage_source, 'estimated');
  t.ok(-entry.amount_micros <= entry.hold_micros!, 'within its hold');
  checkLedger(t, await ledgerOf(gw.admin, 'nousage'), await settledAccount(gw, 'nousage'));
});

t.test('chat: prompt_embeds answered without usage are billed the held input part, not the text alone', async (t) => {
  const { gw } = await setup(t);
  const { key } = await gw.createKey({ account: 'chat-nousage', env: 'live' });
  await gw.grant('chat-nousage', 1_000_000);
  for (const stream of [false, true]) {
    const res = await post(gw, key, '/v1/chat/completions', {
      messages: [{ role: 'user', content: [{ type: 'prompt_embeds', data: 'AAAA'.repeat(16) }] }],
      max_tokens: 16,
      stream,
      sim: { tokens: 4, usage: 'absent', embeds_tokens: 12_000 },
    });
    t.equal(res.status, 200);
    await res.text();
    const entry = await debitOf(gw, 'chat-nousage', res.headers.get('x-request-id')!);
    t.ok(entry.prompt_tokens! >= CONTEXT_WINDOW, `stream ${stream}: billed ${entry.prompt_tokens} input tokens, the context window held`);
    t.ok(entry.completion_tokens! >= 4, `stream ${stream}: and the ${entry.completion_tokens} output tokens counted`);
    t.equal(entry.usage_source, 'estimated');
    t.ok(-entry.amount_micros <= entry.hold_micros!, 'within its hold');
  }
  checkLedger(t, await ledgerOf(gw.admin, 'chat-nousage'), await settledAccount(gw, 'chat-nousage'));
});

t.test('the openai SDK sends item_reference and prompt as they are: held at the context window, billed the usage', async (t) => {
  const { gw } = await setup(t);
  const { key } = await gw.createKey({ account: 'sdk', env: 'live' });
  await gw.grant('sdk', 1_000_000);
  const openai = new OpenAI({ apiKey: key, baseURL: `${gw.url}/v1`, maxRetries: 0 });
  const first = await openai.responses.create(
    { model: 'm', input: 'hi', max_output_tokens: 3000 },
    { headers: { 'x-sim-tokens': '3000' } },
  );
  const { data, response } = await openai.responses
    .create(
      { model: 'm', input: [{ type: 'item_reference', id: first.output[0]!.id! }], prompt: { id: 'pmpt_sim_500' }, max_output_tokens: 8 },
      { headers: { 'x-sim-tokens': '2' } },
    )
    .withResponse();
  t.match(
    data.usage,
    { input_tokens: 3501, output_tokens: 2 },
    'the upstream expanded both: 3,000 + 500, and the 1 token the simulator counts at least',
  );
  const entry = await debitOf(gw, 'sdk', response.headers.get('x-request-id')!);
  t.match(entry, { prompt_tokens: 3501, completion_tokens: 2, usage_source: 'upstream', hold_micros: CONTEXT_WINDOW + 8 });
});
