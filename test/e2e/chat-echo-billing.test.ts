// vLLM's chat `echo: true` (ChatCompletionRequest.echo) puts the last message's content before the answer
// when that message has the answer's role (an assistant prefill): streamed as a delta chunk of its own,
// and in a JSON body as the start of message.content. Without usage such an answer is billed as one whose
// text cannot be counted (`uncounted`: the output it was held for), never the echoed prefill as
// completion, which put the debit above the hold (a review finding: 8,002 completion tokens billed for a
// 12,000-byte prefill and max_tokens 16). The upstream here answers as vLLM's serving_chat does with echo.
import t from 'tap';
import { startGateway } from '../helpers/gateway.ts';
import { createTokenizer } from '../../src/meter/tokenizer.ts';
import { serveJsonUpstream, waitForDebit } from './chat-fixture.ts';

const tokenizer = createTokenizer();
await tokenizer.load();
const PREFILL = 'Zyx qwv 9183 ÿþ ǅ ꙮ 𝔘 '.repeat(400);
const GENERATED = 'ok done';

t.test('chat echo without usage: the echoed assistant prefill is not billed as completion', async (t) => {
  const up = await serveJsonUpstream(t, (b, _req, res) => {
    const last = b.messages.at(-1);
    const echo = b.echo === true && last.role === 'assistant' ? last.content : '';
    if (b.stream) {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      const ch = (delta: unknown) =>
        `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', choices: [{ index: 0, delta, finish_reason: null }] })}\n\n`;
      res.write(ch({ role: 'assistant', content: '' }) + (echo ? ch({ content: echo }) : ''));
      // As vLLM: the usage chunk (include_usage forced by the gateway) after the generation.
      const usage = `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', choices: [], usage: { prompt_tokens: 8014, completion_tokens: 2, total_tokens: 8016 } })}\n\n`;
      setTimeout(
        () => {
          if (!res.destroyed) res.end(ch({ content: GENERATED }) + (b.stream_options?.include_usage ? usage : '') + 'data: [DONE]\n\n');
        },
        b.slow ? 1500 : 0,
      );
    } else {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({
          id: 'c',
          object: 'chat.completion',
          choices: [{ index: 0, message: { role: 'assistant', content: echo + GENERATED }, finish_reason: 'stop' }],
        }),
      );
    }
  });
  const gw = await startGateway(t, {
    upstreamUrl: up,
    config: {
      models: [{ name: 'm', upstream_model: 'x', max_output_tokens: 64, price: { input: 1, output: 1 }, upstreams: [{ url: up }] }],
    },
  });
  const { key } = await gw.createKey({ account: 'echo-chat', env: 'live' });
  await gw.grant('echo-chat', 100_000_000);
  const generated = await tokenizer.countTextBounded(GENERATED);
  const prefill = await tokenizer.countTextBounded(PREFILL);
  {
    // Realistic vLLM: usage is sent; the client leaves after the echo chunk, before it.
    const ac = new AbortController();
    const res = await fetch(`${gw.url}/v1/chat/completions`, {
      method: 'POST',
      signal: ac.signal,
      headers: { ...gw.auth(key), 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'm',
        stream: true,
        echo: true,
        slow: true,
        max_tokens: 16,
        messages: [
          { role: 'user', content: 'continue' },
          { role: 'assistant', content: PREFILL },
        ],
      }),
    });
    const reader = res.body!.getReader();
    let got = '';
    while (!got.includes(PREFILL.slice(0, 50))) got += new TextDecoder().decode((await reader.read()).value);
    ac.abort();
    const e = await waitForDebit(gw, 'echo-chat', res.headers.get('x-request-id')!, 5000);
    t.comment(
      `client gone after the echo chunk: billed completion ${e.completion_tokens}, prompt ${e.prompt_tokens}, amount ${e.amount_micros}`,
    );
    t.ok(e.completion_tokens! <= 16, `client gone: completion billed (${e.completion_tokens}) within max_tokens 16`);
  }
  for (const stream of [true, false]) {
    const res = await fetch(`${gw.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { ...gw.auth(key), 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'm',
        stream,
        echo: true,
        max_tokens: 16,
        messages: [
          { role: 'user', content: 'continue' },
          { role: 'assistant', content: PREFILL },
        ],
      }),
    });
    t.equal(res.status, 200);
    await res.text();
    const e = await waitForDebit(gw, 'echo-chat', res.headers.get('x-request-id')!);
    const line = gw.logs.find((l) => l.includes(res.headers.get('x-request-id')!) && l.includes('hold_micros'));
    t.comment(`hold_micros ${line && JSON.parse(line).hold_micros}; prefill bytes ${Buffer.byteLength(PREFILL)}`);
    t.comment(
      `stream ${stream}: billed completion ${e.completion_tokens}, prompt ${e.prompt_tokens}, hold output 16, generated ${generated}, prefill ${prefill}, amount ${e.amount_micros}`,
    );
    t.ok(
      e.completion_tokens! <= 16,
      `stream ${stream}: completion billed (${e.completion_tokens}) within max_tokens 16, not the prefill (${prefill}) again`,
    );
  }
});
