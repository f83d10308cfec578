// validateChatBody (SPEC §1.2, §3.1): Pydantic v2 shaped issues for the fields Tollgate acts on, every
// problem collected (the first MAX_ISSUES), every other field left alone.
import t from 'tap';
import { CUT, MAX_ECHO_CHARS, MAX_ISSUES, ValidationError } from '../../src/http/errors.ts';
import { validateChatBody } from '../../src/routes/chat-validate.ts';

const USER = { role: 'user', content: 'hi' };
const base = (extra: Record<string, unknown> = {}) => ({ model: 'm', messages: [USER], ...extra });
const ROLES = "'system', 'developer', 'user', 'assistant' or 'tool'";

/** The detail list the body fails with, or null when it passes. */
function detail(body: unknown): unknown[] | null {
  try {
    validateChatBody(body, 8);
    return null;
  } catch (e) {
    if (!(e instanceof ValidationError)) throw e;
    return e.detail;
  }
}

const issue = (loc: string[], type: string, msg: string, input: unknown, ctx: Record<string, unknown> = {}) => ({
  loc,
  msg,
  type,
  input,
  ctx,
});

t.test('valid bodies pass and come back as the same object', async (t) => {
  const ok: [string, Record<string, unknown>][] = [
    ['minimal', base()],
    ['every role', { model: 'm', messages: ['system', 'developer', 'user', 'assistant', 'tool'].map((role) => ({ role, content: 'x' })) }],
    [
      'content parts',
      base({
        messages: [
          {
            role: 'user',
            content: [
              { type: 'text', text: 'a' },
              { type: 'image_url', image_url: { url: 'u' } },
            ],
          },
        ],
      }),
    ],
    ['empty content string', base({ messages: [{ role: 'user', content: '' }] })],
    [
      'assistant null content with tool_calls',
      base({
        messages: [
          USER,
          { role: 'assistant', content: null, tool_calls: [{ id: 'c', type: 'function', function: { name: 'f', arguments: '{}' } }] },
        ],
      }),
    ],
    ['assistant without content but with tool_calls', base({ messages: [USER, { role: 'assistant', tool_calls: [{ id: 'c' }] }] })],
    ['stream true/false', base({ stream: true })],
    ['stream false', base({ stream: false })],
    ['positive integers', base({ max_tokens: 1, max_completion_tokens: 4096, n: 2 })],
    ['stream_options object or null', base({ stream: true, stream_options: { include_usage: true } })],
    ['stream_options null', base({ stream_options: null })],
    // OpenAI's API accepts null for these optional fields (= not set).
    [
      'stream, max_tokens, max_completion_tokens and n null',
      base({ stream: null, max_tokens: null, max_completion_tokens: null, n: null }),
    ],
    ['unknown fields untouched', base({ temperature: 2, foo: [1, { bar: null }], tools: 'not checked', user: 5 })],
    ['integral float is an integer', base({ max_tokens: 5.0 })],
  ];
  for (const [name, body] of ok) {
    const copy = structuredClone(body);
    t.equal(validateChatBody(body, 8), body, name);
    t.same(body, copy, `${name}: not modified`);
  }
});

t.test('n is bounded by limits.max_n (SPEC §12): past it, 422 less_than_equal', async (t) => {
  t.equal(detail(base({ n: 8 })), null, 'n = max_n passes');
  t.same(detail(base({ n: 100 })), [issue(['body', 'n'], 'less_than_equal', 'Input should be less than or equal to 8', 100, { le: 8 })]);
  t.same(detail(base({ n: 2 ** 53 + 2 })), [
    issue(['body', 'n'], 'int_parsing_size', 'Unable to parse input string as an integer, exceeded maximum size', 2 ** 53 + 2),
  ]);
});

t.test('invalid bodies: Pydantic type, msg, loc, input and ctx', async (t) => {
  const bad: [string, unknown, unknown[]][] = [
    [
      'not an object (array)',
      [],
      [issue(['body'], 'model_attributes_type', 'Input should be a valid dictionary or object to extract fields from', [])],
    ],
    [
      'not an object (null)',
      null,
      [issue(['body'], 'model_attributes_type', 'Input should be a valid dictionary or object to extract fields from', null)],
    ],
    [
      'not an object (string)',
      'hi',
      [issue(['body'], 'model_attributes_type', 'Input should be a valid dictionary or object to extract fields from', 'hi')],
    ],
    ['model missing', { messages: [USER] }, [issue(['body', 'model'], 'missing', 'Field required', { messages: [USER] })]],
    [
      'model empty',
      base({ model: '' }),
      [issue(['body', 'model'], 'string_too_short', 'String should have at least 1 character', '', { min_length: 1 })],
    ],
    ['model null', base({ model: null }), [issue(['body', 'model'], 'string_type', 'Input should be a valid string', null)]],
    ['messages missing', { model: 'm' }, [issue(['body', 'messages'], 'missing', 'Field required', { model: 'm' })]],
    [
      'messages empty',
      base({ messages: [] }),
      [
        issue(['body', 'messages'], 'too_short', 'List should have at least 1 item after validation, not 0', [], {
          field_type: 'List',
          min_length: 1,
          actual_length: 0,
        }),
      ],
    ],
    ['messages a string', base({ messages: 'hi' }), [issue(['body', 'messages'], 'list_type', 'Input should be a valid list', 'hi')]],
    [
      'message not an object',
      base({ messages: [USER, 'hi'] }),
      [issue(['body', 'messages', '1'], 'dict_type', 'Input should be a valid dictionary', 'hi')],
    ],
    [
      'bad role',
      base({ messages: [{ role: 'bot', content: 'x' }] }),
      [issue(['body', 'messages', '0', 'role'], 'literal_error', `Input should be ${ROLES}`, 'bot', { expected: ROLES })],
    ],
    [
      'role not a string',
      base({ messages: [{ role: 1, content: 'x' }] }),
      [issue(['body', 'messages', '0', 'role'], 'literal_error', `Input should be ${ROLES}`, 1, { expected: ROLES })],
    ],
    [
      'role missing',
      base({ messages: [{ content: 'x' }] }),
      [issue(['body', 'messages', '0', 'role'], 'missing', 'Field required', { content: 'x' })],
    ],
    [
      'content missing on user',
      base({ messages: [{ role: 'user' }] }),
      [issue(['body', 'messages', '0', 'content'], 'missing', 'Field required', { role: 'user' })],
    ],
    [
      'content null on user',
      base({ messages: [{ role: 'user', content: null }] }),
      [issue(['body', 'messages', '0', 'content'], 'string_type', 'Input should be a valid string', null)],
    ],
    [
      'content null on assistant, empty tool_calls',
      base({ messages: [{ role: 'assistant', content: null, tool_calls: [] }] }),
      [issue(['body', 'messages', '0', 'content'], 'string_type', 'Input should be a valid string', null)],
    ],
    [
      'content null on tool with tool_calls',
      base({ messages: [{ role: 'tool', content: null, tool_calls: [{}] }] }),
      [issue(['body', 'messages', '0', 'content'], 'string_type', 'Input should be a valid string', null)],
    ],
    [
      'content a number',
      base({ messages: [{ role: 'user', content: 5 }] }),
      [issue(['body', 'messages', '0', 'content'], 'string_type', 'Input should be a valid string', 5)],
    ],
    [
      'content part not an object',
      base({ messages: [{ role: 'user', content: ['x'] }] }),
      [issue(['body', 'messages', '0', 'content', '0'], 'dict_type', 'Input should be a valid dictionary', 'x')],
    ],
    [
      'content part without type',
      base({ messages: [{ role: 'user', content: [{ text: 'x' }] }] }),
      [issue(['body', 'messages', '0', 'content', '0', 'type'], 'missing', 'Field required', { text: 'x' })],
    ],
    ['stream a string', base({ stream: 'true' }), [issue(['body', 'stream'], 'bool_type', 'Input should be a valid boolean', 'true')]],
    [
      'max_tokens 0',
      base({ max_tokens: 0 }),
      [issue(['body', 'max_tokens'], 'greater_than', 'Input should be greater than 0', 0, { gt: 0 })],
    ],
    [
      'max_tokens negative',
      base({ max_tokens: -3 }),
      [issue(['body', 'max_tokens'], 'greater_than', 'Input should be greater than 0', -3, { gt: 0 })],
    ],
    [
      'max_tokens 1.5',
      base({ max_tokens: 1.5 }),
      [issue(['body', 'max_tokens'], 'int_from_float', 'Input should be a valid integer, got a number with a fractional part', 1.5)],
    ],
    ['max_tokens "5"', base({ max_tokens: '5' }), [issue(['body', 'max_tokens'], 'int_type', 'Input should be a valid integer', '5')]],
    [
      'max_tokens 2^53',
      base({ max_tokens: 2 ** 53 }),
      [issue(['body', 'max_tokens'], 'int_parsing_size', 'Unable to parse input string as an integer, exceeded maximum size', 2 ** 53)],
    ],
    [
      'max_completion_tokens 0',
      base({ max_completion_tokens: 0 }),
      [issue(['body', 'max_completion_tokens'], 'greater_than', 'Input should be greater than 0', 0, { gt: 0 })],
    ],
    ['n 0', base({ n: 0 }), [issue(['body', 'n'], 'greater_than', 'Input should be greater than 0', 0, { gt: 0 })]],
    ['n true', base({ n: true }), [issue(['body', 'n'], 'int_type', 'Input should be a valid integer', true)]],
    [
      'stream_options a list',
      base({ stream_options: [] }),
      [issue(['body', 'stream_options'], 'dict_type', 'Input should be a valid dictionary', [])],
    ],
  ];
  for (const [name, body, want] of bad) t.same(detail(body), want, name);
});

t.test('every problem is reported, in field order, each with all five fields', async (t) => {
  const d = detail({ model: '', messages: [{ role: 'x', content: null }, 7], stream: 1, max_tokens: 0, n: 1.5 }) as Record<
    string,
    unknown
  >[];
  t.same(
    d.map((i) => (i.loc as string[]).join('.')),
    ['body.model', 'body.messages.0.role', 'body.messages.0.content', 'body.messages.1', 'body.stream', 'body.max_tokens', 'body.n'],
  );
  for (const i of d) t.same(Object.keys(i).sort(), ['ctx', 'input', 'loc', 'msg', 'type']);
  t.ok(
    d.every((i) => (i.loc as unknown[]).every((l) => typeof l === 'string')),
    'loc parts are strings',
  );
});

t.test('a body of a million bad messages or parts: the first MAX_ISSUES issues, found without walking the rest', async (t) => {
  const n = 2_000_000;
  for (const [name, body] of [
    ['messages', { model: 'm', messages: Array(n).fill(1) }],
    ['content parts', { model: 'm', messages: [{ role: 'user', content: Array(n).fill(1) }] }],
    ['messages missing content', { model: 'm', messages: Array(n).fill({ role: 'user' }) }],
  ] as const) {
    const t0 = performance.now();
    const d = detail(body) as { loc: string[]; input: unknown }[];
    const ms = performance.now() - t0;
    t.equal(d.length, MAX_ISSUES, `${name}: ${MAX_ISSUES} issues`);
    t.ok(ms < 200, `${name}: refused in ${ms.toFixed(1)} ms`);
    t.ok(JSON.stringify({ detail: d }).length < 16 * 1024, `${name}: a small 422`);
  }
  const d = detail({ model: 'm', messages: Array(n).fill(1) }) as { loc: string[] }[];
  t.same(d.at(-1)!.loc, ['body', 'messages', String(MAX_ISSUES - 1)], 'the first ones, in order');
});

t.test('a missing field echoes its enclosing object, cut to a bound (SPEC §2a)', async (t) => {
  const pad = 'x'.repeat(4 * 1024 * 1024);
  const d = detail({ messages: [USER], pad }) as { loc: string[]; input: { pad: string; messages: unknown } }[];
  t.same(d[0]!.loc, ['body', 'model']);
  t.same(d[0]!.input.messages, [USER], 'small members are kept');
  t.ok(d[0]!.input.pad.length <= MAX_ECHO_CHARS && d[0]!.input.pad.endsWith(CUT), 'a long string is cut');
});
