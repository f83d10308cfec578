// One SSE scanner for every API (meter/formats.ts): where each keeps its usage and text. Responses:
// usage from response.completed's response.usage, text from the deltas only (the .done events and the
// final response repeat it); completions: choices[].text; a JSON body of each, through the relay's reader.
import t from 'tap';
import { createSseMeter } from '../../src/meter/sse-scanner.ts';
import { CHAT, COMPLETIONS, EMBEDDINGS, RESPONSES } from '../../src/meter/formats.ts';
import { readUsageFromJson } from '../../src/meter/usage.ts';
import { buildResponsesStream, buildStream, PIECES } from './sse-fixture.ts';

function meter(sse: string, format = RESPONSES, chunk = 7) {
  const m = createSseMeter({ dropUsageOnlyChunk: false, format });
  const buf = Buffer.from(sse);
  const out: Buffer[] = [];
  for (let i = 0; i < buf.length; i += chunk) {
    const o = m.push(buf.subarray(i, i + chunk));
    if (Buffer.isBuffer(o)) out.push(o);
    else if (o) out.push(...o);
  }
  const tail = m.end();
  if (tail) out.push(tail);
  return { m, forwarded: Buffer.concat(out).toString() };
}

t.test('responses stream: usage from response.completed, bytes forwarded unchanged, whatever the chunking', async (t) => {
  const { sse } = buildResponsesStream({ usage: { input_tokens: 812, output_tokens: 64 } });
  for (const chunk of [1, 7, 64, 100_000]) {
    const { m, forwarded } = meter(sse, RESPONSES, chunk);
    t.same(m.usage, { prompt_tokens: 812, completion_tokens: 64 }, `chunks of ${chunk}`);
    t.equal(forwarded, sse, 'byte for byte');
    t.equal(m.completionText(), '', 'the usage covers the text');
  }
});

t.test('responses stream without usage: the deltas are the text, each byte once (not the .done repeats)', async (t) => {
  const { sse, text } = buildResponsesStream({ usage: null });
  const { m } = meter(sse);
  t.equal(m.usage, null);
  t.equal(m.completionText(), text);
  t.equal(text, PIECES.join(''));
});

t.test('responses stream cut before response.completed: the deltas so far', async (t) => {
  const { sse } = buildResponsesStream({ usage: { input_tokens: 5, output_tokens: 10 } });
  const cut = sse.slice(0, sse.indexOf('response.output_text.done'));
  const { m } = meter(cut);
  t.equal(m.usage, null);
  t.equal(m.completionText(), PIECES.join(''));
});

t.test('the chat format does not read a responses stream, and the other way round', async (t) => {
  const r = buildResponsesStream({ usage: { input_tokens: 5, output_tokens: 10 } }).sse;
  t.equal(meter(r, CHAT).m.usage, null, 'input/output_tokens are not chat usage');
  const c = buildStream({ usage: { prompt_tokens: 3, completion_tokens: 4 } }).sse;
  t.equal(meter(c, RESPONSES).m.usage, null, 'a top-level chat usage is not a response.usage');
  t.equal(meter(c, RESPONSES).m.completionText(), '', 'chat content is not a delta');
});

t.test('completions stream: choices[].text is the text; usage as chat', async (t) => {
  const events = ['tok0 ', 'say "hi"\n', ''].map(
    (text) =>
      `data: ${JSON.stringify({ id: 'cmpl-1', object: 'text_completion', choices: [{ index: 0, text, finish_reason: null }] })}\n\n`,
  );
  const usage = `data: ${JSON.stringify({ id: 'cmpl-1', object: 'text_completion', choices: [], usage: { prompt_tokens: 2, completion_tokens: 3, total_tokens: 5 } })}\n\n`;
  const noUsage = meter(events.join('') + 'data: [DONE]\n\n', COMPLETIONS);
  t.equal(noUsage.m.completionText(), 'tok0 say "hi"\n');
  const withUsage = createSseMeter({ dropUsageOnlyChunk: true, format: COMPLETIONS });
  const out = withUsage.push(Buffer.from(events.join('') + usage));
  t.same(withUsage.usage, { prompt_tokens: 2, completion_tokens: 3 });
  t.notOk(
    Buffer.concat(Buffer.isBuffer(out) ? [out] : [...(out ?? [])])
      .toString()
      .includes('"usage":{'),
    'the usage-only chunk is dropped',
  );
});

t.test('JSON bodies: each format reads its own usage and text', async (t) => {
  const resp = readUsageFromJson(
    Buffer.from(
      JSON.stringify({
        object: 'response',
        output: [
          { type: 'reasoning', summary: [{ type: 'summary_text', text: 'think. ' }] },
          {
            type: 'message',
            content: [
              { type: 'output_text', text: 'Hello' },
              { type: 'refusal', refusal: ' no' },
            ],
          },
          { type: 'function_call', arguments: '{"a":1}' },
        ],
        usage: { input_tokens: 7, output_tokens: 9, total_tokens: 16 },
      }),
    ),
    RESPONSES,
  );
  t.same(resp.usage, { prompt_tokens: 7, completion_tokens: 9 });
  t.equal(resp.completionText(), 'think. Hello no{"a":1}');
  const cmpl = readUsageFromJson(Buffer.from(JSON.stringify({ choices: [{ text: 'a' }, { text: 'b' }] })), COMPLETIONS);
  t.equal(cmpl.usage, null, 'no usage is no usage');
  t.equal(cmpl.completionText(), 'ab');
  const emb = readUsageFromJson(Buffer.from(JSON.stringify({ data: [], usage: { prompt_tokens: 12, total_tokens: 12 } })), EMBEDDINGS);
  t.same(emb.usage, { prompt_tokens: 12, completion_tokens: 0 }, 'embeddings: prompt only');
  t.equal(readUsageFromJson(Buffer.from('{"usage":{"total_tokens":3}}'), EMBEDDINGS).usage, null, 'no prompt_tokens, no usage');
});

t.test('a broken stream ends with the API error event: chat/completions chunk, Responses typed event', async (t) => {
  t.match(CHAT.streamError.toString(), /^data: \{"error":\{.*"code":"upstream_error"/);
  t.equal(COMPLETIONS.streamError, CHAT.streamError);
  const r = RESPONSES.streamError.toString();
  t.match(r, /^event: error\ndata: /);
  t.match(JSON.parse(r.split('data: ')[1]!), { type: 'error', code: 'upstream_error', message: String, param: null });
});
