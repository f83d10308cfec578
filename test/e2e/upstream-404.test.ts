// An upstream URL without its /v1 (issue 27): the upstream's router answers 404 (vLLM/FastAPI
// `{"detail":"Not Found"}`), which used to reach the client as a bare 404, shown by SDKs as an unexplained
// NotFoundError. Now: 502 upstream_error naming the route. An OpenAI-style 404 about the request (vLLM's
// unknown model) still passes through unchanged (SPEC §2a), and a live key is debited 0 for either.
import t from 'tap';
import OpenAI from 'openai';
import { startGateway } from '../helpers/gateway.ts';
import { postChat, startFixedUpstream } from './chat-fixture.ts';

const chatBody = { model: 'sim-small', messages: [{ role: 'user' as const, content: 'hi' }] };

t.test('a router 404 from the upstream → 502 upstream_error naming the route', async (t) => {
  for (const [body, type] of [
    ['{"detail":"Not Found"}', 'application/json'],
    ['404 page not found', 'text/plain'],
    ['', 'text/plain'],
  ] as const) {
    const up = await startFixedUpstream(t, 404, { 'content-type': type }, body);
    // The configured URL lacks /v1, as in the issue: Tollgate calls <url>/chat/completions.
    const gw = await startGateway(t, { upstreamUrl: up.url.replace(/\/v1$/, '') });
    const { key } = await gw.createKey({ account: 'acme', env: 'live' });
    await gw.grant('acme', 1_000_000);
    const res = await postChat(gw, key, chatBody);
    t.equal(res.status, 502, `${JSON.stringify(body)} → 502`);
    const err = ((await res.json()) as { error: { code: string; message: string } }).error;
    t.equal(err.code, 'upstream_error');
    t.match(err.message, /has no route POST \/chat\/completions \(it answered 404 Not Found\).*version path \(…\/v1\)/);
    t.notMatch(err.message, /127\.0\.0\.1/, "the upstream's address is not disclosed");
    const account = await gw.admin('/admin/accounts/acme');
    t.equal(account.body.balance_micros, 1_000_000, 'nothing debited');
    t.equal(account.body.held_micros, 0, 'the hold released');
  }
});

t.test('an OpenAI-style 404 about the request passes through unchanged', async (t) => {
  const vllm = '{"object":"error","message":"The model `sim/small-1` does not exist.","type":"NotFoundError","param":null,"code":404}';
  const up = await startFixedUpstream(t, 404, { 'content-type': 'application/json' }, vllm);
  const gw = await startGateway(t, { upstreamUrl: up.url });
  const { key } = await gw.createKey({ account: 'acme', env: 'live' });
  await gw.grant('acme', 1_000_000);
  const res = await postChat(gw, key, chatBody);
  t.equal(res.status, 404);
  t.equal(await res.text(), vllm, 'the body as the upstream sent it');
  const openaiStyle = '{"error":{"message":"no such thing","type":"invalid_request_error","code":null,"param":null}}';
  const up2 = await startFixedUpstream(t, 404, { 'content-type': 'application/json' }, openaiStyle);
  const gw2 = await startGateway(t, { upstreamUrl: up2.url });
  const k2 = await gw2.createKey({ account: 'acme', env: 'live' });
  await gw2.grant('acme', 1_000_000);
  const client = new OpenAI({ apiKey: k2.key, baseURL: `${gw2.url}/v1`, maxRetries: 0 });
  await t.rejects(client.chat.completions.create(chatBody), { status: 404, message: /no such thing/ }, 'the SDK sees the upstream error');
});

t.test('an oversized 404 body is not relayed half-read: 502', async (t) => {
  const up = await startFixedUpstream(t, 404, { 'content-type': 'text/html' }, '<p>x</p>'.repeat(4000));
  const gw = await startGateway(t, { upstreamUrl: up.url });
  const { key } = await gw.createKey({ account: 'acme', env: 'live' });
  await gw.grant('acme', 1_000_000);
  const res = await postChat(gw, key, chatBody);
  t.equal(res.status, 502);
  await res.arrayBuffer();
});
