import t from 'tap';
import {
  completionBody,
  DONE_EVENT,
  errorBody,
  planCompletion,
  simCompletionText,
  simCompletionTokens,
  simPromptTokens,
  simTokenText,
  streamChunks,
  templateRepeats,
} from '../../src/simulator/output.ts';
import { simResponsesPromptTokens } from '../../src/simulator/responses.ts';
import { defaultSimOptions } from '../../src/simulator/steer.ts';

t.test('simPromptTokens: ceil(chars / 4), at least 1', async (t) => {
  t.equal(simPromptTokens({ messages: [{ role: 'user', content: 'abcd' }] }), 1);
  t.equal(simPromptTokens({ messages: [{ role: 'user', content: 'abcde' }] }), 2);
  t.equal(
    simPromptTokens({
      messages: [
        { role: 'system', content: 'x'.repeat(10) },
        { role: 'user', content: 'y'.repeat(7) },
      ],
    }),
    5,
  );
  t.equal(
    simPromptTokens({
      messages: [
        {
          role: 'user',
          content: [
            { type: 'text', text: 'abcdefgh' },
            { type: 'image_url', image_url: { url: 'x'.repeat(99) } },
          ],
        },
      ],
    }),
    2,
    'only text parts count',
  );
  t.equal(simPromptTokens({ messages: [{ role: 'assistant', content: null, tool_calls: [] }] }), 1);
  t.equal(simPromptTokens({}), 1);
  t.equal(simPromptTokens('nonsense'), 1);
});

t.test('token text is tok{i} with a trailing space', async (t) => {
  t.equal(simTokenText(0), 'tok0 ');
  t.equal(simTokenText(12), 'tok12 ');
  t.equal(simCompletionText(3), 'tok0 tok1 tok2 ');
  t.equal(simCompletionText(0), '');
});

t.test('max_completion_tokens wins over max_tokens, ignore_max_tokens lifts the cap', async (t) => {
  const o = { ...defaultSimOptions(), tokens: 10 };
  t.same(simCompletionTokens({}, o), { emit: 10, finishReason: 'stop' });
  t.same(simCompletionTokens({ max_tokens: 10 }, o), { emit: 10, finishReason: 'stop' });
  t.same(simCompletionTokens({ max_tokens: 4 }, o), { emit: 4, finishReason: 'length' });
  t.same(simCompletionTokens({ max_tokens: 4, max_completion_tokens: 6 }, o), { emit: 6, finishReason: 'length' });
  t.same(simCompletionTokens({ max_tokens: 4 }, { ...o, ignoreMaxTokens: true }), { emit: 10, finishReason: 'stop' });
  t.same(simCompletionTokens({ max_tokens: 0 }, o), { emit: 10, finishReason: 'stop' }, 'a non-positive cap is ignored');
});

t.test('stream chunks parse as OpenAI chunks', async (t) => {
  const body = { model: 'a"quoted"model', messages: [{ role: 'user', content: 'hello world!' }] };
  const plan = planCompletion(7, body, { ...defaultSimOptions(), tokens: 2 });
  const src = streamChunks(plan, true);
  t.equal(src.count, 5);
  const events = Array.from({ length: src.count }, (_, k) => src.event(k));
  for (const e of events) {
    t.ok(e.startsWith('data: ') && e.endsWith('\n\n'));
  }
  const json = events.map((e) => JSON.parse(e.slice(6)));
  t.same(json[0].choices[0].delta, { role: 'assistant', content: '' });
  t.equal(json[1].choices[0].delta.content, 'tok0 ');
  t.equal(json[2].choices[0].delta.content, 'tok1 ');
  t.equal(json[3].choices[0].finish_reason, 'stop');
  t.same(json[4].choices, []);
  t.same(json[4].usage, { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 });
  for (const j of json) {
    t.equal(j.id, 'chatcmpl-sim-7');
    t.equal(j.object, 'chat.completion.chunk');
    t.equal(j.model, 'a"quoted"model');
  }
  for (const j of json.slice(0, 4)) t.equal(j.usage, null);
  t.equal(DONE_EVENT, 'data: [DONE]\n\n');

  const plain = streamChunks(plan, false);
  t.equal(plain.count, 4);
  t.notMatch(plain.event(1), /usage/);
});

t.test('completion body and error body', async (t) => {
  const plan = planCompletion(1, { model: 'm', messages: [] }, { ...defaultSimOptions(), tokens: 3, usage: 'absent' });
  const c = JSON.parse(completionBody(plan));
  t.equal(c.object, 'chat.completion');
  t.equal(c.choices[0].message.content, 'tok0 tok1 tok2 ');
  t.notOk('usage' in c);
  t.same(JSON.parse(errorBody(429, 'slow down')), {
    error: { message: 'slow down', type: 'rate_limit_error', param: null, code: 'sim_429' },
  });
  t.equal(JSON.parse(errorBody(502, 'x')).error.type, 'server_error');
  t.equal(JSON.parse(errorBody(400, 'x')).error.type, 'invalid_request_error');
});

t.test('simPromptTokens: vLLM documents and chat_template_kwargs count as their JSON, tools and response_format do not', async (t) => {
  const messages = [{ role: 'user', content: 'abcd' }];
  const documents = [{ text: 'x'.repeat(30) }];
  const kwargs = { enable_thinking: false };
  t.equal(simPromptTokens({ messages, documents }), 1 + Math.ceil(JSON.stringify(documents).length / 4));
  t.equal(simPromptTokens({ messages, chat_template_kwargs: kwargs }), 1 + Math.ceil(JSON.stringify(kwargs).length / 4));
  t.equal(simPromptTokens({ messages, tools: [{ type: 'function' }], response_format: { type: 'json_object' } }), 1);
});

t.test("simPromptTokens: a request chat template's range(N) loop renders the messages N times", async (t) => {
  const messages = [{ role: 'user', content: 'x'.repeat(40) }];
  const loop = '{% for _ in range(50) %}{{ messages[0].content }}{% endfor %}';
  t.equal(templateRepeats({ messages, chat_template: loop }), 50);
  t.equal(simPromptTokens({ messages, chat_template: loop }), 500);
  t.equal(simPromptTokens({ messages, chat_template: '{{ messages[0].content }}' }), 10, 'no loop: once');
  const kwargs = { chat_template: loop };
  t.equal(
    simPromptTokens({ messages, chat_template: '{{ x }}', chat_template_kwargs: kwargs }),
    500 + Math.ceil(JSON.stringify(kwargs).length / 4),
    "chat_template_kwargs' template wins (vLLM merges the kwargs last); the kwargs count as their JSON",
  );
  t.equal(templateRepeats({ messages }), 1, 'no template');
});

t.test('simResponsesPromptTokens: a text.format JSON schema counts as its JSON, other formats do not', async (t) => {
  const format = { type: 'json_schema', name: 'r', schema: { type: 'object' } };
  t.equal(simResponsesPromptTokens({ input: 'abcd', text: { format } }), 1 + Math.ceil(JSON.stringify(format).length / 4));
  t.equal(simResponsesPromptTokens({ input: 'abcd', text: { format: { type: 'json_object' } } }), 1);
});

t.test('steered reasoning: the first tokens under reasoning, reasoning_content or both', async (t) => {
  const body = { messages: [{ role: 'user', content: 'q' }] };
  const opts = (fields?: 'reasoning' | 'reasoning_content' | 'both') => ({
    ...defaultSimOptions(),
    tokens: 3,
    reasoningTokens: 2,
    ...(fields && { reasoningFields: fields }),
  });
  const deltas = (fields?: 'reasoning' | 'reasoning_content' | 'both') => {
    const chunks = streamChunks(planCompletion(1, body, opts(fields)), false);
    return [1, 2, 3].map((k) => JSON.parse(chunks.event(k).slice(6)).choices[0].delta);
  };
  t.same(deltas(), [{ reasoning: 'tok0 ' }, { reasoning: 'tok1 ' }, { content: 'tok2 ' }], 'reasoning by default');
  t.same(deltas('both')[0], { reasoning_content: 'tok0 ', reasoning: 'tok0 ' }, 'both: the same text');
  const message = (fields: 'reasoning_content' | 'both', tokens = 3) =>
    JSON.parse(completionBody(planCompletion(1, body, { ...opts(fields), tokens }))).choices[0].message;
  t.same(message('reasoning_content'), { role: 'assistant', reasoning_content: 'tok0 tok1 ', content: 'tok2 ' });
  t.same(message('both', 2), { role: 'assistant', reasoning_content: 'tok0 tok1 ', reasoning: 'tok0 tok1 ', content: null });
});
