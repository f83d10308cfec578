// Header hygiene both ways (SPEC §1.2): what the upstream may see of the client's request, and what the
// client may see of the upstream's response.
import t from 'tap';
import { clientResponseHeaders, upstreamRequestHeaders } from '../../src/upstream/headers.ts';

t.test('toward the upstream: client credential, cookies, hop-by-hop and its x-request-id dropped; ours added', async (t) => {
  const client = {
    host: 'gateway.example', connection: 'keep-alive, x-secret-hop', 'keep-alive': 'timeout=5', 'transfer-encoding': 'chunked', te: 'trailers',
    trailer: 'x-t', upgrade: 'h2c', expect: '100-continue', 'proxy-authorization': 'Basic abc', 'proxy-connection': 'keep-alive',
    'content-length': '999', authorization: 'Bearer svc-live-CLIENTKEY', cookie: 'sid=1', 'x-api-key': 'svc-live-CLIENTKEY',
    'x-request-id': 'client-id', 'accept-encoding': 'gzip', 'content-type': 'text/plain',
    'user-agent': 'OpenAI/JS 7.57.0', 'x-stainless-retry-count': '0', accept: 'application/json', 'x-sim-tokens': '3', 'openai-organization': 'org-1',
  };
  const out = upstreamRequestHeaders(client, 'req_ours', 'Bearer upstream-secret', 123);
  t.same(out, {
    'user-agent': 'OpenAI/JS 7.57.0', 'x-stainless-retry-count': '0', accept: 'application/json', 'x-sim-tokens': '3', 'openai-organization': 'org-1',
    'content-type': 'application/json', 'content-length': '123', 'x-request-id': 'req_ours', authorization: 'Bearer upstream-secret',
  });
  t.notMatch(JSON.stringify(out), 'CLIENTKEY');
});

t.test('toward the upstream: no upstream credential means no authorization header at all', async (t) => {
  const out = upstreamRequestHeaders({ authorization: 'Bearer svc-test-k' }, 'req_x', undefined, 2);
  t.notOk('authorization' in out);
  t.same(out, { 'content-type': 'application/json', 'content-length': '2', 'x-request-id': 'req_x' });
});

t.test('toward the upstream: repeated headers are joined, never dropped', async (t) => {
  const out = upstreamRequestHeaders({ 'x-multi': ['a', 'b'], 'x-undefined': undefined }, 'req_x', undefined, 0);
  t.equal(out['x-multi'], 'a, b');
  t.notOk('x-undefined' in out);
});

t.test('toward the client: hop-by-hop and identifying headers dropped, the rest kept', async (t) => {
  const upstream = {
    connection: 'keep-alive', 'keep-alive': 'timeout=5', 'transfer-encoding': 'chunked', te: 'x', trailer: 'x', upgrade: 'x',
    'proxy-authenticate': 'Basic', 'proxy-connection': 'x', server: 'uvicorn', 'set-cookie': ['a=1', 'b=2'], 'www-authenticate': 'Bearer',
    'x-powered-by': 'Express', via: '1.1 lb', date: 'Tue, 01 Jan 2030 00:00:00 GMT', 'x-request-id': 'upstream-id', 'content-length': '10',
    'content-encoding': 'gzip',
    'content-type': 'text/event-stream', 'cache-control': 'no-cache', 'openai-processing-ms': '12', 'x-ratelimit-remaining-tokens': '5',
  };
  t.same(clientResponseHeaders(upstream), {
    'content-type': 'text/event-stream', 'cache-control': 'no-cache', 'openai-processing-ms': '12', 'x-ratelimit-remaining-tokens': '5',
  });
});

t.test('toward the client: an empty or minimal upstream header set yields only what is safe', async (t) => {
  t.same(clientResponseHeaders({}), {});
  t.same(clientResponseHeaders({ 'content-type': 'application/json', 'x-undefined': undefined }), { 'content-type': 'application/json' });
});

t.test('headers named in Connection are hop-by-hop too (RFC 9110 §7.6.1), both ways', async (t) => {
  const up = upstreamRequestHeaders({ connection: 'close, X-Hop-Client', 'x-hop-client': 'secret', 'x-end': '1' }, 'req_x', undefined, 0);
  t.notOk('x-hop-client' in up, 'not forwarded to the upstream');
  t.equal(up['x-end'], '1');
  const down = clientResponseHeaders({ connection: 'x-hop-upstream', 'x-hop-upstream': 'internal', 'x-end': '1' });
  t.notOk('x-hop-upstream' in down, 'not relayed to the client');
  t.equal(down['x-end'], '1');
});
