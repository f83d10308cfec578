// The endpoints' decisions on input the body does not bound (unit level; the money side is in
// test/e2e/fault-unseen-input.test.ts): a request chat template holds the context window like a
// prompt_embeds part.
import t from 'tap';
import type { ModelConfig } from '../../src/config/schema.ts';
import { estimatePromptTokens } from '../../src/credit/hold-estimate.ts';
import { requestTemplate, unseenPrompt } from '../../src/routes/chat-completions.ts';

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
