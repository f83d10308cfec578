// POST /v1/completions and POST /v1/embeddings through the official openai SDK (issue 19): exact debits
// (embeddings at the input price only), the hold sized from the prompt / input bytes, the new
// `embeddings` scope (403 without it, granted by PATCH /admin/keys/{id}), and models[].endpoints
// (404 model_not_found naming the endpoint, the upstream never contacted).
import t, { type Test } from 'tap';
import { simCompletionText } from '../../src/simulator/simulator.ts';
import { simEmbedding, simInputTokens, SIM_EMBEDDING_DIMENSIONS } from '../../src/simulator/completions.ts';
import { inputTokenBound } from '../../src/routes/text-input.ts';
import { startGateway, type TestGateway } from '../helpers/gateway.ts';
import { SIM_SMALL, accountVsLedger, expectedCost, sdk, sseData, startSim, waitForDebit, type CentPrice } from './chat-fixture.ts';

/** `sim-embed` below: 0.13 credits per million input tokens, no output price. */
const SIM_EMBED: CentPrice = { input: 13n, output: 0n };

async function setup(t: Test, account: string) {
  const sim = await startSim(t);
  const gw = await startGateway(t, {
    upstreamUrl: sim.url,
    config: {
      models: [
        {
          name: 'sim-small',
          upstream_model: 'sim/small-1',
          max_output_tokens: 256,
          price: { input: 1.5, output: 2.25 },
          upstreams: [{ url: sim.url }],
        },
        {
          name: 'sim-embed',
          upstream_model: 'sim/embed-1',
          endpoints: ['embeddings'],
          price: { input: 0.13, output: 0 },
          upstreams: [{ url: sim.url }],
        },
      ],
    },
  });
  const { key, id } = await gw.createKey({ account, env: 'live' });
  await gw.grant(account, 1_000_000);
  return { sim, gw, key, id };
}

async function books(gw: TestGateway, account: string) {
  let s = await accountVsLedger(gw, account);
  for (let i = 0; i < 50 && s.held !== 0; i++) {
    await new Promise((r) => setTimeout(r, 20));
    s = await accountVsLedger(gw, account);
  }
  return s;
}

t.test('completions.create (plain): text, usage, exact debit; max_tokens defaults to 16 and sizes the hold', async (t) => {
  const { sim, gw, key } = await setup(t, 'cmp-a');
  const client = sdk(gw, key);
  for (const [tokens, max] of [
    [5, undefined],
    [40, undefined],
    [40, 30],
  ] as const) {
    const body = { model: 'sim-small', prompt: 'Once upon a time', ...(max !== undefined && { max_tokens: max }) };
    const { data, response } = await client.completions.create(body, { headers: { 'x-sim-tokens': String(tokens) } }).withResponse();
    const cap = max ?? 16;
    const produced = Math.min(tokens, cap);
    t.equal(data.choices[0]!.text, simCompletionText(produced));
    const prompt = simInputTokens(body.prompt);
    t.match(data.usage, { prompt_tokens: prompt, completion_tokens: produced });
    t.equal((sim.requests.at(-1)!.body as { max_tokens: number }).max_tokens, cap, 'the cap is sent upstream');
    const e = await waitForDebit(gw, 'cmp-a', response.headers.get('x-request-id')!);
    t.match(e, {
      prompt_tokens: prompt,
      completion_tokens: produced,
      usage_source: 'upstream',
      amount_micros: -expectedCost(SIM_SMALL, prompt, produced),
      hold_micros: expectedCost(SIM_SMALL, inputTokenBound(body.prompt, 2), cap),
    });
  }
  const s = await books(gw, 'cmp-a');
  t.equal(s.balance, s.sum);
  t.equal(s.held, 0);
});

t.test('completions.create (stream): every token, the usage-only chunk dropped unless asked for, exact debit', async (t) => {
  const { gw, key } = await setup(t, 'cmp-b');
  const client = sdk(gw, key);
  for (const includeUsage of [false, true]) {
    const body = {
      model: 'sim-small',
      prompt: 'Stream a little',
      max_tokens: 50,
      stream: true as const,
      ...(includeUsage && { stream_options: { include_usage: true } }),
    };
    const { data: stream, response } = await client.completions.create(body, { headers: { 'x-sim-tokens': '11' } }).withResponse();
    let text = '';
    let usage;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.text ?? '';
      if (chunk.usage) usage = chunk.usage;
    }
    t.equal(text, simCompletionText(11));
    const prompt = simInputTokens(body.prompt);
    if (includeUsage) t.match(usage, { prompt_tokens: prompt, completion_tokens: 11 });
    else t.equal(usage, undefined, 'no usage chunk the client did not ask for');
    const e = await waitForDebit(gw, 'cmp-b', response.headers.get('x-request-id')!);
    t.match(e, {
      prompt_tokens: prompt,
      completion_tokens: 11,
      usage_source: 'upstream',
      amount_micros: -expectedCost(SIM_SMALL, prompt, 11),
    });
  }
});

t.test('completions: a list of prompts × n is held for every choice; an upstream cut ends with the error chunk', async (t) => {
  const { sim, gw, key } = await setup(t, 'cmp-c');
  const body = { model: 'sim-small', prompt: ['one', 'two', 'three'], n: 2, max_tokens: 10 };
  const res = await fetch(`${gw.url}/v1/completions`, {
    method: 'POST',
    headers: { ...gw.auth(key), 'content-type': 'application/json', 'x-sim-tokens': '4' },
    body: JSON.stringify(body),
  });
  t.equal(res.status, 200);
  await res.text();
  const e = await waitForDebit(gw, 'cmp-c', res.headers.get('x-request-id')!);
  t.equal(
    e.hold_micros,
    expectedCost(SIM_SMALL, inputTokenBound(body.prompt, 2), 10 * 2 * 3),
    'hold covers 3 prompts × 2 choices × 10 tokens',
  );

  const cut = await fetch(`${gw.url}/v1/completions`, {
    method: 'POST',
    headers: { ...gw.auth(key), 'content-type': 'application/json', 'x-sim-tokens': '20', 'x-sim-cut-after': '3' },
    body: JSON.stringify({ model: 'sim-small', prompt: 'cut me', stream: true }),
  });
  const data = sseData(await cut.text());
  t.equal(data.length, 4, '3 chunks and the error');
  t.match(JSON.parse(data.at(-1)!), { error: { code: 'upstream_error' } });
  t.equal(sim.requests.length, 2);
});

t.test('embeddings.create: single and batch input, vectors decoded by the SDK, debit at the input price only', async (t) => {
  const { sim, gw, key, id } = await setup(t, 'emb-a');
  const client = sdk(gw, key);
  for (const input of ['a single sentence to embed', ['first', 'second input', 'the third and longest input of all']]) {
    const { data, response } = await client.embeddings.create({ model: 'sim-embed', input }).withResponse();
    const n = typeof input === 'string' ? 1 : input.length;
    t.equal(data.data.length, n);
    data.data.forEach((d, i) => t.same(d.embedding, simEmbedding(i, SIM_EMBEDDING_DIMENSIONS), `vector ${i}`));
    const prompt = simInputTokens(input);
    t.match(data.usage, { prompt_tokens: prompt });
    t.match(sim.requests.at(-1)!.body, { model: 'sim/embed-1', encoding_format: 'base64' });
    const e = await waitForDebit(gw, 'emb-a', response.headers.get('x-request-id')!);
    t.match(e, {
      key_id: id,
      model: 'sim-embed',
      prompt_tokens: prompt,
      completion_tokens: 0,
      usage_source: 'upstream',
      amount_micros: -expectedCost(SIM_EMBED, prompt, 0),
      hold_micros: expectedCost(SIM_EMBED, inputTokenBound(input, 2), 0),
    });
  }
  const floats = await client.embeddings.create({ model: 'sim-embed', input: 'x', encoding_format: 'float', dimensions: 3 });
  t.same(floats.data[0]!.embedding, simEmbedding(0, 3));
  const s = await books(gw, 'emb-a');
  t.equal(s.balance, s.sum);
  t.equal(s.held, 0);
});

t.test('a key without the embeddings scope gets 403; PATCH /admin/keys/{id} {scopes} grants it', async (t) => {
  const { sim, gw } = await setup(t, 'emb-b');
  const { key, id } = await gw.createKey({ account: 'emb-b', env: 'live', scopes: ['chat', 'models'] });
  const res = await fetch(`${gw.url}/v1/embeddings`, {
    method: 'POST',
    headers: { ...gw.auth(key), 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'sim-embed', input: 'x' }),
  });
  t.equal(res.status, 403);
  t.match(await res.json(), { error: { code: 'permission_denied', message: /'embeddings' scope/ } });
  t.equal(sim.requests.length, 0);

  const patched = await gw.admin(`/admin/keys/${id}`, { method: 'PATCH', body: { scopes: ['chat', 'models', 'embeddings'] } });
  t.equal(patched.status, 200);
  t.same(patched.body.scopes, ['chat', 'models', 'embeddings']);
  const bad = await gw.admin(`/admin/keys/${id}`, { method: 'PATCH', body: { scopes: ['everything'] } });
  t.equal(bad.status, 422);
  // The key cache is invalidated by the patch (SPEC §2a: within 1 s on every instance).
  let status = 0;
  for (let i = 0; i < 50 && status !== 200; i++) {
    const r = await sdk(gw, key)
      .embeddings.create({ model: 'sim-embed', input: 'now allowed' })
      .then(
        () => 200,
        (e: { status?: number }) => e.status ?? 0,
      );
    status = r;
    if (status !== 200) await new Promise((r) => setTimeout(r, 20));
  }
  t.equal(status, 200, 'granted');
});

t.test('models[].endpoints: a model that does not serve the endpoint → 404 model_not_found naming it', async (t) => {
  const { sim, gw, key } = await setup(t, 'ep-a');
  const post = (path: string, body: unknown) =>
    fetch(`${gw.url}${path}`, {
      method: 'POST',
      headers: { ...gw.auth(key), 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
  const cases: [string, unknown][] = [
    ['/v1/embeddings', { model: 'sim-small', input: 'x' }],
    ['/v1/chat/completions', { model: 'sim-embed', messages: [{ role: 'user', content: 'x' }] }],
    ['/v1/responses', { model: 'sim-embed', input: 'x' }],
    ['/v1/completions', { model: 'sim-embed', prompt: 'x' }],
  ];
  for (const [path, body] of cases) {
    const res = await post(path, body);
    t.equal(res.status, 404, path);
    const json = (await res.json()) as { error: { code: string; message: string } };
    t.equal(json.error.code, 'model_not_found');
    t.ok(json.error.message.includes(path), `the message names ${path}: ${json.error.message}`);
  }
  t.equal(sim.requests.length, 0, 'the upstream was never contacted');
  const models = await sdk(gw, key).models.list();
  t.same(
    models.data.map((m) => m.id),
    ['sim-small', 'sim-embed'],
    'GET /v1/models lists every model, whatever its endpoints',
  );
  const s = await books(gw, 'ep-a');
  t.equal(s.entries.filter((e) => e.kind === 'debit').length, 0, 'nothing billed');
});

t.test('embeddings input validation: 422 for an empty list, a mixed list, or a non-string', async (t) => {
  const { gw, key } = await setup(t, 'emb-c');
  for (const input of [[], ['a', 1], 5, null, [[1, 2], 'a']]) {
    const res = await fetch(`${gw.url}/v1/embeddings`, {
      method: 'POST',
      headers: { ...gw.auth(key), 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'sim-embed', input }),
    });
    t.equal(res.status, 422, JSON.stringify(input));
    t.match(await res.json(), { detail: [{ loc: ['body', 'input'] }] });
  }
});
