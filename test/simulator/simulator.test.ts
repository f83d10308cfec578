import t from 'tap';
import { request as httpRequest, type IncomingHttpHeaders } from 'node:http';
import { brotliDecompressSync, constants, gunzipSync, inflateSync, zstdDecompressSync } from 'node:zlib';
import OpenAI from 'openai';
import { simCompletionText, simPromptTokens, startSimulator, type Simulator } from '../../src/simulator/simulator.ts';

const sim = await startSimulator({ modelIds: ['m1', 'm2'] });
t.teardown(() => sim.close());
t.beforeEach(() => sim.clear());

const openai = new OpenAI({ apiKey: 'x', baseURL: sim.url, maxRetries: 0 });
const messages = [{ role: 'user' as const, content: 'Say something deterministic, please.' }];
const promptTokens = simPromptTokens({ messages });

function post(s: Simulator, body: unknown, headers: Record<string, string> = {}, signal?: AbortSignal): Promise<Response> {
  const init: RequestInit = { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) };
  if (signal !== undefined) init.signal = signal;
  return fetch(`${s.url}/chat/completions`, init);
}

/** Reads an SSE body to the end (or to a break) and splits it into events. */
async function readEvents(res: Response): Promise<{ events: string[]; error: Error | undefined }> {
  let text = '';
  let error: Error | undefined;
  const decoder = new TextDecoder();
  try {
    for await (const part of res.body!) text += decoder.decode(part, { stream: true });
  } catch (err) {
    error = err as Error;
  }
  const events = text.split('\n\n').filter((e) => e !== '');
  return { events, error };
}

function payloads(events: string[]): any[] {
  return events.filter((e) => e !== 'data: [DONE]').map((e) => JSON.parse(e.replace(/^data: /, '')));
}

t.test('GET /v1/models lists the configured ids in the OpenAI shape', async (t) => {
  const res = await fetch(`${sim.url}/models`);
  t.equal(res.status, 200);
  const body = await res.json();
  t.same(body, {
    object: 'list',
    data: [
      { id: 'm1', object: 'model', created: 1704067200, owned_by: 'tollgate-simulator' },
      { id: 'm2', object: 'model', created: 1704067200, owned_by: 'tollgate-simulator' },
    ],
  });
  const listed = await openai.models.list();
  t.same(
    listed.data.map((m) => m.id),
    ['m1', 'm2'],
  );
});

t.test('non-streaming completion: deterministic text and usage, request recorded', async (t) => {
  const res = await post(sim, { model: 'served', messages, extra_field: 42, sim: { tokens: 5 } }, { 'x-custom': 'yes' });
  t.equal(res.status, 200);
  t.equal(res.headers.get('server'), 'tollgate-simulator');
  const body: any = await res.json();
  t.equal(body.object, 'chat.completion');
  t.equal(body.model, 'served');
  t.equal(body.choices[0].message.content, 'tok0 tok1 tok2 tok3 tok4 ');
  t.equal(body.choices[0].finish_reason, 'stop');
  t.same(body.usage, { prompt_tokens: promptTokens, completion_tokens: 5, total_tokens: promptTokens + 5 });

  const rec = await sim.waitFor((r) => r.finished);
  t.equal(body.id, `chatcmpl-sim-${rec.id}`);
  t.equal(res.headers.get('x-sim-request-id'), String(rec.id));
  t.equal(rec.method, 'POST');
  t.equal(rec.path, '/v1/chat/completions');
  t.equal(rec.headers['x-custom'], 'yes');
  t.same(rec.body, { model: 'served', messages, extra_field: 42, sim: { tokens: 5 } }, 'body recorded as received, sim included');
  t.equal(rec.aborted, false);
  t.equal(rec.completionTokensSent, 5);
  t.ok(rec.endedAt! >= rec.startedAt);
});

t.test('SSE without include_usage: role, one chunk per token, finish, [DONE]', async (t) => {
  const res = await post(sim, { model: 'm', messages, stream: true }, { 'x-sim-tokens': '3' });
  t.match(res.headers.get('content-type'), /^text\/event-stream/);
  const { events, error } = await readEvents(res);
  t.equal(error, undefined);
  t.equal(events.length, 6);
  t.equal(events.at(-1), 'data: [DONE]');
  const chunks = payloads(events);
  t.same(chunks[0].choices, [{ index: 0, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }]);
  t.same(
    chunks.slice(1, 4).map((c) => c.choices[0].delta.content),
    ['tok0 ', 'tok1 ', 'tok2 '],
  );
  t.same(chunks[4].choices, [{ index: 0, delta: {}, logprobs: null, finish_reason: 'stop' }]);
  for (const c of chunks) {
    t.equal(c.object, 'chat.completion.chunk');
    t.equal(c.model, 'm');
    t.notOk('usage' in c, 'no usage field at all without include_usage');
  }
  const rec = await sim.waitFor((r) => r.finished);
  t.equal(rec.chunksSent, 5);
  t.equal(rec.completionTokensSent, 3);
});

t.test('SSE with include_usage: usage:null on chunks, then a usage-only chunk', async (t) => {
  const res = await post(sim, { model: 'm', messages, stream: true, stream_options: { include_usage: true } }, { 'x-sim-tokens': '2' });
  const { events } = await readEvents(res);
  t.equal(events.at(-1), 'data: [DONE]');
  const chunks = payloads(events);
  t.equal(chunks.length, 5);
  for (const c of chunks.slice(0, 4)) t.equal(c.usage, null);
  t.same(chunks[4].choices, []);
  t.same(chunks[4].usage, { prompt_tokens: promptTokens, completion_tokens: 2, total_tokens: promptTokens + 2 });
});

t.test('openai SDK streaming, with and without include_usage', async (t) => {
  const plain = await openai.chat.completions.create({ model: 'm', messages, stream: true }, { headers: { 'x-sim-tokens': '4' } });
  let text = '';
  let usageSeen = false;
  for await (const ch of plain) {
    text += ch.choices[0]?.delta.content ?? '';
    if (ch.usage) usageSeen = true;
  }
  t.equal(text, simCompletionText(4));
  t.equal(usageSeen, false);

  const withUsage = await openai.chat.completions.create(
    { model: 'm', messages, stream: true, stream_options: { include_usage: true } },
    { headers: { 'x-sim-tokens': '4' } },
  );
  const all = [];
  for await (const ch of withUsage) all.push(ch);
  t.same(all.at(-1)?.usage, { prompt_tokens: promptTokens, completion_tokens: 4, total_tokens: promptTokens + 4 });
  t.equal(all.map((c) => c.choices[0]?.delta.content ?? '').join(''), simCompletionText(4));
});

t.test('usage steering: absent and zero, streaming and not', async (t) => {
  const streamBody = { model: 'm', messages, stream: true, stream_options: { include_usage: true } };
  const absent = payloads((await readEvents(await post(sim, streamBody, { 'x-sim-usage': 'absent' }))).events);
  t.equal(absent.length, 18, 'role + 16 tokens + finish, no usage chunk');
  t.notOk(
    absent.some((c) => 'usage' in c),
    'no usage field anywhere',
  );

  const zero = payloads((await readEvents(await post(sim, streamBody, { 'x-sim-usage': 'zero' }))).events);
  t.same(zero.at(-1).usage, { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 });

  const json = await openai.chat.completions.create({ model: 'm', messages }, { headers: { 'x-sim-usage': 'absent' } });
  t.equal(json.usage, undefined);
  const jsonZero: any = await (await post(sim, { model: 'm', messages, sim: { usage: 'zero' } })).json();
  t.same(jsonZero.usage, { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 });
});

t.test('status steering gives OpenAI error bodies the SDK understands', async (t) => {
  const cases: [number, string][] = [
    [400, 'BadRequestError'],
    [429, 'RateLimitError'],
    [500, 'InternalServerError'],
    [502, 'InternalServerError'],
    [503, 'InternalServerError'],
    [504, 'InternalServerError'],
  ];
  for (const [status, name] of cases) {
    const err = await openai.chat.completions.create({ model: 'm', messages }, { headers: { 'x-sim-status': String(status) } }).then(
      () => undefined,
      (e: unknown) => e,
    );
    t.ok(err instanceof OpenAI.APIError, `${status} is an APIError`);
    const apiErr = err as InstanceType<typeof OpenAI.APIError>;
    t.equal(apiErr.status, status);
    t.equal(apiErr.constructor.name, name);
    t.equal(apiErr.code, `sim_${status}`);
  }
  const res = await post(sim, { model: 'm', messages, stream: true, sim: { status: 503 } });
  t.equal(res.status, 503, 'the body field steers too, and streaming requests get the status before any SSE');
  t.same(await res.json(), { error: { message: 'simulated upstream error 503', type: 'server_error', param: null, code: 'sim_503' } });
});

t.test('refuse closes the socket without a response', async (t) => {
  const err = await post(sim, { model: 'm', messages }, { 'x-sim-refuse': 'true' }).then(
    () => undefined,
    (e: unknown) => e,
  );
  t.type(err, TypeError, 'fetch fails');
  const sdkErr = await openai.chat.completions.create({ model: 'm', messages }, { headers: { 'x-sim-refuse': '1' } }).then(
    () => undefined,
    (e: unknown) => e,
  );
  t.ok(sdkErr instanceof OpenAI.APIConnectionError);
  const rec = await sim.waitFor((r) => r.endedAt !== undefined);
  t.equal(rec.finished, false);
  t.equal(rec.aborted, false, 'a steered refusal is not a client abort');
});

t.test('cut_after sends N chunks and breaks the stream without [DONE]', async (t) => {
  for (const delay of ['0', '5']) {
    sim.clear();
    const res = await post(sim, { model: 'm', messages, stream: true }, { 'x-sim-cut-after': '3', 'x-sim-delay-ms': delay });
    t.equal(res.status, 200);
    const { events, error } = await readEvents(res);
    t.ok(error, `delay ${delay}: the body errors`);
    t.equal(events.length, 3, `delay ${delay}: exactly 3 chunks arrived`);
    t.notOk(events.includes('data: [DONE]'));
    t.same(
      payloads(events)
        .slice(1)
        .map((c) => c.choices[0].delta.content),
      ['tok0 ', 'tok1 '],
    );
    const rec = await sim.waitFor((r) => r.endedAt !== undefined);
    t.same([rec.chunksSent, rec.completionTokensSent, rec.finished, rec.aborted], [3, 2, false, false]);
  }

  const zero = await post(sim, { model: 'm', messages, stream: true }, { 'x-sim-cut-after': '0' });
  t.equal(zero.status, 200, 'cut_after 0: headers arrive');
  const z = await readEvents(zero);
  t.same(z.events, []);
  t.ok(z.error);

  const long = await post(sim, { model: 'm', messages, stream: true, sim: { tokens: 1, cut_after: 99 } });
  const l = await readEvents(long);
  t.equal(l.events.length, 3, 'a stream shorter than cut_after still ends without [DONE]');
  t.ok(l.error);

  const json = await post(sim, { model: 'm', messages, sim: { cut_after: 1 } });
  t.equal(json.status, 200);
  const jsonErr = await json.text().then(
    () => undefined,
    (e: unknown) => e,
  );
  t.ok(jsonErr, 'a non-streaming body breaks mid-way');

  const sdkStream = await openai.chat.completions.create({ model: 'm', messages, stream: true }, { headers: { 'x-sim-cut-after': '4' } });
  const got: string[] = [];
  const sdkErr = await (async () => {
    for await (const ch of sdkStream) got.push(ch.choices[0]?.delta.content ?? '');
  })().then(
    () => undefined,
    (e: unknown) => e,
  );
  t.ok(sdkErr, 'the SDK surfaces the broken stream');
  t.same(got, ['', 'tok0 ', 'tok1 ', 'tok2 ']);
});

/** A POST whose body is read as it came (no decoding, unlike fetch), to the end or to a break. */
function rawPost(body: unknown): Promise<{ status: number; headers: IncomingHttpHeaders; body: Buffer }> {
  const url = new URL(`${sim.url}/chat/completions`);
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      { host: url.hostname, port: url.port, path: url.pathname, method: 'POST', headers: { 'content-type': 'application/json' } },
      (res) => {
        const parts: Buffer[] = [];
        res.on('data', (c: Buffer) => parts.push(c));
        res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(parts) }));
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(JSON.stringify(body));
  });
}

const DECODE: Record<string, (b: Buffer) => Buffer> = {
  gzip: gunzipSync,
  'x-gzip': gunzipSync,
  deflate: inflateSync,
  br: brotliDecompressSync,
  zstd: zstdDecompressSync,
};

t.test('encoding: JSON bodies, streams and error bodies compressed in the coding named; other names only named', async (t) => {
  for (const [coding, decode] of Object.entries(DECODE)) {
    const json = await rawPost({ model: 'm', messages, sim: { tokens: 5, encoding: coding } });
    t.equal(json.headers['content-encoding'], coding);
    t.equal(Number(json.headers['content-length']), json.body.length, `${coding}: the encoded length`);
    t.equal(JSON.parse(decode(json.body).toString()).choices[0].message.content, simCompletionText(5), `${coding}: JSON`);

    const stream = await rawPost({ model: 'm', messages, stream: true, sim: { tokens: 5, encoding: coding, delay_ms: 1 } });
    t.equal(stream.headers['content-encoding'], coding);
    const events = decode(stream.body).toString().split('\n\n').filter(Boolean);
    t.equal(events.length, 8, `${coding}: role, 5 tokens, finish, [DONE]`);
    t.equal(events.at(-1), 'data: [DONE]');

    const err = await rawPost({ model: 'm', messages, sim: { status: 429, encoding: coding } });
    t.equal(err.status, 429);
    t.match(JSON.parse(decode(err.body).toString()), { error: { code: 'sim_429' } }, `${coding}: the error body`);
  }
  const named = await rawPost({ model: 'm', messages, sim: { tokens: 2, encoding: 'compress' } });
  t.equal(named.headers['content-encoding'], 'compress', 'a coding the simulator cannot apply is only named');
  t.equal(JSON.parse(named.body.toString()).choices[0].message.content, simCompletionText(2));
});

t.test('corrupt_after: N events decode, then bytes no decoder takes, and a normal end', async (t) => {
  // What arrived before the bad bytes, decoded as far as it goes (a flush point, not an end).
  const partial: Record<string, (b: Buffer) => Buffer> = {
    gzip: (b) => gunzipSync(b, { finishFlush: constants.Z_SYNC_FLUSH }),
    br: (b) => brotliDecompressSync(b, { finishFlush: constants.BROTLI_OPERATION_FLUSH }),
  };
  for (const coding of ['gzip', 'br']) {
    const res = await rawPost({ model: 'm', messages, stream: true, sim: { tokens: 9, encoding: coding, corrupt_after: 4 } });
    const decode = DECODE[coding]!;
    t.throws(() => decode(res.body), `${coding}: the body does not decode whole`);
    t.equal(res.body.subarray(-16).toString('hex'), 'ff'.repeat(16), `${coding}: it ends in the bad bytes`);
    const good = partial[coding]!(res.body.subarray(0, -16));
    t.equal(good.toString().split('\n\n').filter(Boolean).length, 4, `${coding}: the 4 events before them decode`);
    const rec = await sim.waitFor((r) => r.endedAt !== undefined && r.id === sim.requests.at(-1)!.id);
    t.equal(rec.finished, true, `${coding}: the response itself ended normally`);
  }
  const json = await rawPost({ model: 'm', messages, sim: { encoding: 'gzip', corrupt_after: 0 } });
  t.throws(() => gunzipSync(json.body), 'a JSON body turns bad half-way');
});

t.test('client abort mid-stream is recorded with its time', async (t) => {
  const ac = new AbortController();
  const res = await post(sim, { model: 'm', messages, stream: true }, { 'x-sim-tokens': '200', 'x-sim-delay-ms': '10' }, ac.signal);
  const reader = res.body!.getReader();
  await reader.read();
  await reader.read();
  const abortedAt = performance.timeOrigin + performance.now();
  ac.abort();
  const rec = await sim.waitFor((r) => r.aborted);
  t.equal(rec.finished, false);
  t.ok(rec.completionTokensSent >= 1 && rec.completionTokensSent < 200, `stopped producing (${rec.completionTokensSent} tokens)`);
  // Same clock on both sides; the bound is loose on purpose (correctness, not speed: the abort is seen
  // on the socket's FIN, typically in 1-10 ms).
  t.ok(rec.endedAt! >= abortedAt && rec.endedAt! - abortedAt < 1000, `endedAt ${rec.endedAt! - abortedAt} ms after the abort`);
  const tokensAtEnd = rec.completionTokensSent;
  await new Promise((r) => setTimeout(r, 50));
  t.equal(rec.completionTokensSent, tokensAtEnd, 'nothing is produced after the abort');
});

t.test('client abort while waiting for headers is recorded', async (t) => {
  for (const headers of [{ 'x-sim-headers-delay-ms': '30000' }, { 'x-sim-delay-ms': '1000' }]) {
    sim.clear();
    const ac = new AbortController();
    const pending = post(sim, { model: 'm', messages }, headers, ac.signal).catch((e: unknown) => e);
    await sim.waitFor(() => true);
    ac.abort();
    t.equal(((await pending) as Error).name, 'AbortError');
    const rec = await sim.waitFor((r) => r.aborted);
    t.equal(rec.finished, false);
    t.equal(rec.completionTokensSent, 0);
  }
});

t.test('max_tokens caps the stream unless ignore_max_tokens', async (t) => {
  const capped = await openai.chat.completions.create({ model: 'm', messages, max_tokens: 3 }, { headers: { 'x-sim-tokens': '10' } });
  t.equal(capped.choices[0]?.message.content, simCompletionText(3));
  t.equal(capped.choices[0]?.finish_reason, 'length');
  t.equal(capped.usage?.completion_tokens, 3);

  const stream = await openai.chat.completions.create(
    { model: 'm', messages, max_completion_tokens: 2, stream: true, stream_options: { include_usage: true } },
    { headers: { 'x-sim-tokens': '10' } },
  );
  const chunks = [];
  for await (const ch of stream) chunks.push(ch);
  t.equal(chunks.map((c) => c.choices[0]?.delta.content ?? '').join(''), simCompletionText(2));
  t.equal(chunks.find((c) => c.choices[0]?.finish_reason)?.choices[0]?.finish_reason, 'length');
  t.equal(chunks.at(-1)?.usage?.completion_tokens, 2);

  const ignored = await openai.chat.completions.create(
    { model: 'm', messages, max_tokens: 3 },
    { headers: { 'x-sim-tokens': '10', 'x-sim-ignore-max-tokens': 'true' } },
  );
  t.equal(ignored.choices[0]?.message.content, simCompletionText(10));
  t.equal(ignored.choices[0]?.finish_reason, 'stop');
  t.equal(ignored.usage?.completion_tokens, 10);

  const under = await openai.chat.completions.create({ model: 'm', messages, max_tokens: 50 }, { headers: { 'x-sim-tokens': '5' } });
  t.equal(under.choices[0]?.finish_reason, 'stop');
});

t.test('delays: headers_delay_ms and delay_ms hold the response at least that long', async (t) => {
  let start = performance.now();
  const res = await post(sim, { model: 'm', messages, stream: true }, { 'x-sim-headers-delay-ms': '60' });
  t.ok(performance.now() - start >= 55, 'headers waited');
  await res.text();

  start = performance.now();
  const events = (
    await readEvents(await post(sim, { model: 'm', messages, stream: true }, { 'x-sim-tokens': '5', 'x-sim-delay-ms': '20' }))
  ).events;
  t.ok(performance.now() - start >= 95, '5 tokens x 20 ms');
  t.equal(events.length, 8);

  start = performance.now();
  await (await post(sim, { model: 'm', messages }, { 'x-sim-tokens': '4', 'x-sim-delay-ms': '20' })).json();
  t.ok(performance.now() - start >= 75, 'a JSON answer comes after all its tokens');
});

t.test('bad steering and bad requests get 4xx OpenAI errors', async (t) => {
  const bad = await post(sim, { model: 'm', messages }, { 'x-sim-tokens': 'many' });
  t.equal(bad.status, 400);
  t.match(((await bad.json()) as any).error.message, /x-sim-tokens must be a non-negative integer/);

  const notJson = await fetch(`${sim.url}/chat/completions`, { method: 'POST', body: '{nope' });
  t.equal(notJson.status, 400);
  await notJson.text();
  const rec = await sim.waitFor((r) => r.body === '{nope');
  t.equal(rec.finished, true, 'unparseable bodies are recorded as text');

  const missing = await fetch(`${sim.url}/audio/speech`, { method: 'POST', body: '{}' });
  t.equal(missing.status, 404);
  await missing.text();
  const wrongMethod = await fetch(`${sim.url}/chat/completions`);
  t.equal(wrongMethod.status, 405);
  await wrongMethod.text();
});

t.test('backpressure: a paused reader still gets every token in order', async (t) => {
  const tokens = 20_000; // ~3.6 MB of SSE, far above the socket buffers
  const body = JSON.stringify({ model: 'm', messages, stream: true, sim: { tokens } });
  const text = await new Promise<string>((resolve, reject) => {
    const req = httpRequest(`${sim.url}/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' } }, (res) => {
      res.pause();
      let s = '';
      setTimeout(() => {
        res.setEncoding('utf8');
        res.on('data', (d: string) => (s += d));
        res.on('end', () => resolve(s));
        res.resume();
      }, 100);
    });
    req.on('error', reject);
    req.end(body);
  });
  const events = text.split('\n\n').filter((e) => e !== '');
  t.equal(events.length, tokens + 3);
  const content = payloads(events)
    .map((c) => c.choices[0]?.delta.content ?? '')
    .join('');
  t.equal(content, simCompletionText(tokens));
});

t.test('records: bounded, switchable, clearable', async (t) => {
  const small = await startSimulator({ maxRecords: 5 });
  t.teardown(() => small.close());
  for (let i = 0; i < 12; i++) await (await post(small, { model: 'm', messages, sim: { tokens: 1 } })).text();
  t.ok(small.requests.length <= 5, `kept ${small.requests.length}`);
  t.equal(small.requests.at(-1)?.id, 12, 'the newest is kept');
  small.clear();
  t.equal(small.requests.length, 0);

  const off = await startSimulator({ record: false });
  t.teardown(() => off.close());
  const seen = off.waitFor((r) => r.finished);
  await (await post(off, { model: 'm', messages })).text();
  t.equal((await seen).finished, true, 'waitFor still sees live requests');
  t.equal(off.requests.length, 0);

  await t.rejects(
    sim.waitFor(() => false, 20),
    /no matching request within 20 ms/,
  );
});
