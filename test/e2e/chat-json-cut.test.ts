// Non-streaming answers whose relay does not run to its end (SPEC §1.2, §2a, §12), against a small real
// HTTP upstream: a JSON body only starts once the upstream has generated all of it, so a client that
// reads the message and leaves before the trailing `usage` is never billed less than what arrived (the
// gateway reads on for JSON_TAIL_GRACE_MS, then aborts the upstream as SPEC §2a asks and bills the text
// that arrived, or, past the keep limit, the output it held for); a body the upstream breaks off bills the text that arrived; an
// upstream that fails after its headers but before any body byte gives the client SPEC's 502 / 504, not a
// reset. Also: a stream announced as `Text/Event-Stream` is metered as SSE.
import t, { type Test } from 'tap';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { connect } from 'node:net';
import { createTokenizer } from '../../src/meter/tokenizer.ts';
import { startGateway } from '../helpers/gateway.ts';
import { SIM_SMALL, accountVsLedger, expectedCost, postChat, serveUpstream, sseData, waitForDebit } from './chat-fixture.ts';

const tokenizer = createTokenizer();
await tokenizer.load();

/** An upstream answering every request with `handler`; counts the requests. */
async function upstream(
  t: Test,
  handler: (res: ServerResponse, req: IncomingMessage) => void,
): Promise<{ url: string; count: () => number }> {
  let n = 0;
  const server = createServer((req, res) => {
    n++;
    req.resume();
    req.on('end', () => handler(res, req));
  });
  return { url: await serveUpstream(t, server), count: () => n };
}

const messages = [{ role: 'user', content: 'hello' }];
const request = { model: 'sim-small', messages };

function completionBody(content: string, usage: { prompt_tokens: number; completion_tokens: number }, extra: object = {}): string {
  return JSON.stringify({
    id: 'chatcmpl-x',
    object: 'chat.completion',
    created: 1,
    model: 'm',
    choices: [{ index: 0, message: { role: 'assistant', content }, ...extra, finish_reason: 'stop' }],
    usage: { ...usage, total_tokens: usage.prompt_tokens + usage.completion_tokens },
  });
}

/**
 * A raw HTTP client that reads `readBytes` of the response (pausing `pauseMs` after each read, a slow
 * reader) and then destroys its socket; resolves with the request id and the bytes read.
 */
function readPartThenLeave(gwUrl: string, key: string, readBytes: number, pauseMs = 0): Promise<{ requestId: string; got: number }> {
  const body = JSON.stringify(request);
  return new Promise((resolve, reject) => {
    const s = connect(Number(new URL(gwUrl).port), '127.0.0.1');
    let got = 0;
    let head = '';
    s.on('error', reject);
    s.on('connect', () =>
      s.write(
        `POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\nauthorization: Bearer ${key}\r\ncontent-type: application/json\r\n` +
          `content-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
      ),
    );
    s.on('end', () => reject(new Error(`the response ended after ${got} bytes, before the client left`)));
    s.on('data', (c: Buffer) => {
      if (head.length < 4096) head += c.toString('latin1');
      got += c.length;
      if (got >= readBytes) {
        s.destroy();
        resolve({ requestId: /x-request-id: (\S+)/i.exec(head)?.[1] ?? '', got });
      } else if (pauseMs > 0) {
        s.pause();
        setTimeout(() => s.resume(), pauseMs);
      }
    });
  });
}

async function funded(t: Test, url: string, account: string, config: Record<string, unknown> = {}) {
  const gw = await startGateway(t, { upstreamUrl: url, config });
  const { key } = await gw.createKey({ account, env: 'live' });
  await gw.grant(account, 100_000_000);
  return { gw, key };
}

t.test(
  'client reads the message and leaves during a pause in the body: the upstream is aborted, the text that arrived is billed',
  async (t) => {
    const usage = { prompt_tokens: 11, completion_tokens: 4000 };
    const body = completionBody('word '.repeat(4000), usage);
    const sent = 10_000;
    // 10,000 bytes, then the rest 1 s later: the client has left in between, and the gateway stops the
    // upstream within SPEC's 100 ms instead of waiting for the rest.
    let resolveAborted!: (aborted: boolean) => void;
    const aborted = new Promise<boolean>((r) => (resolveAborted = r));
    const up = await upstream(t, (res) => {
      res.on('close', () => resolveAborted(!res.writableFinished));
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
      res.write(body.slice(0, sent));
      setTimeout(() => res.destroyed || res.end(body.slice(sent)), 1000);
    });
    const { gw, key } = await funded(t, up.url, 'left-a');
    const r = await readPartThenLeave(gw.url, key, 5000);
    t.ok(r.got < Buffer.byteLength(body), 'the client left before the body ended');
    t.equal(await aborted, true, 'the upstream response was aborted before its end');
    const received = body.slice(body.indexOf('"content":"') + '"content":"'.length, sent);
    const prompt = tokenizer.countPromptTokens(messages);
    const completion = await tokenizer.countTextBounded(received);
    t.ok(completion > 1000, `${completion} completion tokens arrived`);
    const e = await waitForDebit(gw, 'left-a', r.requestId, 3000);
    t.match(e, {
      usage_source: 'estimated',
      prompt_tokens: prompt,
      completion_tokens: completion,
      amount_micros: -expectedCost(SIM_SMALL, prompt, completion),
    });
    const s = await accountVsLedger(gw, 'left-a');
    t.equal(s.balance, s.sum);
    t.equal(s.held, 0);
  },
);

t.test('a body over the keep limit (usage scanned), a slow client that leaves early: billed at least the upstream usage', async (t) => {
  // ~6 MiB of logprobs after the content, usage last, sent in one write: the gateway pauses its upstream
  // read while the slow client is full, and resumes it once that client is gone. Within the grace the
  // rest arrives and the upstream's usage is billed; past it (a loaded machine), the body kept no text,
  // and the output the request was held for (100,000) is billed. Never less than what was produced.
  const usage = { prompt_tokens: 11, completion_tokens: 60_000 };
  const logprobs = {
    content: Array.from({ length: 60_000 }, (_, i) => ({ token: `w${i}`, logprob: -0.0123456789, bytes: [119], top_logprobs: [] })),
  };
  const body = completionBody('word '.repeat(60_000), usage, { logprobs });
  t.ok(Buffer.byteLength(body) > 4 * 1024 * 1024, `a ${Buffer.byteLength(body)}-byte body`);
  const up = await upstream(t, (res) => {
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
    res.end(body);
  });
  const { gw, key } = await funded(t, up.url, 'left-b', {
    models: [
      {
        name: 'sim-small',
        upstream_model: 'm',
        max_output_tokens: 100_000,
        price: { input: 1.5, output: 2.25 },
        upstreams: [{ url: up.url }],
      },
    ],
  });
  const r = await readPartThenLeave(gw.url, key, 512 * 1024, 2);
  const e = await waitForDebit(gw, 'left-b', r.requestId, 5000);
  t.comment(`billed as ${e.usage_source}: ${e.completion_tokens} completion tokens`);
  if (e.usage_source === 'upstream')
    t.match(e, { prompt_tokens: 11, completion_tokens: 60_000, amount_micros: -expectedCost(SIM_SMALL, 11, 60_000) });
  else t.match(e, { usage_source: 'estimated', completion_tokens: 100_000 });
  t.ok(-Number(e.amount_micros) >= expectedCost(SIM_SMALL, 11, 60_000), 'never less than the upstream usage');
  t.equal((await accountVsLedger(gw, 'left-b')).held, 0);
});

t.test('the upstream resets mid-body: the client sees a broken body, the text that arrived is billed (estimated)', async (t) => {
  const body = completionBody('word '.repeat(4000), { prompt_tokens: 11, completion_tokens: 4000 });
  const cutAt = 10_000;
  const up = await upstream(t, (res) => {
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
    res.write(body.slice(0, cutAt));
    setTimeout(() => res.socket?.destroy(), 100);
  });
  const { gw, key } = await funded(t, up.url, 'cut-a');
  const res = await postChat(gw, key, request);
  t.equal(res.status, 200, 'the answer had started');
  t.equal(
    await res.text().then(
      () => 'complete',
      () => 'broken',
    ),
    'broken',
  );
  // What arrived of the content: from its opening quote to the cut.
  const received = body.slice(body.indexOf('"content":"') + '"content":"'.length, cutAt);
  const e = await waitForDebit(gw, 'cut-a', res.headers.get('x-request-id')!);
  const prompt = tokenizer.countPromptTokens(messages);
  const completion = await tokenizer.countTextBounded(received); // as the gateway counts: in slices
  t.ok(completion > 1000, `${completion} completion tokens arrived`);
  t.match(e, {
    usage_source: 'estimated',
    prompt_tokens: prompt,
    completion_tokens: completion,
    amount_micros: -expectedCost(SIM_SMALL, prompt, completion),
  });
  t.equal(up.count(), 1, 'not retried');
});

t.test('the upstream fails after its headers, before any body byte: 502 / 504 with the error body, not a reset', async (t) => {
  const cases = [
    {
      name: 'reset',
      status: 502,
      code: 'upstream_error',
      handler: (res: ServerResponse) => {
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': '500' });
        res.flushHeaders();
        setTimeout(() => res.socket?.destroy(), 100);
      },
    },
    {
      name: 'idle past idle_timeout_ms',
      status: 504,
      code: 'upstream_timeout',
      handler: (res: ServerResponse) => {
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': '500' });
        res.flushHeaders();
      },
    },
  ];
  for (const c of cases) {
    const up = await upstream(t, c.handler);
    const account = `nb-${c.status}`;
    const { gw, key } = await funded(t, up.url, account, { upstream: { idle_timeout_ms: 300 } });
    const res = await postChat(gw, key, request);
    t.equal(res.status, c.status, c.name);
    const id = res.headers.get('x-request-id');
    t.ok(id, 'with its request id');
    t.match(await res.json(), { error: { code: c.code, type: 'upstream_error', param: null, message: /sim-small/ } });
    t.equal(up.count(), 1, 'not retried: the upstream answered');
    // Settled as before: the prompt, estimated; nothing arrived to count.
    const e = await waitForDebit(gw, account, id!);
    t.match(e, { usage_source: 'estimated', prompt_tokens: tokenizer.countPromptTokens(messages), completion_tokens: 0 });
    t.equal((await accountVsLedger(gw, account)).held, 0);
  }
});

t.test('an SSE answer whose media type is spelled Text/Event-Stream is metered as a stream', async (t) => {
  const chunk = { id: 'c', object: 'chat.completion.chunk', choices: [{ index: 0, delta: { content: 'Hello' }, finish_reason: null }] };
  const usageChunk = {
    id: 'c',
    object: 'chat.completion.chunk',
    choices: [],
    usage: { prompt_tokens: 7, completion_tokens: 300, total_tokens: 307 },
  };
  const up = await upstream(t, (res) => {
    res.writeHead(200, { 'content-type': 'Text/Event-Stream; charset=utf-8' });
    res.end(`data: ${JSON.stringify(chunk)}\n\ndata: ${JSON.stringify(usageChunk)}\n\ndata: [DONE]\n\n`);
  });
  const { gw, key } = await funded(t, up.url, 'ct');
  const res = await postChat(gw, key, { ...request, stream: true });
  const data = sseData(await res.text());
  t.same(data, [JSON.stringify(chunk), '[DONE]'], 'the usage-only chunk the client did not ask for is removed');
  const e = await waitForDebit(gw, 'ct', res.headers.get('x-request-id')!);
  t.match(e, { usage_source: 'upstream', prompt_tokens: 7, completion_tokens: 300 });
});
