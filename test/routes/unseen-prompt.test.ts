// The endpoints' decisions on input the body does not bound (unit level; the money side is in
// test/e2e/fault-unseen-input.test.ts and chat-rendered-fields.test.ts): a request chat template holds
// the context window like a prompt_embeds part; a Responses text.format JSON schema is held and counted
// like chat's response_format schema.
import t from 'tap';
import type { ModelConfig } from '../../src/config/schema.ts';
import { estimatePromptTokens, PER_MESSAGE, PER_REQUEST, PER_TOOLS_BLOCK } from '../../src/credit/hold-estimate.ts';
import { requestTemplate, unseenPrompt } from '../../src/routes/chat-completions.ts';
import { estimateResponsesPrompt, formatSchema } from '../../src/routes/responses.ts';

const model = { contextWindow: 4096 } as ModelConfig;
const messages = [{ role: 'user', content: 'hi' }];

t.test('chat: a request chat template holds the context window, once', async (t) => {
  const loop = '{% for _ in range(9999) %}{{ messages }}{% endfor %}';
  for (const [name, body, held] of [
    ['chat_template', { messages, chat_template: loop }, true],
    ['chat_template_kwargs.chat_template', { messages, chat_template_kwargs: { chat_template: loop } }, true],
    ['an empty template is still a template (vLLM checks for None)', { messages, chat_template: '' }, true],
    ['no template', { messages }, false],
    ['null template', { messages, chat_template: null, chat_template_kwargs: { chat_template: null } }, false],
    ['kwargs without a template', { messages, chat_template_kwargs: { enable_thinking: false } }, false],
  ] as const) {
    t.equal(requestTemplate(body), held, name);
    const estimate = estimatePromptTokens(body, 0);
    t.same(
      unseenPrompt(body, model, estimate),
      held ? { heldPrompt: 4096 } : undefined,
      `${name}: ${held ? 'the window' : 'the estimate'}`,
    );
  }
  const big = { messages: [{ role: 'user', content: 'x'.repeat(10_000) }], chat_template: loop };
  t.same(unseenPrompt(big, model, estimatePromptTokens(big, 0)), { heldPrompt: estimatePromptTokens(big, 0) }, 'the estimate when larger');
});

t.test('responses: a text.format JSON schema is held like a tool list, other formats add nothing', async (t) => {
  const base = estimateResponsesPrompt({ model: 'm', input: 'hi' });
  t.equal(base, PER_REQUEST + PER_MESSAGE + 2);
  const format = { type: 'json_schema', name: 'r', schema: { type: 'object', properties: { a: { type: 'string' } } }, strict: true };
  t.equal(formatSchema({ model: 'm', text: { format } }), format);
  t.equal(
    estimateResponsesPrompt({ model: 'm', input: 'hi', text: { format } }),
    base + PER_TOOLS_BLOCK + 2 * Buffer.byteLength(JSON.stringify(format)),
    'twice its JSON and a block',
  );
  for (const text of [{ format: { type: 'json_object' } }, { format: { type: 'text' } }, { verbosity: 'low' }, null, 'odd']) {
    t.equal(estimateResponsesPrompt({ model: 'm', input: 'hi', text }), base, `text ${JSON.stringify(text)}: nothing added`);
  }
});
