import t from 'tap';
import { chatText, readUsage, readUsageFromJson } from '../../src/meter/usage.ts';

t.test('readUsage: absent is not zero', async (t) => {
  t.equal(readUsage(null), null);
  t.equal(readUsage(undefined), null);
  t.equal(readUsage({}), null);
  t.equal(readUsage({ prompt_tokens: 1 }), null);
  t.equal(readUsage({ prompt_tokens: 1, completion_tokens: '2' }), null);
  t.equal(readUsage({ prompt_tokens: 1.5, completion_tokens: 2 }), null);
  t.same(readUsage({ prompt_tokens: 0, completion_tokens: 0 }), { prompt_tokens: 0, completion_tokens: 0 });
  t.same(readUsage({ prompt_tokens: 3, completion_tokens: 4, total_tokens: 7, prompt_tokens_details: null }), {
    prompt_tokens: 3,
    completion_tokens: 4,
  });
});

t.test('readUsageFromJson on a non-streaming completion', async (t) => {
  const body = {
    id: 'chatcmpl-1',
    object: 'chat.completion',
    choices: [
      { index: 0, message: { role: 'assistant', reasoning_content: 'think ', content: 'Hi "there" 😀' }, finish_reason: 'stop' },
      {
        index: 1,
        message: {
          role: 'assistant',
          content: null,
          tool_calls: [{ id: 'c', type: 'function', function: { name: 'f', arguments: '{"a":1}' } }],
        },
      },
    ],
    usage: { prompt_tokens: 9, completion_tokens: 0, total_tokens: 9 },
  };
  const r = readUsageFromJson(Buffer.from(JSON.stringify(body)));
  t.same(r.usage, { prompt_tokens: 9, completion_tokens: 0 }, 'zero completion tokens is real usage');
  t.equal(r.completionText(), 'think Hi "there" 😀{"a":1}');
  t.equal(readUsageFromJson(Buffer.from('{"choices":[],"usage":null}')).usage, null);
  const bad = readUsageFromJson(Buffer.from('upstream said no'));
  t.equal(bad.usage, null);
  t.equal(bad.completionText(), '');
  t.equal(readUsageFromJson(Buffer.from('[1,2]')).completionText(), '', 'JSON but not an object');
});

t.test('chatText: reasoning under both reasoning_content and its alias reasoning is counted once', async (t) => {
  const body = (message: Record<string, unknown>) => ({ choices: [{ index: 0, message: { role: 'assistant', ...message } }] });
  t.equal(chatText(body({ reasoning_content: 'think ', reasoning: 'think ', content: 'Hi' })), 'think Hi', 'the same text: once');
  t.equal(chatText(body({ reasoning_content: 'th', reasoning: 'think ', content: 'Hi' })), 'think Hi', 'the longer');
  t.equal(chatText(body({ reasoning_content: 'think ', reasoning: null, content: 'Hi' })), 'think Hi', 'one name');
  t.equal(chatText(body({ reasoning: 'think ', content: 'Hi' })), 'think Hi', 'the alias alone');
});
