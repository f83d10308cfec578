// SPEC §4 "no debit exceeds its hold" for vLLM's chat form of /v1/embeddings (EmbeddingChatRequest:
// `messages` rendered with the chat template, plus `chat_template`, `chat_template_kwargs`, …). vLLM's
// request type is the union EmbeddingCompletionRequest | EmbeddingChatRequest, both allowing extra
// fields, so a body with `input` and a non-empty `messages` list validates as both, and pydantic's smart
// union takes the chat form (more fields set, each message's keys counted): vLLM embeds the rendered
// messages and ignores `input`. The simulator answers so (src/simulator/completions.ts
// simEmbeddingsChatForm). The gateway held and counted `input` alone, so a crowd on one key took the
// balance far below zero and an answer without usage was billed `input`. On a real redis-server.
import t, { type Test } from 'tap';
import { startRedis } from '../helpers/redis.ts';
import { startGateway, type TestGateway } from '../helpers/gateway.ts';
import { createTokenizer } from '../../src/meter/tokenizer.ts';
import { simPromptTokens } from '../../src/simulator/simulator.ts';
import { startSim } from './chat-fixture.ts';
import { checkLedger, debitOf, ledgerOf, poorCrowd, settledAccount } from './credit-support.ts';

const tokenizer = createTokenizer();
await tokenizer.load();

const CONTEXT_WINDOW = 16_384;
/** ~30 KB of message text: ~7,500 simulator tokens. */
const BIG_MESSAGES = [
  { role: 'system', content: 'Represent the document for retrieval. '.repeat(20) },
  { role: 'user', content: 'word '.repeat(6000) },
];
/** A 79-byte chat template whose loop renders the messages 120 times (the simulator's `range(N)` rule). */
const LOOP_TEMPLATE = '{% for _ in range(120) %}{% for m in messages %}{{ m.content }}{% endfor %}{% endfor %}';
const SMALL_MESSAGES = [{ role: 'user', content: 'x'.repeat(400) }];

async function setup(t: Test, redisUrl: string): Promise<TestGateway> {
  const sim = await startSim(t);
  return startGateway(t, {
    redisUrl,
    upstreamUrl: sim.url,
    config: {
      limits: { max_concurrent_per_key: 1000 },
      models: [
        {
          name: 'm',
          max_output_tokens: 8192,
          context_window: CONTEXT_WINDOW,
          endpoints: ['embeddings'],
          price: { input: 1, output: 1 },
          upstreams: [{ url: sim.url, api_key: 'upstream-secret' }],
        },
      ],
    },
  });
}

function post(gw: TestGateway, key: string, body: Record<string, unknown>): Promise<Response> {
  return fetch(`${gw.url}/v1/embeddings`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'm', input: 'hi', ...body }),
  });
}

const redis = await startRedis(t);
if (redis) {
  t.test('input beside messages (vLLM chat form) on a poor account: 32 concurrent requests never overspend', async (t) => {
    const gw = await setup(t, redis.url);
    for (const [account, extra, grant] of [
      ['messages', { messages: BIG_MESSAGES }, 200_000], // 26 requests' worth of what the upstream bills
      ['template', { messages: SMALL_MESSAGES, chat_template: LOOP_TEMPLATE }, 20_000],
      ['template-kwargs', { messages: SMALL_MESSAGES, chat_template_kwargs: { chat_template: LOOP_TEMPLATE } }, 20_000],
    ] as const) {
      const prompt = simPromptTokens(extra);
      t.ok(prompt > 7000, `${account}: the upstream embeds ${prompt} rendered tokens, not the 1 of input`);
      await poorCrowd(t, gw, account, grant, prompt, (key) => post(gw, key, extra));
    }
  });

  t.test('answered without usage: the chat form is counted as its messages, a request template as the context window', async (t) => {
    const gw = await setup(t, redis.url);
    const { key } = await gw.createKey({ account: 'nousage', env: 'live' });
    await gw.grant('nousage', 10_000_000);
    const kwargs = { instruction: 'Embed for search. '.repeat(50) };
    // Counted as the gateway counts text: in slices (meter/tokenizer.ts countTextBounded).
    const messages = await tokenizer.countPromptTokensBounded(BIG_MESSAGES);
    const cases: [string, Record<string, unknown>, number][] = [
      ['messages', { messages: BIG_MESSAGES }, messages],
      [
        'messages + chat_template_kwargs',
        { messages: BIG_MESSAGES, chat_template_kwargs: kwargs },
        messages + (await tokenizer.countTextBounded(JSON.stringify(kwargs))),
      ],
      ['chat_template', { messages: SMALL_MESSAGES, chat_template: LOOP_TEMPLATE }, CONTEXT_WINDOW],
      // EmbeddingChatRequest has no `documents` field: vLLM ignores a top-level one.
      ['messages + documents', { messages: BIG_MESSAGES, documents: [{ text: 'doc '.repeat(2000) }] }, messages],
      // An empty list is vLLM's completion form (a tie the first member wins), and so is a list that does
      // not validate as messages: `input` is embedded.
      ['empty messages', { messages: [], input: 'hello world' }, await tokenizer.countTextBounded('hello world')],
      ['not messages', { messages: ['word '.repeat(100)], input: 'hello world' }, await tokenizer.countTextBounded('hello world')],
    ];
    for (const [name, extra, expected] of cases) {
      const res = await post(gw, key, { ...extra, sim: { usage: 'absent' } });
      const text = await res.text();
      t.equal(res.status, 200, `${name}: served`, { body: text });
      const e = await debitOf(gw, 'nousage', res.headers.get('x-request-id')!);
      t.equal(e.usage_source, 'estimated', `${name}: estimated`);
      t.equal(e.prompt_tokens, expected, `${name}: billed ${expected} prompt tokens`);
      t.ok(-e.amount_micros <= e.hold_micros!, `${name}: within its hold`);
    }
    checkLedger(t, await ledgerOf(gw.admin, 'nousage'), await settledAccount(gw, 'nousage'));
  });
}
