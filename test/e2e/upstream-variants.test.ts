// Usage and output caps as real upstreams other than OpenAI shape them, on /v1/completions, /v1/chat/completions
// and /v1/responses: vLLM's per-choice `continuous_usage_stats` in a stream cut before its final usage chunk,
// llama.cpp's native `n_predict` / `n_cmpl` (which win over `max_tokens` / `n` there), and a Responses answer
// whose usage is in the chat shape (`prompt_tokens` / `completion_tokens`, SGLang before its Responses
// serializer). Each against the whole gateway over real HTTP, with a small upstream of its own.
import t, { type Test } from 'tap';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { startGateway } from '../helpers/gateway.ts';
import { serveUpstream, startFixedUpstream, waitForDebit } from './chat-fixture.ts';
import { createTokenizer } from '../../src/meter/tokenizer.ts';

const tokenizer = createTokenizer();
await tokenizer.load();

/** An upstream answering every POST with `answer(body, res)`; records the parsed bodies. */
async function startUpstream(t: Test, answer: (body: Record<string, unknown>, res: ServerResponse, req: IncomingMessage) => void) {
  const bodies: Record<string, unknown>[] = [];
  const server = createServer((req, res) => {
    let raw = '';
    req.setEncoding('utf8');
    req.on('data', (c: string) => (raw += c));
    req.on('end', () => {
      const body = raw ? (JSON.parse(raw) as Record<string, unknown>) : {};
      bodies.push(body);
      answer(body, res, req);
    });
  });
  return { url: await serveUpstream(t, server), bodies };
}

async function liveGateway(t: Test, upstreamUrl: string, account: string) {
  const gw = await startGateway(t, { upstreamUrl });
  const { key } = await gw.createKey({ account, env: 'live' });
  await gw.grant(account, 10_000_000);
  return { gw, key };
}

function post(gw: { url: string; auth(key: string): Record<string, string> }, key: string, path: string, body: unknown) {
  return fetch(`${gw.url}${path}`, {
    method: 'POST',
    headers: { ...gw.auth(key), 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
}

t.test('a Responses answer with chat-shaped usage (prompt_tokens / completion_tokens) is billed from it', async (t) => {
  const usage = { prompt_tokens: 1200, completion_tokens: 300, total_tokens: 1500 };
  const response = {
    id: 'resp_abc',
    object: 'response',
    status: 'completed',
    output: [{ type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'ok' }] }],
    usage,
  };
  const up = await startUpstream(t, (body, res, req) => {
    if (req.method === 'GET') {
      res.writeHead(200, { 'content-type': 'application/json' });
      return res.end(JSON.stringify(response));
    }
    if (body.stream === true) {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write(
        `event: response.created\ndata: ${JSON.stringify({ type: 'response.created', response: { ...response, status: 'in_progress', usage: null } })}\n\n`,
      );
      res.write(`event: response.output_text.delta\ndata: ${JSON.stringify({ type: 'response.output_text.delta', delta: 'ok' })}\n\n`);
      res.end(`event: response.completed\ndata: ${JSON.stringify({ type: 'response.completed', response })}\n\n`);
      return;
    }
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify(response));
  });
  const { gw, key } = await liveGateway(t, up.url, 'rs');
  for (const extra of [{}, { stream: true }, { previous_response_id: 'resp_prev' }, { previous_response_id: 'resp_prev', stream: true }]) {
    const res = await post(gw, key, '/v1/responses', { model: 'sim-small', input: 'hi', max_output_tokens: 500, ...extra });
    t.equal(res.status, 200);
    await res.text();
    const e = await waitForDebit(gw, 'rs', res.headers.get('x-request-id')!);
    t.match(e, { prompt_tokens: 1200, completion_tokens: 300, usage_source: 'upstream' }, JSON.stringify(extra));
  }
});

t.test("llama.cpp's n_predict and n_cmpl cannot take the output past its hold", async (t) => {
  const up = await startFixedUpstream(
    t,
    200,
    { 'content-type': 'application/json' },
    JSON.stringify({
      id: 'x',
      object: 'text_completion',
      choices: [{ index: 0, text: 'hi' }],
      usage: { prompt_tokens: 3, completion_tokens: 1 },
    }),
  );
  const { gw, key } = await liveGateway(t, up.url, 'np');
  for (const [path, body] of [
    ['/v1/completions', { model: 'sim-small', prompt: 'hello', max_tokens: 10, n_predict: 100000, n_cmpl: 8 }],
    ['/v1/completions', { model: 'sim-small', prompt: 'hello', n_predict: -1 }],
    [
      '/v1/chat/completions',
      { model: 'sim-small', messages: [{ role: 'user', content: 'hi' }], max_tokens: 10, n_predict: 100000, n_cmpl: 8 },
    ],
    ['/v1/responses', { model: 'sim-small', input: 'hi', max_output_tokens: 10, n_predict: 100000 }],
  ] as const) {
    const res = await post(gw, key, path, body);
    await res.text();
    t.equal(res.status, 200, path);
    const sent = JSON.parse(up.bodies.at(-1)!) as Record<string, unknown>;
    const cap = 'max_tokens' in body || 'max_output_tokens' in body ? 10 : 16;
    t.ok(
      typeof sent.n_predict === 'number' && sent.n_predict > 0 && sent.n_predict <= cap,
      `${path}: n_predict sent ${sent.n_predict}, held for ${cap}`,
    );
    if ('n_cmpl' in body) t.equal(sent.n_cmpl, 1, `${path}: n_cmpl follows the n the hold covers`);
  }
  // A smaller n_predict is the client's own limit: kept.
  const res = await post(gw, key, '/v1/completions', { model: 'sim-small', prompt: 'hello', max_tokens: 10, n_predict: 4 });
  await res.text();
  t.equal((JSON.parse(up.bodies.at(-1)!) as Record<string, unknown>).n_predict, 4);
});

/**
 * vLLM with `stream_options.continuous_usage_stats`: every chunk carries a usage of its own choice only
 * (`completion_tokens = previous_num_tokens[i]`, and for completions the prompt tokens of that choice's
 * prompt); the sum comes in the final usage-only chunk. This upstream sends `perChoice` tokens for each of
 * `choices` choices, interleaved, then that final chunk and [DONE], or (`cut`) breaks off before it.
 */
function continuousUsageStream(kind: 'chat' | 'completions', choices: number, perChoice: number, promptPerChoice: number, cut: boolean) {
  return (_body: Record<string, unknown>, res: ServerResponse) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    const counts = new Array<number>(choices).fill(0);
    let out = '';
    for (let k = 0; k < perChoice; k++) {
      for (let i = 0; i < choices; i++) {
        counts[i]!++;
        const choice = kind === 'chat' ? { index: i, delta: { content: ' hello' } } : { index: i, text: ' hello' };
        const usage = { prompt_tokens: promptPerChoice, completion_tokens: counts[i], total_tokens: promptPerChoice + counts[i]! };
        out += `data: ${JSON.stringify({ id: 'x', object: kind === 'chat' ? 'chat.completion.chunk' : 'text_completion', choices: [choice], usage })}\n\n`;
      }
    }
    res.write(out);
    // Broken off before the final usage chunk (an upstream crash, or the gateway cutting it).
    if (cut) return void setTimeout(() => res.destroy(), 20);
    const prompt = kind === 'chat' ? promptPerChoice : promptPerChoice * (choices / 2);
    const usage = { prompt_tokens: prompt, completion_tokens: choices * perChoice, total_tokens: prompt + choices * perChoice };
    res.end(`data: ${JSON.stringify({ id: 'x', choices: [], usage })}\n\ndata: [DONE]\n\n`);
  };
}

t.test('a stream cut before its final usage: per-choice continuous usage does not stand for all choices', async (t) => {
  for (const [kind, path, body] of [
    ['completions', '/v1/completions', { model: 'sim-small', prompt: ['a b c', 'd e f'], n: 2, max_tokens: 100 }],
    ['chat', '/v1/chat/completions', { model: 'sim-small', messages: [{ role: 'user', content: 'hi' }], n: 4, max_tokens: 100 }],
  ] as const) {
    const choices = 4; // completions: 2 prompts × n 2; chat: n 4
    const up = await startUpstream(t, continuousUsageStream(kind, choices, 30, 7, true));
    const account = `cu-${kind}`;
    const { gw, key } = await liveGateway(t, up.url, account);
    const res = await post(gw, key, path, { ...body, stream: true, stream_options: { include_usage: true, continuous_usage_stats: true } });
    t.equal(res.status, 200);
    await res.text();
    const e = await waitForDebit(gw, account, res.headers.get('x-request-id')!);
    // 4 choices × 30 tokens were streamed; the last chunk's usage says 30 (its own choice).
    t.ok(e.completion_tokens! >= choices * 30, `${kind}: billed ${e.completion_tokens} completion tokens for ${choices * 30} streamed`);
    t.equal(e.usage_source, 'estimated', `${kind}: no usage covered the whole answer`);
  }
});

t.test('several choices with continuous usage, not cut: the final usage-only chunk is billed', async (t) => {
  const up = await startUpstream(t, continuousUsageStream('completions', 4, 30, 7, false));
  const { gw, key } = await liveGateway(t, up.url, 'cu-whole');
  const body = { model: 'sim-small', prompt: ['a b c', 'd e f'], n: 2, max_tokens: 100, stream: true };
  const res = await post(gw, key, '/v1/completions', { ...body, stream_options: { include_usage: true, continuous_usage_stats: true } });
  t.equal(res.status, 200);
  const text = await res.text();
  t.match(text, /"choices":\[\],"usage"/, 'the usage-only chunk the client asked for is relayed');
  const e = await waitForDebit(gw, 'cu-whole', res.headers.get('x-request-id')!);
  t.match(e, { prompt_tokens: 14, completion_tokens: 120, usage_source: 'upstream' });
});

t.test('a Responses stream cut before its usage: the prompt counted includes the tool definitions', async (t) => {
  const up = await startUpstream(t, (_body, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.write(
      `event: response.created\ndata: ${JSON.stringify({ type: 'response.created', response: { id: 'resp_t', status: 'in_progress', usage: null } })}\n\n`,
    );
    res.write(`event: response.output_text.delta\ndata: ${JSON.stringify({ type: 'response.output_text.delta', delta: 'Hello' })}\n\n`);
    setTimeout(() => res.destroy(), 20);
  });
  const { gw, key } = await liveGateway(t, up.url, 'tools');
  // 40 function tools: the upstream renders every definition into the prompt (chat templates do).
  const tools = Array.from({ length: 40 }, (_, i) => ({
    type: 'function',
    name: `lookup_record_${i}`,
    description: `Looks up record number ${i} in the inventory database and returns its fields as JSON.`,
    parameters: { type: 'object', properties: { id: { type: 'string', description: 'The record id' } }, required: ['id'] },
  }));
  const res = await post(gw, key, '/v1/responses', { model: 'sim-small', input: 'hi', stream: true, tools });
  t.equal(res.status, 200);
  await res.text();
  const e = await waitForDebit(gw, 'tools', res.headers.get('x-request-id')!);
  t.equal(e.usage_source, 'estimated');
  const toolTokens = tokenizer.countText(JSON.stringify(tools));
  t.ok(e.prompt_tokens! >= toolTokens, `prompt billed ${e.prompt_tokens}, the tool definitions alone are ${toolTokens} tokens`);
});

t.test('a chat stream cut before its usage: the prompt counted includes the tool definitions', async (t) => {
  const up = await startUpstream(t, (_body, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.write(
      `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', choices: [{ index: 0, delta: { content: 'Hello' } }] })}\n\n`,
    );
    setTimeout(() => res.destroy(), 20);
  });
  const { gw, key } = await liveGateway(t, up.url, 'chat-tools');
  const tools = Array.from({ length: 40 }, (_, i) => ({
    type: 'function',
    function: {
      name: `lookup_record_${i}`,
      description: `Looks up record number ${i} in the inventory database and returns its fields as JSON.`,
      parameters: { type: 'object', properties: { id: { type: 'string', description: 'The record id' } }, required: ['id'] },
    },
  }));
  const res = await post(gw, key, '/v1/chat/completions', {
    model: 'sim-small',
    messages: [{ role: 'user', content: 'hi' }],
    stream: true,
    tools,
  });
  t.equal(res.status, 200);
  await res.text();
  const e = await waitForDebit(gw, 'chat-tools', res.headers.get('x-request-id')!);
  t.equal(e.usage_source, 'estimated');
  const toolTokens = tokenizer.countText(JSON.stringify(tools));
  t.ok(e.prompt_tokens! >= toolTokens, `prompt billed ${e.prompt_tokens}, the tool definitions alone are ${toolTokens} tokens`);
});

t.test('a Responses stream ending in response.incomplete or response.failed is billed from its usage, or its deltas', async (t) => {
  const up = await startUpstream(t, (body, res) => {
    const end = (body['metadata'] as { end: string }).end;
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.write(
      `event: response.created\ndata: ${JSON.stringify({ type: 'response.created', response: { id: 'resp_e', status: 'in_progress', usage: null } })}\n\n`,
    );
    for (let i = 0; i < 20; i++)
      res.write(`event: response.output_text.delta\ndata: ${JSON.stringify({ type: 'response.output_text.delta', delta: ' hello' })}\n\n`);
    const usage = end === 'failed' ? null : { input_tokens: 50, output_tokens: 20, total_tokens: 70 };
    res.end(
      `event: response.${end}\ndata: ${JSON.stringify({ type: `response.${end}`, response: { id: 'resp_e', status: end, usage } })}\n\n`,
    );
  });
  const { gw, key } = await liveGateway(t, up.url, 'ends');
  for (const end of ['incomplete', 'failed']) {
    const res = await post(gw, key, '/v1/responses', {
      model: 'sim-small',
      input: 'hi',
      stream: true,
      max_output_tokens: 20,
      metadata: { end },
    });
    t.equal(res.status, 200);
    await res.text();
    const e = await waitForDebit(gw, 'ends', res.headers.get('x-request-id')!);
    if (end === 'incomplete') t.match(e, { prompt_tokens: 50, completion_tokens: 20, usage_source: 'upstream' });
    else t.match(e, { completion_tokens: 20, usage_source: 'estimated' }, 'failed without usage: the 20 deltas');
  }
});
