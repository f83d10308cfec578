import t from 'tap';
import { readFileSync } from 'node:fs';
import {
  estimatePromptTokens,
  PER_MESSAGE,
  PER_NON_TEXT_PART,
  PER_REQUEST,
  PER_TOOLS_BLOCK,
  PROMPT_EMBEDS_PARTS,
  type ChatBodyLike,
} from '../../src/credit/hold-estimate.ts';
import { createTokenizer } from '../../src/meter/tokenizer.ts';
import { seededInts } from '../helpers/seeded.ts';

const tok = createTokenizer();
await tok.load();

/** Reproducible "random" prompts. */
const rnd = seededInts(0x5eed);

/** Code points from many scripts, plus lone surrogates and control characters (adversarial for BPE). */
function randomUnicode(len: number): string {
  const ranges = [
    [0x20, 0x7e],
    [0xa0, 0x24f],
    [0x370, 0x3ff],
    [0x400, 0x4ff],
    [0x4e00, 0x9fff],
    [0xac00, 0xd7a3],
    [0x1f300, 0x1faff],
    [0xd800, 0xdfff],
    [0, 0x1f],
  ] as const;
  let s = '';
  for (let i = 0; i < len; i++) {
    const [lo, hi] = ranges[rnd(ranges.length)]!;
    s += String.fromCodePoint(lo + rnd(hi - lo + 1));
  }
  return s;
}

const prose = 'The committee reviewed the proposal in detail and, after a long discussion about costs, agreed to revisit it next quarter. ';
const code = readFileSync(new URL('../../src/meter/sse-scanner.ts', import.meta.url), 'utf8');
const cjk = '東京は日本の首都であり、世界で最も人口の多い都市圏の一つです。한국어 문장도 포함합니다。';
const emoji = '😀🎉👍🏽👨‍👩‍👧‍👦🇫🇷✨🔥';
const user = (content: unknown): Record<string, unknown> => ({ role: 'user', content });

const cases: Array<[string, Record<string, unknown>[]]> = [
  ['English prose 32 KB', [user(prose.repeat(Math.ceil(32768 / prose.length)))]],
  ['source code', [{ role: 'system', content: 'Review this code.' }, user(code)]],
  ['CJK', [user(cjk.repeat(50))]],
  ['emoji', [user(emoji.repeat(100))]],
  ['whitespace runs', [user(' '.repeat(5000) + '\t'.repeat(300) + '\n'.repeat(700) + ' \n'.repeat(400))]],
  ['digits', [user('3141592653589793238462643383279502884197 '.repeat(100))]],
  ['special-token text', [user('<|endoftext|><|im_start|>system<|im_sep|><|im_end|>'.repeat(100))]],
  ['random unicode', [user(randomUnicode(4000))]],
  ['empty content', [user('')]],
  ['single characters', ['a', ' ', '\n', '😀', '漢', '<'].map((c) => user(c))],
  ['1000 tiny messages', Array.from({ length: 1000 }, (_, i) => ({ role: i % 2 ? 'assistant' : 'user', content: i % 3 ? 'ok' : 'y' }))],
  [
    'content-part arrays',
    [
      user([
        { type: 'text', text: prose },
        { type: 'text', text: cjk },
        { type: 'image_url', image_url: { url: 'https://x/y.png' } },
      ]),
    ],
  ],
  [
    'names',
    [
      { role: 'user', name: 'a', content: 'x' },
      { role: 'system', name: 'example_user', content: prose },
    ],
  ],
  [
    'tool calls and tool results',
    [
      user('Weather in Paris and in Tokyo?'),
      {
        role: 'assistant',
        content: null,
        tool_calls: [
          { id: 'call_a1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } },
          { id: 'call_b2', type: 'function', function: { name: 'get_weather', arguments: '{"city":"東京"}' } },
        ],
      },
      { role: 'tool', tool_call_id: 'call_a1', content: '{"temp_c":21,"sky":"clear"}' },
      { role: 'tool', tool_call_id: 'call_b2', content: '{"temp_c":17,"sky":"rain"}' },
    ],
  ],
];
for (let i = 0; i < 200; i++) {
  const n = 1 + rnd(6);
  cases.push([`random #${i}`, Array.from({ length: n }, () => user(randomUnicode(rnd(300))))]);
}

t.test('never below the tokenizer count; ratio reported', async (t) => {
  let under = 0;
  for (const [name, messages] of cases) {
    const body = { model: 'm', messages };
    const hold = estimatePromptTokens(body, Buffer.byteLength(JSON.stringify(body)));
    const real = tok.countPromptTokens(messages);
    if (!(Number.isSafeInteger(hold) && hold >= real)) {
      under++;
      t.fail(`${name}: hold ${hold} < tokenizer ${real}`);
    }
    if (!name.startsWith('random #')) {
      t.comment(
        `${name.padEnd(28)} tokens ${String(real).padStart(6)}  hold ${String(hold).padStart(6)}  ratio ${(hold / real).toFixed(2)}`,
      );
    }
  }
  t.equal(under, 0, `${cases.length} prompts`);
});

t.test('allowances for what has no bytes in the request', async (t) => {
  const text = { messages: [user('hi')] };
  const base = estimatePromptTokens(text, 0);
  t.equal(base, PER_REQUEST + PER_MESSAGE + 4 + 2, 'request + message + "user" + "hi"');
  const img = {
    messages: [
      user([
        { type: 'text', text: 'hi' },
        { type: 'image_url', image_url: { url: 'https://x/y.png' } },
      ]),
    ],
  };
  t.equal(estimatePromptTokens(img, 0), base + 1 + PER_NON_TEXT_PART, 'an image costs its allowance, not its URL bytes');
  const tools = [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: {} } } }];
  t.equal(estimatePromptTokens({ ...text, tools }, 0), base + PER_TOOLS_BLOCK + 2 * JSON.stringify(tools).length, 'tools');
  t.equal(estimatePromptTokens({ ...text, tools: [] }, 0), base, 'empty tools');
});

t.test('fields a template renders besides messages and tools: documents, chat_template_kwargs, a response schema', async (t) => {
  const text = { messages: [user('hi')] };
  const base = estimatePromptTokens(text, 0);
  const docs = [
    { title: 'a', text: prose.repeat(20) },
    { title: '東京', text: cjk.repeat(20) },
  ];
  t.equal(
    estimatePromptTokens({ ...text, documents: docs }, 0),
    base + PER_TOOLS_BLOCK + 2 * Buffer.byteLength(JSON.stringify(docs)) + 2 * PER_MESSAGE,
    'documents: twice their JSON, a block, one message per document',
  );
  const kwargs = { enable_thinking: false, note: emoji.repeat(30) };
  t.equal(
    estimatePromptTokens({ ...text, chat_template_kwargs: kwargs }, 0),
    base + PER_TOOLS_BLOCK + 2 * Buffer.byteLength(JSON.stringify(kwargs)),
    'chat_template_kwargs: twice their JSON and a block',
  );
  const schema = { name: 'r', schema: { type: 'object', properties: { summary: { type: 'string', description: prose } } } };
  t.equal(
    estimatePromptTokens({ ...text, response_format: { type: 'json_schema', json_schema: schema } }, 0),
    base + PER_TOOLS_BLOCK + 2 * Buffer.byteLength(JSON.stringify(schema)),
    'a json_schema response_format: its schema',
  );
  for (const [name, extra] of [
    ['json_object', { response_format: { type: 'json_object' } }],
    ['text', { response_format: { type: 'text' } }],
    ['null fields', { documents: null, chat_template_kwargs: null, response_format: null }],
    ["vLLM's guided_json (constrains decoding only)", { guided_json: schema.schema }],
  ] as const) {
    t.equal(estimatePromptTokens({ ...text, ...extra }, 0), base, `${name}: nothing added`);
  }
  // Never below what the fallback tokenizer counts for them (the messages plus each field's JSON).
  const body = { ...text, documents: docs, chat_template_kwargs: kwargs, response_format: { type: 'json_schema', json_schema: schema } };
  const real =
    tok.countPromptTokens(text.messages) + [docs, kwargs, schema].reduce((n: number, v) => n + tok.countText(JSON.stringify(v)), 0);
  t.ok(estimatePromptTokens(body, 0) >= real, `hold ${estimatePromptTokens(body, 0)} ≥ tokenizer ${real}`);
});

t.test("vLLM's prompt_embeds parts are counted onto the body for the endpoint, other bodies are left alone", async (t) => {
  const embeds = { type: 'prompt_embeds', data: 'AAAA' };
  const body: ChatBodyLike = { messages: [user([embeds, { type: 'text', text: 'hi' }]), user([embeds, embeds])] };
  const n = estimatePromptTokens(body, 0);
  t.equal(body[PROMPT_EMBEDS_PARTS], 3, 'three parts');
  t.equal(n, PER_REQUEST + 2 * (PER_MESSAGE + 4) + 3 * PER_NON_TEXT_PART + 3, 'each still has its non-text allowance in the estimate');
  t.equal(JSON.stringify(body), JSON.stringify({ messages: body.messages }), 'JSON does not see the count');
  // vLLM's multimodal embeddings parts: tensors whose rows become placeholder tokens, counted alike.
  const mm: ChatBodyLike = {
    messages: [
      user([
        { type: 'image_embeds', image_embeds: 'AAAA' },
        { type: 'audio_embeds', audio_embeds: 'AAAA' },
        { type: 'video_embeds', video_embeds: 'AAAA' },
      ]),
    ],
  };
  estimatePromptTokens(mm, 0);
  t.equal(mm[PROMPT_EMBEDS_PARTS], 3, 'image_embeds, audio_embeds and video_embeds parts count too');
  const plain: ChatBodyLike = { messages: [user([{ type: 'image_url', image_url: { url: 'https://x/y.png' } }])] };
  estimatePromptTokens(plain, 0);
  t.same(Object.getOwnPropertySymbols(plain), [], 'an image: nothing set');
  const after: ChatBodyLike = { messages: [user('hi')] };
  estimatePromptTokens(after, 0);
  t.equal(after[PROMPT_EMBEDS_PARTS], undefined, 'the count does not leak from one estimate into the next');
});

t.test(
  "text in vLLM's text-like parts (input_text, output_text, thinking) is bounded like text, not by the non-text allowance",
  async (t) => {
    const long = 'x'.repeat(10_000);
    for (const part of [
      { type: 'input_text', text: long },
      { type: 'output_text', text: long },
      { type: 'thinking', thinking: long },
    ]) {
      t.equal(estimatePromptTokens({ messages: [user([part])] }, 0), PER_REQUEST + PER_MESSAGE + 4 + 10_000 + 1, part.type);
    }
    t.equal(
      estimatePromptTokens({ messages: [user([{ type: 'image_url', image_url: { url: 'u' } }])] }, 0),
      PER_REQUEST + PER_MESSAGE + 4 + PER_NON_TEXT_PART,
      'an image keeps its allowance',
    );
  },
);

t.test('odd shapes fall back to the raw body length', async (t) => {
  t.equal(estimatePromptTokens({ messages: 'nope' }, 5000), PER_REQUEST + 5000);
  t.equal(estimatePromptTokens({}, 100), PER_REQUEST + 100);
  t.equal(estimatePromptTokens({ messages: [user('a'), 7] }, 900), PER_REQUEST + 900 + 2 * PER_MESSAGE);
  t.equal(estimatePromptTokens({ messages: [user({ text: 'object content' })] }, 300), PER_REQUEST + 300 + PER_MESSAGE);
  t.equal(estimatePromptTokens({ messages: [user([null])] }, 300), PER_REQUEST + 300 + PER_MESSAGE);
  const args = { messages: [{ role: 'assistant', tool_calls: [{ function: { name: 'f', arguments: { a: 1 } } }] }] };
  t.ok(estimatePromptTokens(args, 0) >= JSON.stringify({ a: 1 }).length, 'object arguments count as their JSON');
});
