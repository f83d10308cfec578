// Header allowlists both ways (SPEC §12): what the upstream may see of the client's request, and what
// the client may see of the upstream's response. Each case below passed a denylist before.
import t from 'tap';
import { createHeaderPolicy } from '../../src/upstream/headers.ts';

const client = {
  host: 'gateway.example',
  connection: 'keep-alive, x-secret-hop',
  'keep-alive': 'timeout=5',
  'transfer-encoding': 'chunked',
  te: 'trailers',
  'proxy-authorization': 'Basic abc',
  'content-length': '999',
  authorization: 'Bearer svc-live-CLIENTKEY',
  cookie: 'sid=1',
  'x-api-key': 'svc-live-CLIENTKEY',
  'x-request-id': 'client-id',
  'accept-encoding': 'gzip',
  'content-type': 'text/plain',
  'user-agent': 'OpenAI/JS 7.57.0',
  'x-stainless-retry-count': '0',
  accept: 'application/json',
  traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
  tracestate: 'v=1',
  baggage: 'k=v',
  // The attack: pick the operator's org/project, spoof the address, steer a routing proxy.
  'openai-organization': 'org-attacker',
  'openai-project': 'proj-attacker',
  'x-forwarded-for': '10.0.0.1',
  forwarded: 'for=10.0.0.1',
  'helicone-target-url': 'http://evil.example',
  'x-sim-tokens': '3',
};

t.test('toward the upstream: only the allowlist, then ours', async (t) => {
  const out = createHeaderPolicy().upstreamRequest(client, 'req_ours', 'Bearer upstream-secret', 123);
  t.same(out, {
    accept: 'application/json',
    'user-agent': 'OpenAI/JS 7.57.0',
    traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
    tracestate: 'v=1',
    baggage: 'k=v',
    'content-type': 'application/json',
    'content-length': '123',
    'x-request-id': 'req_ours',
    'accept-encoding': 'identity',
    authorization: 'Bearer upstream-secret',
  });
  t.notMatch(JSON.stringify(out), 'CLIENTKEY');
});

t.test("the upstream is asked for identity whatever the client accepts, and whatever the operator's list names", async (t) => {
  // Without the header any coding is acceptable (RFC 9110 §12.5.3); the client's own wish is for the gateway's answer, not the upstream's.
  const p = createHeaderPolicy({ forward: ['accept-encoding'], return: [] });
  t.equal(p.upstreamRequest({ 'accept-encoding': 'gzip, br' }, 'req_x', undefined, 0)['accept-encoding'], 'identity');
  t.equal(p.upstreamRequest({}, 'req_x', undefined, 0)['accept-encoding'], 'identity');
});

t.test('upstream.forward_headers adds names; credentials and framing can never be added', async (t) => {
  const p = createHeaderPolicy({
    forward: ['x-sim-tokens', 'openai-project', 'authorization', 'cookie', 'content-length', 'x-request-id'],
    return: [],
  });
  const out = p.upstreamRequest(client, 'req_x', undefined, 2);
  t.equal(out['x-sim-tokens'], '3');
  t.equal(out['openai-project'], 'proj-attacker', 'the operator asked for it');
  t.notOk('authorization' in out, 'the client key never passes');
  t.notOk('cookie' in out);
  t.equal(out['content-length'], '2');
  t.equal(out['x-request-id'], 'req_x');
});

t.test('toward the upstream: repeated headers joined; no upstream credential means no authorization', async (t) => {
  const out = createHeaderPolicy({ forward: ['x-multi'], return: [] }).upstreamRequest(
    { 'x-multi': ['a', 'b'], authorization: 'Bearer svc-test-k' },
    'req_x',
    undefined,
    0,
  );
  t.equal(out['x-multi'], 'a, b');
  t.notOk('authorization' in out);
});

const upstream = {
  connection: 'keep-alive',
  'transfer-encoding': 'chunked',
  server: 'uvicorn',
  'set-cookie': ['a=1', 'b=2'],
  'www-authenticate': 'Bearer',
  'x-powered-by': 'Express',
  via: '1.1 lb',
  date: 'Tue, 01 Jan 2030 00:00:00 GMT',
  'x-request-id': 'upstream-id',
  'content-length': '10',
  'content-encoding': 'gzip',
  'content-type': 'text/event-stream',
  'cache-control': 'no-cache',
  'openai-organization': 'org-operator',
  'openai-processing-ms': '12',
  'x-ratelimit-remaining-tokens': '5',
  'x-internal-host': 'gpu-node-7.internal',
};

t.test('toward the client: only content-type and cache-control by default', async (t) => {
  t.same(createHeaderPolicy().clientResponse(upstream), { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
  t.same(createHeaderPolicy().clientResponse({}), {});
});

t.test('upstream.return_headers adds names; cookies and framing never pass', async (t) => {
  const p = createHeaderPolicy({ forward: [], return: ['openai-processing-ms', 'set-cookie', 'content-length', 'x-request-id'] });
  t.same(p.clientResponse(upstream), { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', 'openai-processing-ms': '12' });
});
