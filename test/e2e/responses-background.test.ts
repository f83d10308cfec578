// /v1/responses with `background: true` (docs/behaviour.md, "Background responses are refused"). The
// upstream answers such a request at once (`status: "queued"`, `usage: null`) and generates afterwards,
// where no meter sees it: before, the gateway forwarded it and billed the prompt only. Now it is refused
// with 400 invalid_request (param "background") before any hold or upstream call: nothing forwarded,
// nothing held, no ledger entry. The official openai SDK surfaces it as a BadRequestError.
import t from 'tap';
import OpenAI from 'openai';
import { startGateway } from '../helpers/gateway.ts';
import { accountVsLedger, sdk, startFixedUpstream } from './chat-fixture.ts';

// What OpenAI answers a background request with: queued, no output, usage null.
const QUEUED = JSON.stringify({
  id: 'resp_bg1',
  object: 'response',
  created_at: 1,
  status: 'queued',
  background: true,
  error: null,
  model: 'm',
  output: [],
  usage: null,
  max_output_tokens: 256,
  store: true,
});

t.test('background: true is refused with 400 before any hold or upstream call', async (t) => {
  const upstream = await startFixedUpstream(t, 200, { 'content-type': 'application/json' }, QUEUED);
  const gw = await startGateway(t, { upstreamUrl: upstream.url });
  const { key } = await gw.createKey({ account: 'bg', env: 'live' });
  await gw.grant('bg', 100_000_000);
  const before = await accountVsLedger(gw, 'bg');

  const res = await fetch(`${gw.url}/v1/responses`, {
    method: 'POST',
    headers: { ...gw.auth(key), 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'sim-small', input: 'Write a 256-token essay.', background: true }),
  });
  t.equal(res.status, 400);
  t.ok(res.headers.get('x-request-id'), 'with a request id');
  const body = (await res.json()) as { error: Record<string, unknown> };
  t.match(body, { error: { code: 'invalid_request', type: 'invalid_request_error', param: 'background', message: /background/ } });

  // Through the official SDK (retries off): a BadRequestError carrying the code and param.
  const err = await sdk(gw, key)
    .responses.create({ model: 'sim-small', input: 'hi', background: true })
    .then(
      () => null,
      (e: unknown) => e,
    );
  t.ok(err instanceof OpenAI.BadRequestError, 'the SDK raises BadRequestError');
  t.match(err, { status: 400, code: 'invalid_request', param: 'background' });

  // Streaming or not, with other fields: still refused.
  const streamed = await fetch(`${gw.url}/v1/responses`, {
    method: 'POST',
    headers: { ...gw.auth(key), 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'sim-small', input: 'hi', background: true, stream: true, store: true }),
  });
  t.equal(streamed.status, 400);
  await streamed.arrayBuffer();

  await new Promise((r) => setTimeout(r, 300)); // a settle would land within this (SPEC §2a: 1 s; usually ms)
  t.equal(upstream.bodies.length, 0, 'nothing was forwarded upstream');
  const after = await accountVsLedger(gw, 'bg');
  t.equal(after.entries.length, before.entries.length, 'no ledger entry');
  t.equal(after.balance, before.balance, 'balance untouched');
  t.equal(after.held, 0, 'nothing held');
});

t.test('background false or null passes through; any other value is 422 bool_type', async (t) => {
  const upstream = await startFixedUpstream(
    t,
    200,
    { 'content-type': 'application/json' },
    JSON.stringify({ id: 'resp_1', object: 'response', status: 'completed', output: [], usage: { input_tokens: 3, output_tokens: 2 } }),
  );
  const gw = await startGateway(t, { upstreamUrl: upstream.url });
  const { key } = await gw.createKey({ account: 'fg', env: 'live' });
  await gw.grant('fg', 100_000_000);
  for (const background of [false, null]) {
    const res = await fetch(`${gw.url}/v1/responses`, {
      method: 'POST',
      headers: { ...gw.auth(key), 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'sim-small', input: 'hi', background }),
    });
    t.equal(res.status, 200, `background: ${background} is served`);
    await res.arrayBuffer();
  }
  t.equal(upstream.bodies.length, 2);
  const res = await fetch(`${gw.url}/v1/responses`, {
    method: 'POST',
    headers: { ...gw.auth(key), 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'sim-small', input: 'hi', background: 'yes' }),
  });
  t.equal(res.status, 422);
  t.match(await res.json(), { detail: [{ loc: ['body', 'background'], type: 'bool_type', input: 'yes' }] });
});
