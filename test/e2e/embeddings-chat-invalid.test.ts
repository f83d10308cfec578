// The gateway takes an embeddings body as vLLM's chat form whenever `messages` is a non-empty list of
// objects with a string `role` (embeddings.ts chatForm), a shape check. vLLM takes it only if the body
// validates as EmbeddingChatRequest: a message whose `content` is not a string or a list of parts (here 5)
// fails that member, and the union falls back to EmbeddingCompletionRequest, which embeds `input`. So
// without usage such a body is billed the larger of its two forms' counts, as it is held (billed 7 tokens
// of the 38,464 embedded before, a review finding). The upstream below picks the form as vLLM does.
import t from 'tap';
import { startGateway } from '../helpers/gateway.ts';
import { createTokenizer } from '../../src/meter/tokenizer.ts';
import { serveJsonUpstream, waitForDebit } from './chat-fixture.ts';

const tokenizer = createTokenizer();
await tokenizer.load();
const validContent = (c: unknown) => c === undefined || c === null || typeof c === 'string' || Array.isArray(c);
const INPUT = Array.from({ length: 64 }, (_, i) => `document ${i} `.repeat(200));

t.test('embeddings: messages that are not vLLM chat messages beside a big input, no usage: billed the input', async (t) => {
  let embedded = '';
  const up = await serveJsonUpstream(t, (b, _req, res) => {
    const chat =
      Array.isArray(b.messages) &&
      b.messages.length > 0 &&
      b.messages.every((m: any) => typeof m?.role === 'string' && validContent(m.content));
    embedded = chat ? 'messages' : 'input';
    const n = chat ? 1 : Array.isArray(b.input) ? b.input.length : 1;
    res.writeHead(200, { 'content-type': 'application/json' });
    const data = Array.from({ length: n }, (_, index) => ({ object: 'embedding', index, embedding: [0.1, 0.2] }));
    if (b.slow) {
      // As vLLM: usage last, here after a pause (a large answer in transit); the usage is the input's.
      const full = JSON.stringify({ object: 'list', data, model: 'x', usage: { prompt_tokens: b.slow, total_tokens: b.slow } });
      const cut = full.indexOf('"usage"');
      res.write(full.slice(0, cut));
      setTimeout(() => {
        if (!res.destroyed) res.end(full.slice(cut));
      }, 1000);
      return;
    }
    res.end(JSON.stringify({ object: 'list', data, model: 'x' }));
  });
  const gw = await startGateway(t, {
    upstreamUrl: up,
    config: {
      models: [{ name: 'm', upstream_model: 'x', endpoints: ['embeddings'], price: { input: 1, output: 1 }, upstreams: [{ url: up }] }],
    },
  });
  const { key } = await gw.createKey({ account: 'emb', env: 'live' });
  await gw.grant('emb', 100_000_000);
  let inputTokens = 0;
  for (const s of INPUT) inputTokens += await tokenizer.countTextBounded(s);
  for (const [name, extra] of [
    ['plain (control)', {}],
    ['content 5', { messages: [{ role: 'user', content: 5 }] }],
  ] as const) {
    const res = await fetch(`${gw.url}/v1/embeddings`, {
      method: 'POST',
      headers: { ...gw.auth(key), 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'm', input: INPUT, ...extra }),
    });
    t.equal(res.status, 200, name);
    await res.text();
    const e = await waitForDebit(gw, 'emb', res.headers.get('x-request-id')!);
    t.comment(`${name}: upstream embedded ${embedded}; billed prompt ${e.prompt_tokens} (${e.usage_source}); input counts ${inputTokens}`);
    t.ok(e.prompt_tokens! >= inputTokens * 0.9, `${name}: billed (${e.prompt_tokens}) about the ${inputTokens} input tokens embedded`);
  }
  // The no-usage path without an upstream fault: the client leaves before the trailing usage arrives.
  const ac = new AbortController();
  const res = await fetch(`${gw.url}/v1/embeddings`, {
    method: 'POST',
    signal: ac.signal,
    headers: { ...gw.auth(key), 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'm', input: INPUT, messages: [{ role: 'user', content: 5 }], slow: inputTokens }),
  });
  const reader = res.body!.getReader();
  await reader.read();
  ac.abort();
  const e = await waitForDebit(gw, 'emb', res.headers.get('x-request-id')!, 5000);
  t.comment(
    `client gone before usage: upstream embedded ${embedded}; billed prompt ${e.prompt_tokens} (${e.usage_source}); input ${inputTokens}`,
  );
  t.ok(
    e.prompt_tokens! >= inputTokens * 0.9,
    `client gone before usage: billed (${e.prompt_tokens}) about the ${inputTokens} input tokens embedded`,
  );
});
