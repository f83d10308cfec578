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
import { waitFor } from '../helpers/wait.ts';
import { createTokenizer } from '../../src/meter/tokenizer.ts';
import { simPromptTokens } from '../../src/simulator/simulator.ts';
import { startSim } from './chat-fixture.ts';
import { accountOf, checkLedger, ledgerOf, type Entry } from './credit-support.ts';

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

/** Every hold settled: the account, once nothing is held. */
function settled(gw: TestGateway, account: string) {
  return waitFor(
    async () => {
      const a = await accountOf(gw.admin, account);
      return a.held_micros === 0 && a;
    },
    10_000,
    'every hold settled',
  );
}

function debitOf(gw: TestGateway, account: string, requestId: string): Promise<Entry> {
  return waitFor(
    async () => (await ledgerOf(gw.admin, account)).find((e) => e.kind === 'debit' && e.request_id === requestId),
    10_000,
    `the debit of ${requestId}`,
  );
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
      const { key } = await gw.createKey({ account, env: 'live' });
      await gw.grant(account, grant);
      const answers = await Promise.all(
        Array.from({ length: 32 }, async () => {
          const res = await post(gw, key, extra);
          await res.text();
          return res.status;
        }),
      );
      const served = answers.filter((s) => s === 200).length;
      t.ok(
        answers.every((s) => s === 200 || s === 402),
        `${account}: each request is served or refused 402 (${served} served)`,
      );
      t.ok(served >= 1, `${account}: at least one is served`);
      const after = await settled(gw, account);
      t.ok(after.balance_micros >= 0, `${account}: balance ${after.balance_micros} µ from ${grant} µ, never negative`);
      const entries = await ledgerOf(gw.admin, account);
      const debits = entries.filter((e) => e.kind === 'debit');
      t.equal(debits.length, served, `${account}: one debit per served request`);
      t.same(
        debits.filter((e) => -e.amount_micros > (e.hold_micros ?? 0)).map((e) => [e.hold_micros, e.amount_micros]),
        [],
        `${account}: no debit exceeds its hold`,
      );
      t.same(
        debits.filter((e) => e.prompt_tokens !== prompt || e.usage_source !== 'upstream').map((e) => e.prompt_tokens),
        [],
        `${account}: each is billed the ${prompt} tokens the upstream reported`,
      );
      checkLedger(t, entries, after);
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
    checkLedger(t, await ledgerOf(gw.admin, 'nousage'), await settled(gw, 'nousage'));
  });
}
