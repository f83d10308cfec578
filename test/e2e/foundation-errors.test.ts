// Routing first (404/405 whatever the key), x-request-id on every response, and the edge's 413/415/422
// bodies over real HTTP (SPEC §2a, §3). Bodies go to admin endpoints: they are the JSON routes that exist
// in the foundation.
import t from 'tap';
import type { Test } from 'tap';
import type { ErrorCode } from '../../src/http/errors.ts';
import { ADMIN_TOKEN, expectError as expectEnvelope, REQ_ID, startGateway, type ErrorEnvelope } from '../helpers/gateway.ts';
import { waitFor } from '../helpers/wait.ts';
import { postChat, startSim } from './chat-fixture.ts';

const ADMIN = { authorization: `Bearer ${ADMIN_TOKEN}` };
const JSON_HEADERS = { ...ADMIN, 'content-type': 'application/json' };

/** The shared envelope check (helpers/gateway.ts expectError), plus a JSON content type, a message and a param. */
async function expectError(t: Test, res: Response, status: number, code: ErrorCode): Promise<ErrorEnvelope> {
  const { error } = await expectEnvelope(t, res, status, code);
  t.match(res.headers.get('content-type'), /^application\/json/);
  t.type(error.message, 'string');
  t.ok(error.message.length > 0);
  t.ok(error.param === null || typeof error.param === 'string');
  return error;
}

/** Asserts a 422 (SPEC §3.1): every entry has exactly the five fields; returns the detail list. */
async function expect422(
  t: Test,
  res: Response,
): Promise<{ loc: string[]; msg: string; type: string; input: unknown; ctx: Record<string, unknown> }[]> {
  const text = await res.text();
  t.equal(res.status, 422, text);
  t.match(res.headers.get('x-request-id'), REQ_ID);
  const body = JSON.parse(text);
  t.same(Object.keys(body), ['detail']);
  t.ok(Array.isArray(body.detail) && body.detail.length > 0, 'detail is a non-empty list');
  for (const d of body.detail) {
    t.same(Object.keys(d).sort(), ['ctx', 'input', 'loc', 'msg', 'type'], 'all five fields');
    t.ok(Array.isArray(d.loc) && d.loc.every((x: unknown) => typeof x === 'string'), 'loc is strings');
    t.ok(['body', 'path', 'query', 'header'].includes(d.loc[0]), `loc starts with a location: ${d.loc[0]}`);
    t.type(d.msg, 'string');
    t.type(d.type, 'string');
    t.ok(d.ctx && typeof d.ctx === 'object' && !Array.isArray(d.ctx), 'ctx is an object');
  }
  return body.detail;
}

const post = (url: string, body: unknown, headers: Record<string, string> = JSON_HEADERS) =>
  fetch(url, { method: 'POST', headers, body: typeof body === 'string' ? body : JSON.stringify(body) });

t.test('routing comes first: unknown paths are 404 not_found and wrong methods 405, whatever the key', async (t) => {
  const gw = await startGateway(t);
  const { key } = await gw.createKey({ account: 'acme', env: 'live' });
  const auths: Record<string, Record<string, string>> = {
    none: {},
    valid: gw.auth(key),
    invalid: gw.auth('svc-live-' + '2'.repeat(32)),
    basic: { authorization: 'Basic dTpw' },
  };
  for (const [who, headers] of Object.entries(auths)) {
    for (const path of ['/', '/nope', '/v1', '/v1/models/', '/v1/models/x', '/v1/chat', '/admin/keys']) {
      await expectError(t, await fetch(gw.url + path, { headers }), 404, 'not_found');
    }
    const res = await fetch(`${gw.url}/v1/models`, {
      method: 'POST',
      headers: { ...headers, 'content-type': 'application/json' },
      body: '{}',
    });
    const err = await expectError(t, res, 405, 'method_not_allowed');
    t.equal(res.headers.get('allow'), 'GET', `Allow with ${who} key`);
    t.match(err.message, 'POST');
    const del = await fetch(`${gw.url}/v1/models`, { method: 'DELETE', headers });
    await expectError(t, del, 405, 'method_not_allowed');
    t.equal(del.headers.get('allow'), 'GET');
  }
});

t.test('admin listener: 404 and 405 come before the admin token check', async (t) => {
  const gw = await startGateway(t);
  for (const headers of [{}, ADMIN, { authorization: 'Bearer wrong' }]) {
    await expectError(t, await fetch(`${gw.adminUrl}/admin/nope`, { headers }), 404, 'not_found');
    await expectError(t, await fetch(`${gw.adminUrl}/v1/models`, { headers }), 404, 'not_found');
    await expectError(t, await fetch(`${gw.adminUrl}/admin/keys/a/b`, { headers }), 404, 'not_found');
    const res = await fetch(`${gw.adminUrl}/admin/keys`, { method: 'DELETE', headers });
    await expectError(t, res, 405, 'method_not_allowed');
    t.same(
      res.headers
        .get('allow')!
        .split(',')
        .map((s) => s.trim())
        .sort(),
      ['GET', 'POST'],
    );
    const m = await fetch(`${gw.adminUrl}/metrics`, { method: 'POST', headers });
    await expectError(t, m, 405, 'method_not_allowed');
    t.equal(m.headers.get('allow'), 'GET');
    const k = await fetch(`${gw.adminUrl}/admin/keys/key_x`, { method: 'PUT', headers });
    await expectError(t, k, 405, 'method_not_allowed');
    t.same(
      k.headers
        .get('allow')!
        .split(',')
        .map((s) => s.trim())
        .sort(),
      ['DELETE', 'GET', 'PATCH'],
    );
  }
});

t.test('HEAD is answered like GET, without a body', async (t) => {
  const gw = await startGateway(t);
  const { key } = await gw.createKey({ account: 'acme', env: 'test' });
  const res = await fetch(`${gw.url}/v1/models`, { method: 'HEAD', headers: gw.auth(key) });
  t.equal(res.status, 200);
  t.match(res.headers.get('x-request-id'), REQ_ID);
  t.equal(await res.text(), '');
  const h = await fetch(`${gw.adminUrl}/healthz`, { method: 'HEAD' });
  t.equal(h.status, 200);
});

t.test('every response carries a fresh x-request-id, and the request log line carries the same id', async (t) => {
  const gw = await startGateway(t);
  const { key } = await gw.createKey({ account: 'acme', env: 'live' });
  const requests: [string, RequestInit][] = [
    [`${gw.url}/v1/models`, { headers: gw.auth(key) }],
    [`${gw.url}/v1/models`, {}],
    [`${gw.url}/nope`, {}],
    [`${gw.url}/v1/models`, { method: 'PUT' }],
    [`${gw.adminUrl}/healthz`, {}],
    [`${gw.adminUrl}/readyz`, {}],
    [`${gw.adminUrl}/metrics`, {}],
    [`${gw.adminUrl}/admin/keys?account=acme`, {}],
    [`${gw.adminUrl}/admin/keys?account=acme`, { headers: ADMIN }],
    [`${gw.adminUrl}/admin/keys`, { method: 'POST', headers: { ...ADMIN, 'content-type': 'text/plain' }, body: 'x' }],
    [`${gw.adminUrl}/admin/keys`, { method: 'POST', headers: JSON_HEADERS, body: '{' }],
    [
      `${gw.adminUrl}/admin/keys`,
      { method: 'POST', headers: JSON_HEADERS, body: JSON.stringify({ account: 'a', env: 'test', name: 'n' }) },
    ],
  ];
  const ids = new Set<string>();
  for (const [url, init] of requests) {
    const res = await fetch(url, init);
    await res.arrayBuffer();
    const id = res.headers.get('x-request-id');
    t.match(id, REQ_ID, `${init.method ?? 'GET'} ${url} → ${res.status}`);
    ids.add(id!);
  }
  t.equal(ids.size, requests.length, 'ids are unique');
  // A request's line is written once its response has closed: wait for all of them, bounded.
  const loggedIds = () =>
    new Set(
      gw.logs
        .map((l) => JSON.parse(l))
        .filter((l) => l.msg === 'request' || l.msg === 'request failed')
        .map((l) => l.request_id),
    );
  await waitFor(() => [...ids].every((id) => loggedIds().has(id)), 3000);
  const logged = loggedIds();
  for (const id of ids) t.ok(logged.has(id), `log line for ${id}`);
});

t.test('a metered route writes its x-request-id with its own headers: answers, streams, passed-through and refused', async (t) => {
  // The edge leaves a metered route's id to the route (one writeHead with every header, server.ts), so
  // each way such a request can end is checked here, against the id its log line carries.
  const sim = await startSim(t);
  const gw = await startGateway(t, { upstreamUrl: sim.url });
  const { key } = await gw.createKey({ account: 'rid', env: 'live' });
  const { key: broke } = await gw.createKey({ account: 'rid-broke', env: 'live' });
  await gw.grant('rid', 100_000_000);
  const msg = [{ role: 'user', content: 'hi' }];
  const cases: [string, string, unknown, number][] = [
    ['answered', key, { model: 'sim-small', messages: msg }, 200],
    ['streamed', key, { model: 'sim-small', messages: msg, stream: true }, 200],
    ['upstream 404 passed through', key, { model: 'sim-small', messages: msg, sim: { status: 404 } }, 404],
    ['upstream 500 as 502', key, { model: 'sim-small', messages: msg, sim: { status: 500 } }, 502],
    ['refused: no credit', broke, { model: 'sim-small', messages: msg }, 402],
    ['refused: invalid body', key, { model: 'sim-small' }, 422],
    ['refused: unknown model', key, { model: 'nope', messages: msg }, 404],
  ];
  const ids = new Set<string>();
  for (const [what, k, body, status] of cases) {
    const res = await postChat(gw, k, body);
    await res.arrayBuffer();
    t.equal(res.status, status, what);
    const id = res.headers.get('x-request-id');
    t.match(id, REQ_ID, `${what}: x-request-id`);
    ids.add(id!);
  }
  t.equal(ids.size, cases.length, 'ids are unique');
  const logged = () =>
    new Set(
      gw.logs
        .map((l) => JSON.parse(l))
        .filter((l) => l.route === '/v1/chat/completions')
        .map((l) => l.request_id),
    );
  await waitFor(() => [...ids].every((id) => logged().has(id)), 3000, 'every request line');
});

t.test('a client x-request-id never replaces a sane one on the response; it is logged beside ours', async (t) => {
  const gw = await startGateway(t);
  const res = await fetch(`${gw.url}/nope`, { headers: { 'x-request-id': 'client-abc-123' } });
  await res.arrayBuffer();
  const id = res.headers.get('x-request-id')!;
  t.ok(id === 'client-abc-123' || REQ_ID.test(id), `x-request-id ${id}`);
  const evil = await fetch(`${gw.url}/nope`, { headers: { 'x-request-id': 'a b <script>' + 'x'.repeat(300) } });
  await evil.arrayBuffer();
  t.match(evil.headers.get('x-request-id'), REQ_ID, 'an unsafe client value is never echoed');
  await new Promise((r) => setTimeout(r, 50));
  const line = gw.logs.map((l) => JSON.parse(l)).find((l) => l.request_id === id);
  t.ok(line, 'the request was logged');
  if (id !== 'client-abc-123') t.equal(line.client_request_id, 'client-abc-123');
  t.equal(line.status, 404);
  t.equal(line.route, 'unmatched');
});

t.test('413 request_too_large: declared content-length over the limit, and a chunked body over it', async (t) => {
  const gw = await startGateway(t);
  // 5 MiB + 1: over the admin body limit and over the default limits.max_body_bytes (4 MiB).
  const big = '{"name":"' + 'x'.repeat(5 * 1024 * 1024) + '"}';
  const declared = await post(`${gw.adminUrl}/admin/keys`, big);
  await expectError(t, declared, 413, 'request_too_large');

  const chunk = new TextEncoder().encode('x'.repeat(64 * 1024));
  let sent = 0;
  const stream = new ReadableStream<Uint8Array>({
    pull(c) {
      if (sent === 0) c.enqueue(new TextEncoder().encode('{"name":"'));
      if (sent >= 80) return c.close();
      sent++;
      c.enqueue(chunk);
    },
  });
  const chunked = await fetch(`${gw.adminUrl}/admin/keys`, {
    method: 'POST',
    headers: JSON_HEADERS,
    body: stream,
    duplex: 'half',
  } as RequestInit);
  await expectError(t, chunked, 413, 'request_too_large');

  // Same on the credit route, and the gateway still serves afterwards.
  await expectError(t, await post(`${gw.adminUrl}/admin/accounts/acme/credits`, big), 413, 'request_too_large');
  const ok = await post(`${gw.adminUrl}/admin/keys`, { account: 'acme', env: 'test', name: 'after 413' });
  t.equal(ok.status, 201);
});

t.test('415 unsupported_media_type unless the body is declared JSON (parameters allowed)', async (t) => {
  const gw = await startGateway(t);
  const body = JSON.stringify({ account: 'acme', env: 'test', name: 'k' });
  for (const ct of ['text/plain', 'application/x-www-form-urlencoded', 'application/jsonx', 'text/json']) {
    const err = await expectError(
      t,
      await post(`${gw.adminUrl}/admin/keys`, body, { ...ADMIN, 'content-type': ct }),
      415,
      'unsupported_media_type',
    );
    t.match(err.message, 'application/json');
  }
  const none = await fetch(`${gw.adminUrl}/admin/keys`, { method: 'POST', headers: ADMIN, body: new Blob([body]) });
  await expectError(t, none, 415, 'unsupported_media_type');
  await expectError(
    t,
    await post(`${gw.adminUrl}/admin/accounts/acme/credits`, '{"amount_micros":1}', { ...ADMIN, 'content-type': 'text/plain' }),
    415,
    'unsupported_media_type',
  );
  for (const ct of ['application/json; charset=utf-8', 'Application/JSON']) {
    const res = await post(`${gw.adminUrl}/admin/keys`, body, { ...ADMIN, 'content-type': ct });
    t.equal(res.status, 201, ct);
    await res.arrayBuffer();
  }
});

t.test('422 json_invalid for a body that is not JSON', async (t) => {
  const gw = await startGateway(t);
  for (const bad of ['{', '{"account": "a",}', 'nope', '']) {
    const detail = await expect422(t, await post(`${gw.adminUrl}/admin/keys`, bad));
    t.equal(detail.length, 1);
    t.equal(detail[0]!.type, 'json_invalid');
    t.equal(detail[0]!.msg, 'JSON decode error');
    t.equal(detail[0]!.loc[0], 'body');
  }
  const g = await expect422(t, await post(`${gw.adminUrl}/admin/accounts/acme/credits`, '{"amount_micros": 1'));
  t.equal(g[0]!.type, 'json_invalid');
});

t.test('422 on POST /admin/keys: missing fields, wrong types, literals, scopes, unknown fields', async (t) => {
  const gw = await startGateway(t);
  const url = `${gw.adminUrl}/admin/keys`;

  const partial = { env: 'live', name: 'n' };
  t.same(
    await expect422(t, await post(url, partial)),
    [{ loc: ['body', 'account'], msg: 'Field required', type: 'missing', input: partial, ctx: {} }],
    'missing field: input is the enclosing object',
  );

  t.same(
    (await expect422(t, await post(url, {}))).map((d) => [d.loc.join('.'), d.type, d.input]),
    [
      ['body.account', 'missing', {}],
      ['body.env', 'missing', {}],
      ['body.name', 'missing', {}],
    ],
    'every problem is reported',
  );

  t.same(await expect422(t, await post(url, { account: 5, env: 'live', name: true })), [
    { loc: ['body', 'account'], msg: 'Input should be a valid string', type: 'string_type', input: 5, ctx: {} },
    { loc: ['body', 'name'], msg: 'Input should be a valid string', type: 'string_type', input: true, ctx: {} },
  ]);

  t.same(await expect422(t, await post(url, { account: 'acme', env: 'prod', name: 'n' })), [
    {
      loc: ['body', 'env'],
      msg: "Input should be 'live' or 'test'",
      type: 'literal_error',
      input: 'prod',
      ctx: { expected: "'live' or 'test'" },
    },
  ]);

  t.same(
    await expect422(t, await post(url, { account: 'acme', env: 'live', name: 'n', scopes: ['chat', 'admin'] })),
    [
      {
        loc: ['body', 'scopes', '1'],
        msg: "Input should be 'chat', 'models', 'shares' or 'embeddings'",
        type: 'literal_error',
        input: 'admin',
        ctx: { expected: "'chat', 'models', 'shares' or 'embeddings'" },
      },
    ],
    'array indexes in loc are strings',
  );
  t.same(await expect422(t, await post(url, { account: 'acme', env: 'live', name: 'n', scopes: 'chat' })), [
    { loc: ['body', 'scopes'], msg: 'Input should be a valid list', type: 'list_type', input: 'chat', ctx: {} },
  ]);
  t.same(await expect422(t, await post(url, { account: 'acme', env: 'live', name: 'n', models: [1] })), [
    { loc: ['body', 'models', '0'], msg: 'Input should be a valid string', type: 'string_type', input: 1, ctx: {} },
  ]);

  t.same(await expect422(t, await post(url, { account: 'acme', env: 'live', name: 'n', acount: 'typo' })), [
    { loc: ['body', 'acount'], msg: 'Extra inputs are not permitted', type: 'extra_forbidden', input: 'typo', ctx: {} },
  ]);
  t.same(
    await expect422(t, await post(url, { account: 'acme', env: 'live', name: 'n', key: 'svc-live-x' })),
    [{ loc: ['body', 'key'], msg: 'Extra inputs are not permitted', type: 'extra_forbidden', input: 'svc-live-x', ctx: {} }],
    'a caller cannot choose the key',
  );
  t.same(await expect422(t, await post(url, { account: 'acme', env: 'live', name: 'n', rate_limits: { rpm: 5, tokens_per_minute: 0 } })), [
    { loc: ['body', 'rate_limits', 'rpm'], msg: 'Extra inputs are not permitted', type: 'extra_forbidden', input: 5, ctx: {} },
    {
      loc: ['body', 'rate_limits', 'tokens_per_minute'],
      msg: 'Input should be greater than 0',
      type: 'greater_than',
      input: 0,
      ctx: { gt: 0 },
    },
  ]);

  t.same(await expect422(t, await post(url, [1])), [
    {
      loc: ['body'],
      msg: 'Input should be a valid dictionary or object to extract fields from',
      type: 'model_attributes_type',
      input: [1],
      ctx: {},
    },
  ]);
  t.same(
    (await expect422(t, await post(url, { account: 'a{b}', env: 'live', name: '' }))).map((d) => [d.loc.join('.'), d.type, d.input]),
    [
      ['body.account', 'string_pattern_mismatch', 'a{b}'],
      ['body.name', 'string_too_short', ''],
    ],
    'account ids cannot carry Redis hash-tag braces',
  );
});

t.test('422 on PATCH /admin/keys/{id} and on grants', async (t) => {
  const gw = await startGateway(t);
  const { id } = await gw.createKey({ account: 'acme', env: 'live' });
  const patch = (body: unknown) =>
    fetch(`${gw.adminUrl}/admin/keys/${id}`, { method: 'PATCH', headers: JSON_HEADERS, body: JSON.stringify(body) });
  t.same(await expect422(t, await patch({ active: [] })), [
    { loc: ['body', 'active'], msg: 'Input should be a valid boolean', type: 'bool_type', input: [], ctx: {} },
  ]);
  t.same(await expect422(t, await patch({ name: '' })), [
    { loc: ['body', 'name'], msg: 'String should have at least 1 character', type: 'string_too_short', input: '', ctx: { min_length: 1 } },
  ]);
  t.same(await expect422(t, await patch({ account: 'other' })), [
    { loc: ['body', 'account'], msg: 'Extra inputs are not permitted', type: 'extra_forbidden', input: 'other', ctx: {} },
  ]);
  t.equal((await gw.admin(`/admin/keys/${id}`)).body.name, 'test key', 'a refused patch changed nothing');

  const grant = (body: unknown) => post(`${gw.adminUrl}/admin/accounts/acme/credits`, body);
  const noAmount = { note: 'n' };
  t.same(await expect422(t, await grant(noAmount)), [
    { loc: ['body', 'amount_micros'], msg: 'Field required', type: 'missing', input: noAmount, ctx: {} },
  ]);
  t.same(await expect422(t, await grant({ amount_micros: 1.5 })), [
    {
      loc: ['body', 'amount_micros'],
      msg: 'Input should be a valid integer, got a number with a fractional part',
      type: 'int_from_float',
      input: 1.5,
      ctx: {},
    },
  ]);
  t.same(await expect422(t, await grant({ amount_micros: {} })), [
    { loc: ['body', 'amount_micros'], msg: 'Input should be a valid integer', type: 'int_type', input: {}, ctx: {} },
  ]);
  t.same(await expect422(t, await grant({ amount_micros: 5, idempotency_key: '' })), [
    {
      loc: ['body', 'idempotency_key'],
      msg: 'String should have at least 1 character',
      type: 'string_too_short',
      input: '',
      ctx: { min_length: 1 },
    },
  ]);
  t.same(await expect422(t, await grant({ amount_micros: 5, amount: 5 })), [
    { loc: ['body', 'amount'], msg: 'Extra inputs are not permitted', type: 'extra_forbidden', input: 5, ctx: {} },
  ]);
  t.same(
    (await gw.admin('/admin/accounts/acme')).body,
    { id: 'acme', balance_micros: 0, held_micros: 0 },
    'refused grants credited nothing',
  );
});

t.test('422 on the ledger query: limit and after', async (t) => {
  const gw = await startGateway(t);
  const ledger = (qs: string) => fetch(`${gw.adminUrl}/admin/accounts/acme/ledger?${qs}`, { headers: ADMIN });
  t.same(await expect422(t, await ledger('limit=abc')), [
    {
      loc: ['query', 'limit'],
      msg: 'Input should be a valid integer, unable to parse string as an integer',
      type: 'int_parsing',
      input: 'abc',
      ctx: {},
    },
  ]);
  t.same(await expect422(t, await ledger('after=yesterday')), [
    {
      loc: ['query', 'after'],
      msg: "String should match pattern '^\\d{1,16}-\\d{1,16}(?:\\.\\d{1,4})?$'",
      type: 'string_pattern_mismatch',
      input: 'yesterday',
      ctx: { pattern: '^\\d{1,16}-\\d{1,16}(?:\\.\\d{1,4})?$' },
    },
  ]);
  // Pydantic reports the value as received: a query value is a string (FastAPI: "input": "0").
  t.same(await expect422(t, await ledger('limit=0')), [
    { loc: ['query', 'limit'], msg: 'Input should be greater than or equal to 1', type: 'greater_than_equal', input: '0', ctx: { ge: 1 } },
  ]);
  t.same(await expect422(t, await ledger('limit=1001')), [
    {
      loc: ['query', 'limit'],
      msg: 'Input should be less than or equal to 1000',
      type: 'less_than_equal',
      input: '1001',
      ctx: { le: 1000 },
    },
  ]);
  t.equal((await ledger('limit=1000')).status, 200, 'the bound itself is allowed');
  t.equal((await ledger('limit=1')).status, 200);
});

t.test('a malformed percent-encoded account id is a 422 on the path, never a 500', async (t) => {
  const gw = await startGateway(t);
  const pattern = '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$';
  for (const [method, path, segment, body] of [
    ['GET', '/admin/accounts/%ZZ', '%ZZ', undefined],
    ['GET', '/admin/accounts/%E0%A4%A/ledger', '%E0%A4%A', undefined],
    ['POST', '/admin/accounts/%ZZ/credits', '%ZZ', '{"amount_micros":1}'],
  ] as const) {
    const res = await fetch(gw.adminUrl + path, { method, headers: JSON_HEADERS, ...(body && { body }) });
    t.same(
      await expect422(t, res),
      [
        {
          loc: ['path', 'id'],
          msg: `String should match pattern '${pattern}'`,
          type: 'string_pattern_mismatch',
          input: segment,
          ctx: { pattern },
        },
      ],
      `${method} ${path}`,
    );
  }
  // A well-formed encoding of a valid id is decoded; one of an invalid id is refused decoded.
  t.equal((await gw.admin('/admin/accounts/team%3Aa')).body.id, 'team:a');
  t.same((await expect422(t, await fetch(`${gw.adminUrl}/admin/accounts/a%7Bb%7D`, { headers: ADMIN })))[0]!.input, 'a{b}');
});
