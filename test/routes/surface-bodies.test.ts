// The bodies of /v1/responses, /v1/completions and /v1/embeddings (routes/responses.ts, completions.ts,
// embeddings.ts, text-input.ts): what is refused with a 422 and where, and that each hold bound is never
// below what the fallback tokenizer counts for the same prompt (SPEC §4: the hold covers the cost).
import t from 'tap';
import { ValidationError } from '../../src/http/errors.ts';
import { createTokenizer } from '../../src/meter/tokenizer.ts';
import { estimateResponsesPrompt, RESPONSES_ENDPOINT, validateResponsesBody } from '../../src/routes/responses.ts';
import { COMPLETIONS_ENDPOINT, validateCompletionsBody } from '../../src/routes/completions.ts';
import { EMBEDDINGS_ENDPOINT, validateEmbeddingsBody } from '../../src/routes/embeddings.ts';
import { CHAT_COMPLETIONS } from '../../src/routes/chat-completions.ts';
import { PER_NON_TEXT_PART } from '../../src/credit/hold-estimate.ts';
import { inputItems, inputTokenBound } from '../../src/routes/text-input.ts';

const tokenizer = createTokenizer();
await tokenizer.load();
const budget = () => ({ deadline: Date.now() + 5000 });

function issues(f: () => unknown): { loc: string; type: string }[] {
  try {
    f();
  } catch (e) {
    if (e instanceof ValidationError) return e.detail.map((d) => ({ loc: d.loc.join('.'), type: d.type }));
    throw e;
  }
  return [];
}

t.test('responses: the fields Tollgate acts on are checked, the rest passes', async (t) => {
  t.same(
    issues(() => validateResponsesBody({ model: 'm', input: 'x', tools: [{ type: 'web_search' }], reasoning: { effort: 'low' } })),
    [],
  );
  t.same(
    issues(() => validateResponsesBody({ model: 'm', previous_response_id: 'resp_1' })),
    [],
    'input is optional',
  );
  t.same(
    issues(() => validateResponsesBody({ model: 'm', input: null, max_output_tokens: null, stream: null })),
    [],
    'null = not set',
  );
  t.same(
    issues(() => validateResponsesBody({ input: 5, max_output_tokens: 0, stream: 'yes', store: 1 })),
    [
      { loc: 'body.model', type: 'missing' },
      { loc: 'body.input', type: 'list_type' },
      { loc: 'body.stream', type: 'bool_type' },
      { loc: 'body.max_output_tokens', type: 'greater_than' },
      { loc: 'body.store', type: 'bool_type' },
    ],
  );
  t.same(
    issues(() => validateResponsesBody([])),
    [{ loc: 'body', type: 'model_attributes_type' }],
  );
});

t.test('completions and embeddings: prompt / input shapes', async (t) => {
  for (const ok of ['x', ['a', 'b'], [1, 2, 3], [[1], [2, 3]]]) {
    t.same(
      issues(() => validateCompletionsBody({ model: 'm', prompt: ok }, 8)),
      [],
      JSON.stringify(ok),
    );
    t.same(
      issues(() => validateEmbeddingsBody({ model: 'm', input: ok })),
      [],
      JSON.stringify(ok),
    );
  }
  for (const bad of [[], 5, ['a', 1], [[1], 'a'], [-1], [1.5], [[]], { text: 'x' }]) {
    t.same(
      issues(() => validateCompletionsBody({ model: 'm', prompt: bad }, 8)),
      [{ loc: 'body.prompt', type: 'text_input_type' }],
      JSON.stringify(bad),
    );
  }
  t.same(
    issues(() => validateEmbeddingsBody({ model: 'm' })),
    [{ loc: 'body.input', type: 'missing' }],
  );
  t.same(
    issues(() => validateEmbeddingsBody({ model: 'm', input: Array(2049).fill('x') })),
    [{ loc: 'body.input', type: 'too_long' }],
  );
  t.same(
    issues(() => validateEmbeddingsBody({ model: 'm', input: 'x', encoding_format: 'int8', dimensions: 0 })),
    [
      { loc: 'body.encoding_format', type: 'literal_error' },
      { loc: 'body.dimensions', type: 'greater_than' },
    ],
  );
  t.same(
    issues(() => validateCompletionsBody({ model: 'm', prompt: 'x', n: 9, best_of: 9, max_tokens: 0 }, 8)),
    [
      { loc: 'body.max_tokens', type: 'greater_than' },
      { loc: 'body.n', type: 'less_than_equal' },
      { loc: 'body.best_of', type: 'less_than_equal' },
    ],
  );
  t.equal(inputItems('x'), 1);
  t.equal(inputItems([1, 2]), 1, 'one token list is one prompt');
  t.equal(inputItems([[1], [2]]), 2);
  t.equal(inputItems(['a', 'b', 'c']), 3);
});

t.test(
  'output bounds: responses clamp max_output_tokens; completions hold prompts × max(n, best_of) × max_tokens (16 by default)',
  async (t) => {
    const model = { maxOutputTokens: 100 } as Parameters<typeof RESPONSES_ENDPOINT.output>[1];
    t.same(RESPONSES_ENDPOINT.output({ model: 'm', max_output_tokens: 500 }, model), { perChoice: 100, total: 100 });
    t.same(RESPONSES_ENDPOINT.output({ model: 'm' }, model), { perChoice: 100, total: 100 });
    t.same(RESPONSES_ENDPOINT.output({ model: 'm', max_output_tokens: 7 }, model), { perChoice: 7, total: 7 });
    t.same(COMPLETIONS_ENDPOINT.output({ model: 'm', prompt: 'x' }, model), { perChoice: 16, total: 16 });
    t.same(COMPLETIONS_ENDPOINT.output({ model: 'm', prompt: ['a', 'b'], n: 2, best_of: 3, max_tokens: 500 }, model), {
      perChoice: 100,
      total: 600,
    });
    t.same(EMBEDDINGS_ENDPOINT.output({ model: 'm', input: 'x' }, model), { perChoice: 0, total: 0 });
  },
);

t.test('hold bounds are never below the fallback count of the same prompt', async (t) => {
  const texts = [
    'Hello there',
    'naïve café 日本語のテキスト 😀😀',
    'x'.repeat(500),
    'function f(x) { return x * 2; }\n'.repeat(20),
    '<|endoftext|> 12345',
  ];
  for (const text of texts) {
    const bodies = [
      { model: 'm', input: text, instructions: text },
      {
        model: 'm',
        input: [
          { role: 'user', content: text },
          { role: 'assistant', content: [{ type: 'output_text', text }] },
        ],
      },
    ];
    for (const body of bodies) {
      const payload = Buffer.from(JSON.stringify(body));
      const counted = await RESPONSES_ENDPOINT.countPrompt(payload, tokenizer, budget());
      t.ok(estimateResponsesPrompt(body) >= counted, `responses ${estimateResponsesPrompt(body)} ≥ ${counted}`);
    }
    for (const input of [text, [text, text.slice(0, 3)]]) {
      const payload = Buffer.from(JSON.stringify({ model: 'm', input, prompt: input }));
      t.ok(inputTokenBound(input, 2) >= (await EMBEDDINGS_ENDPOINT.countPrompt(payload, tokenizer, budget())), 'embeddings');
      t.ok(
        COMPLETIONS_ENDPOINT.estimatePrompt({ model: 'm', prompt: input }, 0) >=
          (await COMPLETIONS_ENDPOINT.countPrompt(payload, tokenizer, budget())),
        'completions',
      );
    }
  }
  t.equal(inputTokenBound([[1, 2, 3], [4]], 2), 8, 'token ids count as themselves, plus 2 per item');
});

t.test('upstream payloads: model rewritten, caps sent, usage forced on completion streams only', async (t) => {
  const model = { upstreamModel: 'up/m', maxOutputTokens: 100 } as Parameters<typeof RESPONSES_ENDPOINT.payload>[1];
  t.same(JSON.parse(RESPONSES_ENDPOINT.payload({ model: 'm', input: 'x', stream: true, store: false }, model, 40).toString()), {
    model: 'up/m',
    input: 'x',
    stream: true,
    store: false,
    max_output_tokens: 40,
  });
  t.same(
    JSON.parse(COMPLETIONS_ENDPOINT.payload({ model: 'm', prompt: 'x', stream: true, stream_options: { foo: 1 } }, model, 16).toString()),
    {
      model: 'up/m',
      prompt: 'x',
      stream: true,
      stream_options: { foo: 1, include_usage: true },
      max_tokens: 16,
    },
  );
  t.same(JSON.parse(EMBEDDINGS_ENDPOINT.payload({ model: 'm', input: ['a'], dimensions: 3 }, model, 0).toString()), {
    model: 'up/m',
    input: ['a'],
    dimensions: 3,
  });
  t.same(COMPLETIONS_ENDPOINT.reply({ model: 'm', prompt: 'x', stream: true }), {
    stream: true,
    wantsUsage: false,
    severalChoices: false,
    echo: false,
  });
  // vLLM's echo puts the prompt in the answer's text: billing must not count it as completion.
  t.equal(COMPLETIONS_ENDPOINT.reply({ model: 'm', prompt: 'x', echo: true }).echo, true, 'echo');
  // Several choices in all (n × prompts): only the usage-only chunk's usage is the answer's (sse-scanner.ts).
  t.equal(COMPLETIONS_ENDPOINT.reply({ model: 'm', prompt: ['x', 'y'], stream: true }).severalChoices, true, 'two prompts');
  t.equal(COMPLETIONS_ENDPOINT.reply({ model: 'm', prompt: 'x', n: 2, stream: true }).severalChoices, true, 'n: 2');
  t.equal(COMPLETIONS_ENDPOINT.reply({ model: 'm', prompt: 'x', best_of: 3, stream: true }).severalChoices, true, 'best_of: 3');
  t.same(
    RESPONSES_ENDPOINT.reply({ model: 'm', stream: true }),
    { stream: true, wantsUsage: true },
    'nothing to drop from a Responses stream',
  );
});

t.test('responses: previous_response_id or conversation makes a request stateful, held at the context window', async (t) => {
  const { statefulResponses } = await import('../../src/routes/responses.ts');
  const { compileConfig } = await import('../../src/config/schema.ts');
  const [model] = compileConfig(
    { models: [{ name: 'm', context_window: 8192, price: { input: 1, output: 1 }, upstreams: [{ url: 'http://x/v1' }] }] },
    {},
  ).models;
  t.equal(statefulResponses({ model: 'm', input: 'hi' }, model!, 10), undefined, 'stateless');
  t.equal(statefulResponses({ model: 'm', input: 'hi', previous_response_id: null }, model!, 10), undefined, 'null is not set');
  t.equal(statefulResponses({ model: 'm', previous_response_id: 'resp_1' }, model!, 10)?.heldPrompt, 8192);
  t.equal(statefulResponses({ model: 'm', conversation: 'conv_1' }, model!, 10)?.heldPrompt, 8192);
  t.equal(statefulResponses({ model: 'm', conversation: { id: 'conv_1' } }, model!, 9000)?.heldPrompt, 9000, 'at least the new input');
  t.equal(statefulResponses({ model: 'm', previous_response_id: 'resp_1' }, model!, 10)?.retrievePath?.('resp/1'), '/responses/resp%2F1');
});

t.test('responses: a stored prompt template or an item_reference is held at the context window too', async (t) => {
  const { statefulResponses } = await import('../../src/routes/responses.ts');
  const { compileConfig } = await import('../../src/config/schema.ts');
  const [model] = compileConfig(
    { models: [{ name: 'm', context_window: 8192, price: { input: 1, output: 1 }, upstreams: [{ url: 'http://x/v1' }] }] },
    {},
  ).models;
  const held = (body: Record<string, unknown>) => statefulResponses({ model: 'm', ...body }, model!, 10)?.heldPrompt;
  t.equal(held({ input: 'hi', prompt: { id: 'pmpt_1', version: '2' } }), 8192, 'prompt');
  t.equal(held({ input: 'hi', prompt: null }), undefined, 'prompt: null is not set');
  t.equal(held({ input: [{ type: 'item_reference', id: 'msg_1' }] }), 8192, 'item_reference');
  t.equal(held({ input: [{ role: 'user', content: 'hi' }, { id: 'msg_1' }] }), 8192, 'an item with neither type nor role is a reference');
  t.equal(held({ input: [{ id: 'msg_1', type: null }] }), 8192, 'type: null too');
  t.equal(
    held({
      input: [
        { role: 'user', content: 'hi' },
        { type: 'message', role: 'assistant', content: 'x' },
        { type: 'function_call_output', call_id: 'c', output: '1' },
      ],
    }),
    undefined,
    'messages and tool outputs are seen in full',
  );
  t.equal(
    statefulResponses({ model: 'm', prompt: { id: 'pmpt_1' } }, model!, 10)?.retrievePath?.('resp_1'),
    '/responses/resp_1',
    'the stored response is asked for its usage',
  );
});

t.test("completions: vLLM's prompt_embeds hold the context window per item; no stored answer to ask", async (t) => {
  const { compileConfig } = await import('../../src/config/schema.ts');
  const [model] = compileConfig(
    { models: [{ name: 'm', context_window: 8192, price: { input: 1, output: 1 }, upstreams: [{ url: 'http://x/v1' }] }] },
    {},
  ).models;
  const held = (body: Record<string, unknown>) => COMPLETIONS_ENDPOINT.stateful?.({ model: 'm', prompt: '', ...body }, model!, 10);
  t.equal(held({}), undefined, 'no embeddings: the text bound alone');
  t.equal(held({ prompt_embeds: null }), undefined, 'null is not set');
  t.same(held({ prompt_embeds: 'AAAA' }), { heldPrompt: 10 + 8192 }, 'one tensor, whatever its bytes');
  t.same(held({ prompt_embeds: ['AAAA', 'AAAA', 'AAAA'] }), { heldPrompt: 10 + 3 * 8192 }, 'one context window per tensor');
});

t.test("chat: vLLM's prompt_embeds content parts hold the context window; no stored answer to ask", async (t) => {
  const { compileConfig } = await import('../../src/config/schema.ts');
  const config = compileConfig(
    { models: [{ name: 'm', context_window: 8192, price: { input: 1, output: 1 }, upstreams: [{ url: 'http://x/v1' }] }] },
    {},
  );
  const [model] = config.models;
  const limits = config.limits;
  /** As routes/metered.ts prepare() runs them: validate, estimate, then the stateful hook. */
  const prepared = (content: unknown) => {
    const raw = {
      model: 'm',
      messages: [
        { role: 'system', content: 'be brief' },
        { role: 'user', content },
      ],
    };
    const body = CHAT_COMPLETIONS.validate(raw, limits);
    const estimate = CHAT_COMPLETIONS.estimatePrompt(body, Buffer.byteLength(JSON.stringify(raw)));
    const payload = CHAT_COMPLETIONS.payload(body, model!, 16);
    return { estimate, held: CHAT_COMPLETIONS.stateful?.(body, model!, estimate), payload: JSON.parse(payload.toString('utf8')) };
  };
  const embeds = { type: 'prompt_embeds', data: 'AAAA' };
  t.equal(prepared('hi').held, undefined, 'text: the estimate alone');
  t.equal(prepared([{ type: 'text', text: 'hi' }]).held, undefined, 'text parts: the estimate alone');
  t.equal(prepared([{ type: 'image_url', image_url: { url: 'data:,' } }]).held, undefined, 'an image: its allowance');
  const one = prepared([{ type: 'text', text: 'hi' }, embeds]);
  t.same(one.held, { heldPrompt: 8192 }, 'one tensor, whatever its bytes: the context window (no retrievePath)');
  t.ok(one.estimate < 8192 && one.estimate >= PER_NON_TEXT_PART, `beside an estimate of ${one.estimate}`);
  t.same(prepared([embeds, embeds, embeds]).held, { heldPrompt: 8192 }, 'parts share the one prompt, so one window');
  const big = 'x'.repeat(20_000);
  t.same(
    prepared([{ type: 'text', text: big }, embeds]).held,
    { heldPrompt: prepared([{ type: 'text', text: big }, embeds]).estimate },
    'or the estimate, when larger',
  );
  t.same(one.payload.messages[1].content, [{ type: 'text', text: 'hi' }, embeds], 'the part is passed through as it came');
  t.same(Object.keys(one.payload).sort(), ['max_tokens', 'messages', 'model'], 'and nothing is added to the payload');
});

t.test('completions: each prompt_embeds item is a prompt of its own for the output bound (vLLM answers each)', async (t) => {
  const { compileConfig } = await import('../../src/config/schema.ts');
  const [model] = compileConfig(
    { models: [{ name: 'm', max_output_tokens: 100, price: { input: 1, output: 1 }, upstreams: [{ url: 'http://x/v1' }] }] },
    {},
  ).models;
  const out = (body: Record<string, unknown>) => COMPLETIONS_ENDPOINT.output({ model: 'm', prompt: '', max_tokens: 10, ...body }, model!);
  t.same(out({}), { perChoice: 10, total: 10 }, 'one text prompt');
  t.same(out({ prompt_embeds: 'AAAA' }), { perChoice: 10, total: 20 }, 'the text prompt and one tensor');
  t.same(out({ prompt_embeds: ['AAAA', 'AAAA', 'AAAA'], n: 2 }), { perChoice: 10, total: 80 }, '(1 + 3 prompts) × n');
  t.equal(
    COMPLETIONS_ENDPOINT.reply({ model: 'm', prompt: 'x', prompt_embeds: 'AAAA' }).severalChoices,
    true,
    'two prompts: several choices',
  );
  t.equal(COMPLETIONS_ENDPOINT.reply({ model: 'm', prompt: 'x' }).severalChoices, false, 'one prompt: one choice');
});

t.test('completions: a prompt_embeds list is bounded like the prompt list (422 too_long past 2,048 items)', async (t) => {
  const limits = { maxN: 8 } as never;
  t.doesNotThrow(() => COMPLETIONS_ENDPOINT.validate({ model: 'm', prompt: '', prompt_embeds: Array(2048).fill('AAAA') }, limits));
  let detail: { loc: unknown[]; type: string }[] = [];
  try {
    COMPLETIONS_ENDPOINT.validate({ model: 'm', prompt: '', prompt_embeds: Array(2049).fill('AAAA') }, limits);
  } catch (e) {
    detail = (e as { detail: typeof detail }).detail;
  }
  t.same(
    detail.map((d) => [d.loc.join('.'), d.type]),
    [['body.prompt_embeds', 'too_long']],
    '2,049 items: refused',
  );
});
