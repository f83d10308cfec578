// SPEC §4 "no debit exceeds its hold" for chat request fields a chat template renders into the prompt
// besides the messages and tools: vLLM's `documents` (RAG documents: Granite, Command-R templates) and
// `chat_template_kwargs` (values a template renders), and a `response_format` JSON schema (hosted OpenAI
// renders it into the prompt); on /v1/responses the same schema as `text.format` of type `json_schema`.
// The simulator counts `documents` and `chat_template_kwargs` into its chat prompt usage as vLLM would
// (src/simulator/output.ts simPromptTokens), and a Responses `text.format` JSON schema as hosted OpenAI
// does (src/simulator/responses.ts simResponsesPromptTokens). They were held at ~100 tokens whatever their
// size, so concurrent requests on one key took the balance far below zero; and an answer without usage
// was billed the messages alone. On a real redis-server.
import t, { type Test } from 'tap';
import { startRedis } from '../helpers/redis.ts';
import type { TestGateway } from '../helpers/gateway.ts';
import { createTokenizer } from '../../src/meter/tokenizer.ts';
import { simPromptTokens } from '../../src/simulator/simulator.ts';
import { simResponsesPromptTokens } from '../../src/simulator/responses.ts';
import { startTokenPriced } from './chat-fixture.ts';
import { checkLedger, debitOf, ledgerOf, poorCrowd, settledAccount, type Entry } from './credit-support.ts';

const tokenizer = createTokenizer();
await tokenizer.load();

/** 10 documents of ~3,000 characters: ~30 KB, ~7,500 simulator tokens. */
const DOCUMENTS = Array.from({ length: 10 }, (_, i) => ({ title: `doc ${i}`, text: `word${i} `.repeat(500) }));
const MESSAGES = [{ role: 'user', content: 'hi' }];

async function setup(t: Test, redisUrl: string): Promise<TestGateway> {
  return (await startTokenPriced(t, { maxOutputTokens: 8192, contextWindow: 131_072 }, redisUrl)).gw;
}

function post(gw: TestGateway, key: string, body: Record<string, unknown>): Promise<Response> {
  return fetch(`${gw.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'm', messages: MESSAGES, ...body }),
  });
}

function postResponses(gw: TestGateway, key: string, body: Record<string, unknown>): Promise<Response> {
  return fetch(`${gw.url}/v1/responses`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'm', input: 'hi', ...body }),
  });
}

/** A JSON schema of 400 described fields: ~36 KB, ~9,000 simulator tokens once rendered. */
const BIG_SCHEMA = {
  type: 'object',
  properties: Object.fromEntries(
    Array.from({ length: 400 }, (_, i) => [`field_${i}`, { type: 'string', description: `The value of field number ${i} of the record.` }]),
  ),
};

const redis = await startRedis(t);
if (redis) {
  t.test('documents and chat_template_kwargs on a poor account: 32 concurrent requests never overspend', async (t) => {
    const gw = await setup(t, redis.url);
    const tail = { max_tokens: 16, sim: { tokens: 4 } };
    for (const [account, extra] of [
      ['docs', { documents: DOCUMENTS }],
      ['kwargs', { chat_template_kwargs: { enable_thinking: false, documents: DOCUMENTS } }],
    ] as const) {
      const body = { ...extra, ...tail };
      const prompt = simPromptTokens({ messages: MESSAGES, ...extra });
      t.ok(prompt > 7000, `${account}: the upstream counts ${prompt} prompt tokens`);
      // 200,000 µ: 26 requests' worth of what the upstream bills, 3 holds.
      await poorCrowd(t, gw, account, 200_000, prompt, (key) => post(gw, key, body));
    }
  });

  t.test('answered without usage: the prompt counted includes documents, template kwargs and a response schema', async (t) => {
    const gw = await setup(t, redis.url);
    const { key } = await gw.createKey({ account: 'nousage', env: 'live' });
    await gw.grant('nousage', 10_000_000);
    const schema = {
      name: 'record',
      schema: {
        type: 'object',
        properties: Object.fromEntries(
          Array.from({ length: 40 }, (_, i) => [
            `field_${i}`,
            { type: 'string', description: `The value of field number ${i} of the record.` },
          ]),
        ),
      },
    };
    const kwargs = { enable_thinking: false, system_note: 'Answer from the documents only. '.repeat(100) };
    const cases: [string, Record<string, unknown>, unknown][] = [
      ['documents', { documents: DOCUMENTS }, DOCUMENTS],
      ['chat_template_kwargs', { chat_template_kwargs: kwargs }, kwargs],
      ['response_format', { response_format: { type: 'json_schema', json_schema: schema } }, schema],
    ];
    const messagesOnly = tokenizer.countPromptTokens(MESSAGES);
    for (const [name, extra, counted] of cases) {
      // Counted as the gateway counts text: in slices (meter/tokenizer.ts countTextBounded).
      const fieldTokens = await tokenizer.countTextBounded(JSON.stringify(counted));
      for (const stream of [false, true]) {
        const res = await post(gw, key, { ...extra, stream, max_tokens: 16, sim: { tokens: 4, usage: 'absent' } });
        t.equal(res.status, 200);
        await res.text();
        const e = await debitOf(gw, 'nousage', res.headers.get('x-request-id')!);
        t.equal(e.usage_source, 'estimated', `${name}, stream ${stream}: estimated`);
        t.equal(
          e.prompt_tokens,
          messagesOnly + fieldTokens,
          `${name}, stream ${stream}: billed the messages (${messagesOnly}) and the field's JSON (${fieldTokens} tokens)`,
        );
        t.ok(-e.amount_micros <= e.hold_micros!, `${name}, stream ${stream}: within its hold (${e.amount_micros} of ${e.hold_micros})`);
      }
    }
    checkLedger(t, await ledgerOf(gw.admin, 'nousage'), await settledAccount(gw, 'nousage'));
  });

  t.test('responses text.format json_schema on a poor account: 32 concurrent requests never overspend', async (t) => {
    const gw = await setup(t, redis.url);
    const body = {
      text: { format: { type: 'json_schema', name: 'record', schema: BIG_SCHEMA, strict: true } },
      max_output_tokens: 16,
      sim: { tokens: 4 },
    };
    const prompt = simResponsesPromptTokens(body);
    t.ok(prompt > 7000, `the upstream counts ${prompt} input tokens`);
    // 200,000 µ: 22 requests' worth of what the upstream bills, 2 holds.
    await poorCrowd(t, gw, 'rformat', 200_000, prompt, (key) => postResponses(gw, key, body));
  });

  t.test('responses answered without usage: the prompt counted includes a text.format JSON schema, not other formats', async (t) => {
    const gw = await setup(t, redis.url);
    const { key } = await gw.createKey({ account: 'rnousage', env: 'live' });
    await gw.grant('rnousage', 10_000_000);
    const format = { type: 'json_schema', name: 'record', schema: BIG_SCHEMA, strict: true };
    const formatTokens = await tokenizer.countTextBounded(JSON.stringify(format));
    for (const stream of [false, true]) {
      const billed = async (extra: Record<string, unknown>): Promise<Entry> => {
        const res = await postResponses(gw, key, { ...extra, stream, max_output_tokens: 16, sim: { tokens: 4, usage: 'absent' } });
        t.equal(res.status, 200);
        await res.text();
        const e = await debitOf(gw, 'rnousage', res.headers.get('x-request-id')!);
        t.equal(e.usage_source, 'estimated');
        t.ok(-e.amount_micros <= e.hold_micros!, `stream ${stream}: within its hold (${e.amount_micros} of ${e.hold_micros})`);
        return e;
      };
      const plain = await billed({});
      const schema = await billed({ text: { format } });
      t.equal(
        schema.prompt_tokens! - plain.prompt_tokens!,
        formatTokens,
        `stream ${stream}: billed the input (${plain.prompt_tokens}) and the format's JSON (${formatTokens} tokens)`,
      );
      const json = await billed({ text: { format: { type: 'json_object' } } });
      t.equal(json.prompt_tokens, plain.prompt_tokens, `stream ${stream}: a json_object format adds nothing`);
    }
    checkLedger(t, await ledgerOf(gw.admin, 'rnousage'), await settledAccount(gw, 'rnousage'));
  });
}
