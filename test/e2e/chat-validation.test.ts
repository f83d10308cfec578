// What POST /v1/chat/completions refuses before any upstream is contacted (SPEC §1.2, §3): Pydantic-
// shaped 422 bodies (exactly the five fields), 415, 413, 404 model_not_found, 403 permission_denied,
// 402 insufficient_credit. The simulator must see none of these requests.
import { request } from 'node:http';
import t from 'tap';
import { startGateway } from '../helpers/gateway.ts';
import { postChat, startSim } from './chat-fixture.ts';

const USER = [{ role: 'user', content: 'hi' }];
const ROLES_EXPECTED = "'system', 'developer', 'user', 'assistant' or 'tool'";

const sim = await startSim(t);
const gw = await startGateway(t, { upstreamUrl: sim.url, config: { limits: { max_body_bytes: 2048 } } });
const { key } = await gw.createKey({ account: 'val-a', env: 'test' });

/** One 422 entry with all five fields. */
function issue(loc: string[], type: string, msg: string, input: unknown, ctx: Record<string, unknown> = {}) {
  return { loc, msg, type, input, ctx };
}

t.afterEach(() => sim.clear());

t.test('422 bodies, exact', async (t) => {
  const cases: [string, unknown, ReturnType<typeof issue>[]][] = [
    ['missing model', { messages: USER }, [issue(['body', 'model'], 'missing', 'Field required', { messages: USER })]],
    [
      'empty model',
      { model: '', messages: USER },
      [issue(['body', 'model'], 'string_too_short', 'String should have at least 1 character', '', { min_length: 1 })],
    ],
    ['model not a string', { model: 7, messages: USER }, [issue(['body', 'model'], 'string_type', 'Input should be a valid string', 7)]],
    ['messages missing', { model: 'sim-small' }, [issue(['body', 'messages'], 'missing', 'Field required', { model: 'sim-small' })]],
    [
      'messages empty',
      { model: 'sim-small', messages: [] },
      [
        issue(['body', 'messages'], 'too_short', 'List should have at least 1 item after validation, not 0', [], {
          field_type: 'List',
          min_length: 1,
          actual_length: 0,
        }),
      ],
    ],
    [
      'messages not a list',
      { model: 'sim-small', messages: { role: 'user', content: 'hi' } },
      [issue(['body', 'messages'], 'list_type', 'Input should be a valid list', { role: 'user', content: 'hi' })],
    ],
    [
      'bad role',
      { model: 'sim-small', messages: [{ role: 'wizard', content: 'hi' }] },
      [
        issue(['body', 'messages', '0', 'role'], 'literal_error', `Input should be ${ROLES_EXPECTED}`, 'wizard', {
          expected: ROLES_EXPECTED,
        }),
      ],
    ],
    [
      'role missing',
      { model: 'sim-small', messages: [...USER, { content: 'hi' }] },
      [issue(['body', 'messages', '1', 'role'], 'missing', 'Field required', { content: 'hi' })],
    ],
    [
      'content null on a user message',
      { model: 'sim-small', messages: [{ role: 'user', content: null }] },
      [issue(['body', 'messages', '0', 'content'], 'string_type', 'Input should be a valid string', null)],
    ],
    [
      'content null on assistant without tool_calls',
      { model: 'sim-small', messages: [...USER, { role: 'assistant', content: null }] },
      [issue(['body', 'messages', '1', 'content'], 'string_type', 'Input should be a valid string', null)],
    ],
    [
      'stream not boolean',
      { model: 'sim-small', messages: USER, stream: [true] },
      [issue(['body', 'stream'], 'bool_type', 'Input should be a valid boolean', [true])],
    ],
    [
      'max_tokens 0',
      { model: 'sim-small', messages: USER, max_tokens: 0 },
      [issue(['body', 'max_tokens'], 'greater_than', 'Input should be greater than 0', 0, { gt: 0 })],
    ],
    [
      'max_tokens 1.5',
      { model: 'sim-small', messages: USER, max_tokens: 1.5 },
      [issue(['body', 'max_tokens'], 'int_from_float', 'Input should be a valid integer, got a number with a fractional part', 1.5)],
    ],
    [
      'max_tokens "5"',
      { model: 'sim-small', messages: USER, max_tokens: '5' },
      [issue(['body', 'max_tokens'], 'int_type', 'Input should be a valid integer', '5')],
    ],
    [
      'max_completion_tokens -1',
      { model: 'sim-small', messages: USER, max_completion_tokens: -1 },
      [issue(['body', 'max_completion_tokens'], 'greater_than', 'Input should be greater than 0', -1, { gt: 0 })],
    ],
    [
      'n 0',
      { model: 'sim-small', messages: USER, n: 0 },
      [issue(['body', 'n'], 'greater_than', 'Input should be greater than 0', 0, { gt: 0 })],
    ],
    [
      'body not an object',
      [1, 2],
      [issue(['body'], 'model_attributes_type', 'Input should be a valid dictionary or object to extract fields from', [1, 2])],
    ],
    [
      'every problem at once',
      {},
      [issue(['body', 'model'], 'missing', 'Field required', {}), issue(['body', 'messages'], 'missing', 'Field required', {})],
    ],
  ];
  for (const [name, body, detail] of cases) {
    const res = await postChat(gw, key, body);
    t.equal(res.status, 422, name);
    t.match(res.headers.get('content-type'), /^application\/json/);
    t.same(await res.json(), { detail }, name);
  }
  t.equal(sim.requests.length, 0, 'no invalid request reached the upstream');
});

t.test('content null on an assistant message with tool_calls is accepted and forwarded as null', async (t) => {
  const messages = [
    ...USER,
    { role: 'assistant', content: null, tool_calls: [{ id: 'c1', type: 'function', function: { name: 'f', arguments: '{}' } }] },
    { role: 'tool', tool_call_id: 'c1', content: 'ok' },
  ];
  const res = await postChat(gw, key, { model: 'sim-small', messages });
  t.equal(res.status, 200);
  await res.arrayBuffer();
  t.same(sim.requests[0]?.body.messages, messages);
});

t.test('a JSON syntax error is a 422 json_invalid with the five fields', async (t) => {
  const res = await postChat(gw, key, '{"model": "sim-small", "messages": [');
  t.equal(res.status, 422);
  const body: any = await res.json();
  t.equal(body.detail.length, 1);
  const d = body.detail[0];
  t.same(Object.keys(d).sort(), ['ctx', 'input', 'loc', 'msg', 'type']);
  t.match(d, { loc: ['body'], type: 'json_invalid', msg: 'JSON decode error', ctx: Object });
  t.ok(
    d.loc.every((l: unknown) => typeof l === 'string'),
    'loc entries are strings',
  );
  t.equal(sim.requests.length, 0);
});

t.test('a Content-Type other than application/json: 415 unsupported_media_type', async (t) => {
  for (const ct of ['text/plain', 'application/x-www-form-urlencoded', 'application/jsonx']) {
    const res = await postChat(gw, key, JSON.stringify({ model: 'sim-small', messages: USER }), { 'content-type': ct });
    t.equal(res.status, 415, ct);
    t.match(await res.json(), { error: { code: 'unsupported_media_type', type: 'invalid_request_error', param: null, message: String } });
  }
  const ok = await postChat(gw, key, { model: 'sim-small', messages: USER }, { 'content-type': 'Application/JSON; charset=utf-8' });
  t.equal(ok.status, 200, 'parameters and case are fine');
  await ok.arrayBuffer();
  t.equal(sim.requests.length, 1);
});

t.test('a body over limits.max_body_bytes: 413 request_too_large, declared or chunked', async (t) => {
  const big = JSON.stringify({ model: 'sim-small', messages: [{ role: 'user', content: 'x'.repeat(3000) }] });
  const res = await postChat(gw, key, big);
  t.equal(res.status, 413);
  t.match(await res.json(), { error: { code: 'request_too_large', type: 'invalid_request_error' } });

  // Without content-length the limit still holds while reading.
  const chunked = await new Promise<{ status: number; body: string }>((resolve, reject) => {
    const req = request(
      `${gw.url}/v1/chat/completions`,
      { method: 'POST', headers: { ...gw.auth(key), 'content-type': 'application/json', 'transfer-encoding': 'chunked' } },
      (r) => {
        let body = '';
        r.on('data', (c) => (body += c));
        r.on('end', () => resolve({ status: r.statusCode!, body }));
      },
    );
    req.on('error', reject);
    req.write(big.slice(0, 1500));
    req.end(big.slice(1500));
  });
  t.equal(chunked.status, 413);
  t.match(JSON.parse(chunked.body), { error: { code: 'request_too_large' } });

  const fits = await postChat(gw, key, { model: 'sim-small', messages: [{ role: 'user', content: 'x'.repeat(1900) }] });
  t.equal(fits.status, 200, 'just under the limit passes');
  await fits.arrayBuffer();
  t.equal(sim.requests.length, 1);
});

t.test('unknown model: 404 model_not_found with param model', async (t) => {
  const res = await postChat(gw, key, { model: 'gpt-9', messages: USER });
  t.equal(res.status, 404);
  t.match(await res.json(), { error: { code: 'model_not_found', type: 'invalid_request_error', param: 'model' } });
  t.equal(sim.requests.length, 0);
});

t.test('model outside the key allow-list, or a key without the chat scope: 403 permission_denied', async (t) => {
  const narrow = await gw.createKey({ account: 'val-b', env: 'test', models: ['sim-free'] });
  const res = await postChat(gw, narrow.key, { model: 'sim-small', messages: USER });
  t.equal(res.status, 403);
  t.match(await res.json(), { error: { code: 'permission_denied', type: 'permission_error' } });
  const allowed = await postChat(gw, narrow.key, { model: 'sim-free', messages: USER });
  t.equal(allowed.status, 200, 'the allowed model works');
  await allowed.arrayBuffer();

  const noChat = await gw.createKey({ account: 'val-b', env: 'test', scopes: ['models', 'shares'] });
  const r2 = await postChat(gw, noChat.key, { model: 'sim-small', messages: USER });
  t.equal(r2.status, 403);
  t.match(await r2.json(), { error: { code: 'permission_denied', type: 'permission_error' } });
  const r3 = await postChat(gw, noChat.key, { nonsense: true });
  t.equal(r3.status, 403, 'scope is checked before the body');
  await r3.arrayBuffer();
  t.equal(sim.requests.length, 1, 'only the allowed request reached the upstream');
});

t.test('a live key with zero balance: 402 insufficient_credit after validation, upstream untouched', async (t) => {
  const live = await gw.createKey({ account: 'val-c', env: 'live' });
  const res = await postChat(gw, live.key, { model: 'sim-small', messages: USER, stream: true });
  t.equal(res.status, 402);
  t.match(await res.json(), { error: { code: 'insufficient_credit', type: 'insufficient_credit', param: null } });
  t.equal(res.headers.get('x-should-retry'), 'false');
  const bad = await postChat(gw, live.key, { model: 'sim-small', messages: [] });
  t.equal(bad.status, 422, 'validation comes before credit');
  await bad.arrayBuffer();
  t.equal(sim.requests.length, 0);
});
