// Cached prompt tokens (SPEC §4 "Cached input"): read from the usage object only, streaming and not,
// chat/completions (`prompt_tokens_details.cached_tokens`) and Responses (`input_tokens_details.cached_tokens`).
import t from 'tap';
import { createSseMeter } from '../../src/meter/sse-scanner.ts';
import { JsonUsageScanner } from '../../src/meter/json-usage.ts';
import { CHAT, COMPLETIONS, RESPONSES, type ApiFormat } from '../../src/meter/formats.ts';
import { readUsage, readUsageFromJson } from '../../src/meter/usage.ts';
import { buildResponsesStream, buildStream } from './sse-fixture.ts';

function streamUsage(sse: string, format: ApiFormat, chunk: number) {
  const m = createSseMeter({ dropUsageOnlyChunk: false, format });
  const buf = Buffer.from(sse);
  for (let i = 0; i < buf.length; i += chunk) m.push(buf.subarray(i, i + chunk));
  m.end();
  return m.usage;
}

t.test('chat stream: prompt_tokens_details.cached_tokens, whatever the chunking', async (t) => {
  const { sse } = buildStream({ usage: { prompt_tokens: 900, completion_tokens: 4, prompt_tokens_details: { cached_tokens: 768 } } });
  for (const chunk of [1, 7, 100_000]) {
    t.same(streamUsage(sse, CHAT, chunk), { prompt_tokens: 900, completion_tokens: 4, cached_tokens: 768 }, `chunks of ${chunk}`);
  }
});

t.test('responses stream: input_tokens_details.cached_tokens of response.completed', async (t) => {
  const { sse } = buildResponsesStream({ usage: { input_tokens: 812, output_tokens: 64, input_tokens_details: { cached_tokens: 512 } } });
  for (const chunk of [1, 7, 100_000]) {
    t.same(streamUsage(sse, RESPONSES, chunk), { prompt_tokens: 812, completion_tokens: 64, cached_tokens: 512 }, `chunks of ${chunk}`);
  }
});

t.test('non-streaming bodies: chat, completions, responses', async (t) => {
  const chat = { id: 'x', choices: [], usage: { prompt_tokens: 50, completion_tokens: 5, prompt_tokens_details: { cached_tokens: 32 } } };
  t.same(readUsageFromJson(Buffer.from(JSON.stringify(chat)), CHAT).usage, { prompt_tokens: 50, completion_tokens: 5, cached_tokens: 32 });
  t.same(readUsageFromJson(Buffer.from(JSON.stringify(chat)), COMPLETIONS).usage, {
    prompt_tokens: 50,
    completion_tokens: 5,
    cached_tokens: 32,
  });
  const resp = { id: 'r', output: [], usage: { input_tokens: 50, output_tokens: 5, input_tokens_details: { cached_tokens: 16 } } };
  t.same(readUsageFromJson(Buffer.from(JSON.stringify(resp)), RESPONSES).usage, {
    prompt_tokens: 50,
    completion_tokens: 5,
    cached_tokens: 16,
  });
  // The wrong API's key is not read: Responses usage has no prompt_tokens_details.
  const mixed = { usage: { input_tokens: 50, output_tokens: 5, prompt_tokens_details: { cached_tokens: 16 } } };
  t.same(readUsageFromJson(Buffer.from(JSON.stringify(mixed)), RESPONSES).usage, { prompt_tokens: 50, completion_tokens: 5 });
});

t.test('a large body: the usage object captured by the chunked scanner carries its details', async (t) => {
  const s = new JsonUsageScanner();
  const body = Buffer.from(
    JSON.stringify({
      choices: [{ message: { content: 'x'.repeat(50_000) } }],
      usage: { prompt_tokens: 9, completion_tokens: 1, prompt_tokens_details: { cached_tokens: 8 } },
    }),
  );
  for (let i = 0; i < body.length; i += 4096) s.push(body.subarray(i, i + 4096));
  t.same(CHAT.usage(JSON.parse(s.result!)), { prompt_tokens: 9, completion_tokens: 1, cached_tokens: 8 });
});

t.test('no, zero or bad cached counts are none; more than the prompt is clamped to it', async (t) => {
  const base = { prompt_tokens: 10, completion_tokens: 2 };
  t.same(readUsage(base), base);
  t.same(readUsage({ ...base, prompt_tokens_details: null }), base);
  t.same(readUsage({ ...base, prompt_tokens_details: { cached_tokens: 0 } }), base);
  t.same(readUsage({ ...base, prompt_tokens_details: { cached_tokens: -3 } }), base);
  t.same(readUsage({ ...base, prompt_tokens_details: { cached_tokens: 2.5 } }), base);
  t.same(readUsage({ ...base, prompt_tokens_details: { cached_tokens: '4' } }), base);
  t.same(readUsage({ ...base, prompt_tokens_details: { cached_tokens: 25 } }), { ...base, cached_tokens: 10 });
  t.equal(readUsage({ prompt_tokens_details: { cached_tokens: 4 }, completion_tokens: 1 }), null, 'no prompt count: no usage at all');
});
