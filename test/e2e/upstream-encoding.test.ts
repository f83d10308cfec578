// An upstream that compresses its answer although the gateway asks for `accept-encoding: identity`
// (src/upstream/content-coding.ts): the client gets the upstream's content decoded, without
// content-encoding, and the ledger debits exactly what the same answer uncompressed debits, streaming
// or not, with usage or from the tokenizer. A body whose coding breaks is a broken body; a coding the
// gateway cannot decode is an upstream failure; a decompression bomb is cut by the event limit.
import t, { type Test } from 'tap';
import { createServer, request as httpRequest, type IncomingHttpHeaders } from 'node:http';
import OpenAI from 'openai';
import { simCompletionText, simPromptTokens } from '../../src/simulator/simulator.ts';
import { createTokenizer } from '../../src/meter/tokenizer.ts';
import { MAX_PASSED_EVENT_BYTES } from '../../src/meter/relay.ts';
import { startGateway, type TestGateway } from '../helpers/gateway.ts';
import { waitFor } from '../helpers/wait.ts';
import { gzipBomb } from '../helpers/gzip-bomb.ts';
import {
  SIM_SMALL,
  accountVsLedger,
  expectedCost,
  liveGateway,
  metricsText,
  postChat,
  sample,
  sdk,
  sseData,
  startSim,
  startSteeredFront,
  waitForDebit,
  serveUpstream,
} from './chat-fixture.ts';

const tokenizer = createTokenizer();
await tokenizer.load();

/** The codings the simulator really applies; `undefined` is the plain answer they are compared with. */
const CODINGS = [undefined, 'gzip', 'x-gzip', 'deflate', 'br', 'zstd'] as const;

const ERROR_EVENT = { error: { message: String, type: 'upstream_error', code: 'upstream_error', param: null } };

/** Balance = Σ ledger and nothing left held. */
async function checkBooks(t: Test, gw: TestGateway, account: string): Promise<void> {
  const s = await waitFor(
    async () => {
      const s = await accountVsLedger(gw, account);
      return s.held === 0 && s;
    },
    2000,
    'the holds to be settled',
  );
  t.equal(s.balance, s.sum, `${account}: balance equals the ledger sum`);
}

/** A POST read without any decoding of its own (fetch would undo a content-encoding): status, headers, bytes. */
function rawPost(gw: TestGateway, key: string, body: unknown): Promise<{ status: number; headers: IncomingHttpHeaders; body: Buffer }> {
  const url = new URL(`${gw.url}/v1/chat/completions`);
  const payload = JSON.stringify(body);
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      {
        host: url.hostname,
        port: url.port,
        path: url.pathname,
        method: 'POST',
        headers: { ...gw.auth(key), 'content-type': 'application/json', 'accept-encoding': 'gzip, br, zstd' },
      },
      (res) => {
        const parts: Buffer[] = [];
        res.on('data', (c: Buffer) => parts.push(c));
        res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(parts) }));
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(payload);
  });
}

t.test('OpenAI SDK, non-streaming: every coding reaches the client decoded and debits exactly what the plain answer does', async (t) => {
  const { sim, gw, key } = await liveGateway(t, 'enc-a');
  const messages = [{ role: 'user' as const, content: 'Tell me about compression, briefly.' }];
  const prompt = simPromptTokens({ messages });
  for (const usage of ['present', 'absent'] as const) {
    const debits = new Map<string, number>();
    for (const coding of CODINGS) {
      const name = `${coding ?? 'plain'}, usage ${usage}`;
      const { data, response } = await sdk(gw, key)
        .chat.completions.create(
          { model: 'sim-small', messages, max_tokens: 100 },
          { headers: { 'x-sim-tokens': '23', 'x-sim-usage': usage, ...(coding && { 'x-sim-encoding': coding }) } },
        )
        .withResponse();
      t.equal(data.choices[0]?.message.content, simCompletionText(23), `${name}: the content`);
      t.equal(response.headers.get('content-encoding'), null, `${name}: no content-encoding`);
      if (usage === 'present') t.same(data.usage, { prompt_tokens: prompt, completion_tokens: 23, total_tokens: prompt + 23 });
      const e = await waitForDebit(gw, 'enc-a', response.headers.get('x-request-id')!);
      debits.set(name, e.amount_micros);
      if (usage === 'present') {
        t.match(e, {
          usage_source: 'upstream',
          prompt_tokens: prompt,
          completion_tokens: 23,
          amount_micros: -expectedCost(SIM_SMALL, prompt, 23),
        });
      } else {
        // Counted by the tokenizer over the decoded text: a meter that saw compressed bytes counts nothing.
        const completion = tokenizer.countText(simCompletionText(23));
        const p = tokenizer.countPromptTokens(messages);
        t.match(e, {
          usage_source: 'estimated',
          prompt_tokens: p,
          completion_tokens: completion,
          amount_micros: -expectedCost(SIM_SMALL, p, completion),
        });
      }
    }
    t.equal(new Set(debits.values()).size, 1, `usage ${usage}: one debit for every coding: ${JSON.stringify([...debits])}`);
  }
  t.ok(
    sim.requests.every((r) => r.headers['accept-encoding'] === 'identity'),
    'every upstream request asked for identity',
  );
  await checkBooks(t, gw, 'enc-a');
});

t.test('OpenAI SDK, streaming with and without include_usage: decoded token by token, the same debit as plain', async (t) => {
  const { gw, key } = await liveGateway(t, 'enc-b');
  const messages = [{ role: 'user' as const, content: 'Stream me something compressed.' }];
  const prompt = simPromptTokens({ messages });
  for (const includeUsage of [false, true]) {
    for (const coding of CODINGS) {
      const name = `${coding ?? 'plain'}, include_usage ${includeUsage}`;
      const { data: stream, response } = await sdk(gw, key)
        .chat.completions.create(
          { model: 'sim-small', messages, stream: true, ...(includeUsage && { stream_options: { include_usage: true } }) },
          { headers: { 'x-sim-tokens': '31', ...(coding && { 'x-sim-encoding': coding }) } },
        )
        .withResponse();
      let text = '';
      const chunks = [];
      for await (const ch of stream) {
        chunks.push(ch);
        text += ch.choices[0]?.delta.content ?? '';
      }
      t.equal(text, simCompletionText(31), `${name}: the text`);
      t.equal(chunks.length, 33 + (includeUsage ? 1 : 0), `${name}: role + 31 tokens + finish${includeUsage ? ' + usage' : ''}`);
      if (includeUsage) t.same(chunks.at(-1)?.usage, { prompt_tokens: prompt, completion_tokens: 31, total_tokens: prompt + 31 });
      else
        t.ok(
          chunks.every((c) => !c.usage),
          `${name}: the usage-only chunk is dropped from the decoded stream`,
        );
      const e = await waitForDebit(gw, 'enc-b', response.headers.get('x-request-id')!);
      t.match(
        e,
        { usage_source: 'upstream', prompt_tokens: prompt, completion_tokens: 31, amount_micros: -expectedCost(SIM_SMALL, prompt, 31) },
        name,
      );
    }
  }
  await checkBooks(t, gw, 'enc-b');
});

t.test('raw HTTP: the decoded bytes, no content-encoding and no compressed length; usage absent is counted from them', async (t) => {
  const { gw, key } = await liveGateway(t, 'enc-c');
  const messages = [{ role: 'user', content: 'raw bytes please' }];
  const p = tokenizer.countPromptTokens(messages);
  for (const coding of ['gzip', 'br'] as const) {
    for (const stream of [false, true]) {
      const res = await rawPost(gw, key, { model: 'sim-small', messages, stream, sim: { tokens: 12, usage: 'absent', encoding: coding } });
      const name = `${coding}, ${stream ? 'stream' : 'JSON'}`;
      t.equal(res.status, 200, name);
      t.equal(res.headers['content-encoding'], undefined, `${name}: no content-encoding`);
      t.equal(res.headers['content-length'], undefined, `${name}: no length up front (chunked)`);
      const text = res.body.toString('utf8');
      if (stream) {
        const data = sseData(text);
        t.equal(data.at(-1), '[DONE]', `${name}: ends with [DONE]`);
        t.equal(
          data
            .slice(0, -1)
            .map((d) => JSON.parse(d).choices[0]?.delta.content ?? '')
            .join(''),
          simCompletionText(12),
        );
      } else {
        const json = JSON.parse(text);
        t.equal(json.choices[0].message.content, simCompletionText(12), `${name}: the body is the upstream's JSON`);
        t.notOk('usage' in json);
      }
      const completion = tokenizer.countText(simCompletionText(12));
      const e = await waitForDebit(gw, 'enc-c', String(res.headers['x-request-id']));
      t.match(
        e,
        {
          usage_source: 'estimated',
          prompt_tokens: p,
          completion_tokens: completion,
          amount_micros: -expectedCost(SIM_SMALL, p, completion),
        },
        name,
      );
    }
  }
  const log = gw.logs.map((l) => JSON.parse(l)).find((l) => l.route === '/v1/chat/completions' && l.upstream_encoding === 'br');
  t.ok(log, 'the request log names the coding the upstream used');
  await checkBooks(t, gw, 'enc-c');
});

t.test('a stream whose coding breaks mid-way ends with the error event and is billed for what was relayed', async (t) => {
  const { sim, gw, key } = await liveGateway(t, 'enc-d');
  const messages = [{ role: 'user', content: 'break my stream' }];
  for (const coding of ['gzip', 'br'] as const) {
    // 40 ms a token, so the chunks before the bad bytes are decoded on their own.
    const res = await postChat(gw, key, {
      model: 'sim-small',
      messages,
      stream: true,
      sim: { tokens: 20, delay_ms: 40, encoding: coding, corrupt_after: 6 },
    });
    t.equal(res.status, 200, `${coding}: the stream had started`);
    const raw = await res.text();
    const data = sseData(raw);
    t.match(JSON.parse(data.at(-1)!), ERROR_EVENT, `${coding}: ends with the error event`);
    t.notMatch(raw, '[DONE]');
    const relayed = data
      .slice(0, -1)
      .map((d) => JSON.parse(d).choices[0]?.delta.content ?? '')
      .join('');
    t.ok(simCompletionText(5).startsWith(relayed), `${coding}: what was relayed is the start of the answer (${JSON.stringify(relayed)})`);
    const e = await waitForDebit(gw, 'enc-d', res.headers.get('x-request-id')!);
    const p = tokenizer.countPromptTokens(messages);
    const completion = tokenizer.countText(relayed);
    t.match(
      e,
      {
        usage_source: 'estimated',
        prompt_tokens: p,
        completion_tokens: completion,
        amount_micros: -expectedCost(SIM_SMALL, p, completion),
      },
      coding,
    );
  }
  t.equal(sim.requests.length, 2, 'not retried');
  t.equal(
    sample(await metricsText(gw), 'tollgate_upstream_errors_total', { reason: 'stream_broken' }),
    2,
    'a broken stream, for upstream health',
  );
  await checkBooks(t, gw, 'enc-d');
});

t.test('a JSON body whose coding breaks: 502 before any byte, or a broken body after; billed from what arrived', async (t) => {
  const { gw, key } = await liveGateway(t, 'enc-e');
  const messages = [{ role: 'user', content: 'break my body' }];
  const text = simCompletionText(40);
  const prefixes = new Set<number>([0]);
  for (let k = 1; k <= text.length; k++) prefixes.add(tokenizer.countText(text.slice(0, k)));
  for (const coding of ['gzip', 'br'] as const) {
    const res = await postChat(gw, key, { model: 'sim-small', messages, sim: { tokens: 40, encoding: coding, corrupt_after: 0 } });
    const read = await res.text().then(
      (b) => ({ ok: true, b }),
      () => ({ ok: false, b: '' }),
    );
    if (res.status === 502) {
      t.match(JSON.parse(read.b), { error: { code: 'upstream_error', type: 'upstream_error' } }, `${coding}: 502 upstream_error`);
    } else {
      t.equal(res.status, 200);
      t.notOk(read.ok, `${coding}: the body ends in a transport error, not a document that looks whole`);
    }
    const e = await waitForDebit(gw, 'enc-e', res.headers.get('x-request-id')!);
    t.match(e, { usage_source: 'estimated', prompt_tokens: tokenizer.countPromptTokens(messages) }, coding);
    t.ok(prefixes.has(e.completion_tokens!), `${coding}: ${e.completion_tokens} completion tokens, a prefix of the content`);
  }
  await checkBooks(t, gw, 'enc-e');
});

t.test('a coding the gateway cannot decode is an upstream failure: the next upstream answers; alone, 502 and nothing billed', async (t) => {
  const good = await startSim(t);
  const bad = await startSim(t);
  const front = await startSteeredFront(t, bad, { 'x-sim-encoding': 'compress' });
  const model = { name: 'm', upstream_model: 'sim/small-1', max_output_tokens: 256, price: { input: 1.5, output: 2.25 } };
  const gw = await startGateway(t, {
    upstreamUrl: good.url,
    config: {
      models: [
        { ...model, upstreams: [{ url: front }, { url: good.url }] },
        { ...model, name: 'only-bad', upstreams: [{ url: front }] },
      ],
    },
  });
  const { key } = await gw.createKey({ account: 'enc-f', env: 'live' });
  await gw.grant('enc-f', 1_000_000);
  for (let i = 0; i < 4; i++) {
    const res = await postChat(gw, key, { model: 'm', messages: [{ role: 'user', content: 'hi' }], sim: { tokens: 3 } });
    t.equal(res.status, 200, `request ${i}: served by the upstream that answers plainly`);
    t.equal(((await res.json()) as any).choices[0].message.content, simCompletionText(3));
  }
  t.ok(bad.requests.length >= 1, 'the compressing upstream was tried');
  const res = await postChat(gw, key, { model: 'only-bad', messages: [{ role: 'user', content: 'hi' }] });
  t.equal(res.status, 502);
  t.match(await res.json(), { error: { code: 'upstream_error', type: 'upstream_error' } });
  const e = await waitForDebit(gw, 'enc-f', res.headers.get('x-request-id')!);
  t.equal(e.amount_micros, 0, 'nothing readable was produced: nothing billed');
  const errors = sample(await metricsText(gw), 'tollgate_upstream_errors_total', { reason: 'upstream_content_coding' });
  t.equal(errors, bad.requests.length, 'each answer counted toward the upstream health');
  await checkBooks(t, gw, 'enc-f');
});

/** An upstream that sends `body` with `headers`, in 64 KiB writes that wait for the socket; records how each response ended. */
async function startBombUpstream(t: Test, headers: Record<string, string>, body: Buffer) {
  const ends: ('finished' | 'closed early')[] = [];
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', async () => {
      res.writeHead(200, headers);
      res.on('close', () => ends.push(res.writableFinished ? 'finished' : 'closed early'));
      for (let at = 0; at < body.length && !res.destroyed; at += 65536) {
        if (!res.write(body.subarray(at, at + 65536))) await new Promise((r) => (res.once('drain', r), res.once('close', r)));
      }
      res.end();
    });
  });
  return { url: await serveUpstream(t, server), ends };
}

t.test(
  'a decompression bomb in a stream is cut at the event limit: the upstream read stops, the client gets the error event',
  async (t) => {
    // One event, then 16 GiB of the next from 16 MiB on the wire: the gateway must stop after ~1 MiB of it (maxEventBytes).
    const first = 'data: {"id":"b","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"before the bomb "}}]}\n\n';
    const up = await startBombUpstream(
      t,
      { 'content-type': 'text/event-stream', 'content-encoding': 'gzip' },
      gzipBomb(`${first}data: {"x":"`, 16 * 1024),
    );
    const gw = await startGateway(t, { upstreamUrl: up.url });
    const { key } = await gw.createKey({ account: 'enc-g', env: 'live' });
    await gw.grant('enc-g', 1_000_000);
    const messages = [{ role: 'user', content: 'bomb' }];
    const started = Date.now();
    const res = await postChat(gw, key, { model: 'sim-small', messages, stream: true });
    t.equal(res.status, 200);
    const data = sseData(await res.text());
    t.equal(data.length, 2, 'the event before, decoded; nothing of the oversized event');
    t.match(JSON.parse(data[0]!), { choices: [{ delta: { content: 'before the bomb ' } }] });
    t.match(JSON.parse(data[1]!), ERROR_EVENT);
    await waitFor(() => up.ends.length === 1, 5000, 'the upstream response to close');
    t.same(up.ends, ['closed early'], 'the gateway stopped reading the bomb: the upstream never finished sending it');
    t.ok(Date.now() - started < 10_000, `cut in ${Date.now() - started} ms, not after decoding 16 GiB`);
    const e = await waitForDebit(gw, 'enc-g', res.headers.get('x-request-id')!);
    t.match(e, {
      usage_source: 'estimated',
      prompt_tokens: tokenizer.countPromptTokens(messages),
      completion_tokens: tokenizer.countText('before the bomb '),
    });
    await checkBooks(t, gw, 'enc-g');
  },
);

t.test(
  'a decompression bomb in one /v1/responses event is passed through up to 64 MiB, then cut: the upstream read stops, the client gets the error event',
  async (t) => {
    // A Responses event past the hold bound is relayed as it arrives (relay.ts MAX_PASSED_EVENT_BYTES), not held:
    // one that never ends is cut at 64 MiB, after a blank line that ends it, and the upstream read stops.
    const head =
      'event: response.image_generation_call.partial_image\ndata: {"type":"response.image_generation_call.partial_image","partial_image_b64":"';
    const up = await startBombUpstream(t, { 'content-type': 'text/event-stream', 'content-encoding': 'gzip' }, gzipBomb(head, 16 * 1024));
    const gw = await startGateway(t, { upstreamUrl: up.url });
    const { key } = await gw.createKey({ account: 'enc-r', env: 'live' });
    await gw.grant('enc-r', 1_000_000);
    const res = await fetch(`${gw.url}/v1/responses`, {
      method: 'POST',
      headers: { ...gw.auth(key), 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'sim-small', input: 'bomb', stream: true }),
    });
    t.equal(res.status, 200);
    const body = Buffer.from(await res.arrayBuffer());
    const error = `\n\nevent: error\ndata: ${JSON.stringify({ type: 'error', code: 'upstream_error', message: 'The upstream stream failed before completing.', param: null })}\n\n`;
    t.equal(
      body.subarray(body.length - Buffer.byteLength(error)).toString(),
      error,
      'a blank line ends the cut event, then the error event',
    );
    const relayed = body.length - Buffer.byteLength(error);
    t.ok(relayed <= MAX_PASSED_EVENT_BYTES && relayed > MAX_PASSED_EVENT_BYTES - 1024 * 1024, `${relayed} bytes of the event relayed`);
    t.equal(body.subarray(0, head.length).toString(), head);
    await waitFor(() => up.ends.length === 1, 5000, 'the upstream response to close');
    t.same(up.ends, ['closed early'], 'the gateway stopped reading the bomb');
    t.match(await waitForDebit(gw, 'enc-r', res.headers.get('x-request-id')!), { usage_source: 'estimated' });
    await checkBooks(t, gw, 'enc-r');
  },
);

t.test('a JSON bomb past the keep limit is relayed like a plain oversized answer: billed the output it was held for', async (t) => {
  // 32 MiB of a string value: no usage could be read, so the clamped output is billed (relay.ts `uncounted`).
  const up = await startBombUpstream(t, { 'content-type': 'application/json', 'content-encoding': 'gzip' }, gzipBomb('{"x":"', 32, '"}'));
  const gw = await startGateway(t, { upstreamUrl: up.url });
  const { key } = await gw.createKey({ account: 'enc-h', env: 'live' });
  await gw.grant('enc-h', 1_000_000);
  const messages = [{ role: 'user', content: 'bomb' }];
  const res = await rawPost(gw, key, { model: 'sim-small', messages, max_tokens: 50 });
  t.equal(res.status, 200);
  t.equal(res.body.length, 6 + 32 * 1024 * 1024 + 2, 'every decoded byte relayed');
  const e = await waitForDebit(gw, 'enc-h', String(res.headers['x-request-id']));
  t.match(e, { usage_source: 'estimated', completion_tokens: 50 });
  await checkBooks(t, gw, 'enc-h');
});

t.test('the openai SDK sees the decoded error of an encoded 4xx', async (t) => {
  const { gw, key } = await liveGateway(t, 'enc-i');
  const err = await sdk(gw, key)
    .chat.completions.create(
      { model: 'sim-small', messages: [{ role: 'user', content: 'x' }] },
      { headers: { 'x-sim-status': '400', 'x-sim-encoding': 'gzip' } },
    )
    .catch((e: unknown) => e);
  t.ok(err instanceof OpenAI.BadRequestError, 'a 400 the SDK can read');
  t.match(err, { status: 400, code: 'sim_400' });
});
