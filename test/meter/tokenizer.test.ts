import t from 'tap';
import { countChatCompletionTokens, countTokens } from 'gpt-tokenizer/model/gpt-4o';
import { CHAT_OVERHEAD, createTokenizer, type TokenizerModule } from '../../src/meter/tokenizer.ts';

t.test('imports lazily, once, even with concurrent load() calls', async (t) => {
  let imports = 0;
  const fake: TokenizerModule = { countTokens: (s) => s.length };
  const tok = createTokenizer({ importModule: async () => (imports++, fake) });
  t.equal(imports, 0, 'nothing imported at creation');
  t.equal(tok.loaded, false);
  t.throws(() => tok.countText('x'), { code: 'TOKENIZER_NOT_LOADED' });
  await Promise.all([tok.load(), tok.load()]);
  await tok.load();
  t.equal(imports, 1);
  t.equal(tok.loaded, true);
  t.equal(tok.countText('abc'), 3);
});

t.test('a failed import can be retried', async (t) => {
  let calls = 0;
  const tok = createTokenizer({
    importModule: async () => {
      if (calls++ === 0) throw new Error('boom');
      return { countTokens: () => 1 };
    },
  });
  await t.rejects(tok.load(), /boom/);
  t.equal(tok.loaded, false);
  await tok.load();
  t.equal(tok.countText('x'), 1);
});

t.test('with gpt-tokenizer (o200k_base)', async (t) => {
  const tok = createTokenizer();
  await tok.load();
  const chat = [
    { role: 'system', content: 'You are terse.' },
    { role: 'user', content: 'What is the capital of France? Answer in one word.' },
    { role: 'assistant', content: 'Paris.' },
  ];
  t.equal(tok.countPromptTokens(chat), countChatCompletionTokens!({ messages: chat as never }), 'matches countChatCompletionTokens');
  t.equal(tok.countText(''), 0);
  t.equal(tok.countText('hello world'), countTokens('hello world'));

  const special = 'before <|endoftext|> <|im_start|>after';
  t.doesNotThrow(() => tok.countText(special), 'special-token text never throws');
  t.ok(tok.countText(special) > 3, 'counted as text');
  t.doesNotThrow(() => tok.countPromptTokens([{ role: 'user', content: special }]));

  const asString = tok.countPromptTokens([{ role: 'user', content: 'Describe this picture.' }]);
  const asParts = tok.countPromptTokens([
    {
      role: 'user',
      content: [
        { type: 'text', text: 'Describe this picture.' },
        { type: 'image_url', image_url: { url: 'data:image/png;base64,AAAA' } },
      ],
    },
  ]);
  t.equal(asParts, asString, 'text parts count as text; image parts are ignored');
  t.equal(
    tok.countPromptTokens([{ role: 'assistant', content: [{ type: 'refusal', refusal: 'I cannot.' }] }]),
    tok.countPromptTokens([{ role: 'assistant', content: 'I cannot.' }]),
    'refusal parts count',
  );
  // vLLM renders these part types as text (credit/hold-estimate.ts partText), so they count as text.
  for (const part of [
    { type: 'input_text', text: 'Describe this picture.' },
    { type: 'output_text', text: 'Describe this picture.' },
    { type: 'thinking', thinking: 'Describe this picture.' },
  ]) {
    t.equal(
      tok.countPromptTokens([{ role: 'user', content: [part] }]),
      tok.countPromptTokens([{ role: 'user', content: 'Describe this picture.' }]),
      `${part.type} parts count as text`,
    );
    t.equal(
      await tok.countPromptTokensBounded([{ role: 'user', content: [part] }]),
      tok.countPromptTokens([{ role: 'user', content: 'Describe this picture.' }]),
      `${part.type} parts count as text, bounded too`,
    );
  }

  // Replayed reasoning and a message-level refusal are rendered by some templates (Qwen3 renders the
  // reasoning of turns after the last user message): counted as the hold counts them, reasoning sent under
  // both of its names once (the longer).
  const thought = 'First I compare the two numbers, then I add them.';
  const plain = tok.countPromptTokens([{ role: 'assistant', content: 'It is 4.' }]);
  for (const msg of [
    { role: 'assistant', content: 'It is 4.', reasoning_content: thought },
    { role: 'assistant', content: 'It is 4.', reasoning: thought },
    { role: 'assistant', content: 'It is 4.', reasoning_content: thought, reasoning: thought },
    { role: 'assistant', content: 'It is 4.', reasoning_content: 'First', reasoning: thought },
  ]) {
    t.equal(tok.countPromptTokens([msg]), plain + countTokens(thought), `replayed reasoning counted once: ${Object.keys(msg).join(', ')}`);
    t.equal(await tok.countPromptTokensBounded([msg]), plain + countTokens(thought), `the same, bounded: ${Object.keys(msg).join(', ')}`);
  }
  t.equal(
    await tok.countPromptTokensBounded([{ role: 'assistant', content: 'It is 4.', refusal: 'I cannot.' }]),
    plain + countTokens('I cannot.'),
    "a message's refusal counts",
  );

  const args = '{"city":"Paris","unit":"celsius"}';
  const withCall = tok.countPromptTokens([
    {
      role: 'assistant',
      content: null,
      tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: args } }],
    },
    { role: 'tool', tool_call_id: 'call_1', content: '{"temp":21}' },
  ]);
  const expected =
    CHAT_OVERHEAD.perRequest +
    2 * CHAT_OVERHEAD.perMessage +
    countTokens('assistant') +
    countTokens('tool') +
    CHAT_OVERHEAD.perToolCall +
    countTokens('get_weather') +
    countTokens(args) +
    countTokens('{"temp":21}');
  t.equal(withCall, expected, 'tool_calls arguments and names are counted');

  const named = tok.countPromptTokens([{ role: 'user', name: 'alice', content: 'hi' }]);
  t.equal(named - tok.countPromptTokens([{ role: 'user', content: 'hi' }]), countTokens('alice') + CHAT_OVERHEAD.perName);
  t.equal(
    tok.countPromptTokens([null, 'junk', { role: 'user', content: 'hi' }]),
    tok.countPromptTokens([{ role: 'user', content: 'hi' }]),
    'non-objects skipped',
  );
});

t.test('bounded counting: same count for prose, long runs cut, the loop served between slices, bytes past the budget', async (t) => {
  const { createTokenizer, SLICE_CHARS } = await import('../../src/meter/tokenizer.ts');
  const tk = createTokenizer();
  await tk.load();
  const prose = 'The committee reviewed the proposal in detail. '.repeat(50);
  t.equal(await tk.countTextBounded(prose), tk.countText(prose), 'short prose: the plain count');
  const big = 'The quick brown fox jumps over the lazy dog. '.repeat(2000);
  const whole = tk.countText(big);
  const bounded = await tk.countTextBounded(big);
  t.ok(bounded >= whole && bounded <= whole * 1.01, `slices at ${SLICE_CHARS} chars cost at most 1 % (${bounded} vs ${whole})`);

  // A 1 MB one-word prompt: counted in pieces, never more than a few ms at a time.
  const word = 'abcdefghij'.repeat(100_000);
  let maxGap = 0;
  let last = performance.now();
  const ticker = setInterval(() => {
    const now = performance.now();
    maxGap = Math.max(maxGap, now - last);
    last = now;
  }, 1);
  const t0 = performance.now();
  const n = await tk.countTextBounded(word);
  clearInterval(ticker);
  t.ok(n > 0 && n <= Buffer.byteLength(word), `${n} tokens, at most the byte bound`);
  t.ok(performance.now() - t0 < 3000, 'finished (budget 2 s)');
  t.ok(maxGap < 50, `the event loop was never blocked long (longest gap ${maxGap.toFixed(1)} ms)`);

  // Past the budget the rest is its byte count: an upper bound, at once.
  t.equal(await tk.countTextBounded(word, { deadline: 0 }), Buffer.byteLength(word));
});
