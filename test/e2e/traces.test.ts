// SPEC §15 traces end to end: a real OTLP/HTTP receiver (node:http decoding the exporter's JSON) gets a
// traced request's spans, joined to the client's traceparent, with the GenAI and Tollgate attributes;
// the simulator (the upstream) receives a traceparent of the same trace. Off by default: the standard
// OTEL_* variables alone export nothing, and the client's traceparent passes upstream untouched.
import t from 'tap';
import { createServer, type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';
import { startGateway, testConfigDoc } from '../helpers/gateway.ts';
import { postChat, startSim } from './chat-fixture.ts';

interface Teardown {
  teardown(fn: () => unknown): void;
}

interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  kind: number;
  attributes: { key: string; value: Record<string, unknown> }[];
  status?: { code?: number };
}

/** A collector: every POST body to /v1/traces parsed as OTLP JSON, with its headers. */
async function startReceiver(t: Teardown) {
  const posts: { headers: IncomingHttpHeaders; contentType: string | undefined; body: any }[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      if (req.url === '/v1/traces') {
        posts.push({ headers: req.headers, contentType: req.headers['content-type'], body: JSON.parse(Buffer.concat(chunks).toString()) });
      }
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.teardown(() => new Promise((r) => server.close(r)));
  const spans = (): OtlpSpan[] =>
    posts.flatMap((p) => p.body.resourceSpans.flatMap((rs: any) => rs.scopeSpans.flatMap((ss: any) => ss.spans)));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, posts, spans };
}

/** An attribute's value as a JS value (OTLP JSON may carry int64 as a string). */
function attr(s: OtlpSpan, key: string): unknown {
  const v = s.attributes.find((a) => a.key === key)?.value;
  if (!v) return undefined;
  if ('intValue' in v) return Number(v.intValue);
  return v.stringValue ?? v.doubleValue ?? v.boolValue;
}

const TRACE_ID = '4bf92f3577b34da6a3ce929d0e0e4736';
const CLIENT_SPAN = '00f067aa0ba902b7';
const TRACEPARENT = `00-${TRACE_ID}-${CLIENT_SPAN}-01`;

t.test('a traced live request: request span on the client trace, hold/upstream/settle children, traceparent upstream', async (t) => {
  const sim = await startSim(t);
  const rx = await startReceiver(t);
  const gw = await startGateway(t, {
    upstreamUrl: sim.url,
    config: { otel: { endpoint: rx.url, sample_ratio: 1, headers: { 'x-collector-token': 'collector-secret' } } },
  });
  const { key, id } = await gw.createKey({ account: 'traced', env: 'live' });
  await gw.grant('traced', 10_000_000);

  const res = await postChat(
    gw,
    key,
    { model: 'sim-small', messages: [{ role: 'user', content: 'hello there' }], max_tokens: 20 },
    { traceparent: TRACEPARENT, 'x-sim-tokens': '5', 'x-sim-cached-tokens': '2' },
  );
  t.equal(res.status, 200);
  const body = (await res.json()) as { usage: { prompt_tokens: number; completion_tokens: number } };
  // Closing flushes the batch processor (and waits for the settle, whose span ends when it lands).
  await gw.close();

  t.ok(rx.posts.length >= 1, 'the receiver got an export');
  t.match(rx.posts[0]!.contentType, /application\/json/);
  t.equal(rx.posts[0]!.headers['x-collector-token'], 'collector-secret', 'otel.headers reach the collector');
  const resource = rx.posts[0]!.body.resourceSpans[0].resource.attributes;
  t.same(resource.find((a: any) => a.key === 'service.name')?.value, { stringValue: 'tollgate' });

  const spans = rx.spans();
  const root = spans.find((s) => s.kind === 2)!; // SPAN_KIND_SERVER
  t.ok(root, 'a SERVER span for the request');
  t.equal(root.traceId, TRACE_ID, 'same trace as the client');
  t.equal(root.parentSpanId, CLIENT_SPAN, "parented on the client's span");
  t.equal(root.name, 'chat sim-small');
  t.equal(attr(root, 'gen_ai.operation.name'), 'chat');
  t.equal(attr(root, 'gen_ai.request.model'), 'sim-small');
  t.equal(attr(root, 'gen_ai.response.model'), 'sim/small-1');
  t.equal(attr(root, 'gen_ai.usage.input_tokens'), body.usage.prompt_tokens);
  t.equal(attr(root, 'gen_ai.usage.output_tokens'), body.usage.completion_tokens);
  t.equal(attr(root, 'gen_ai.usage.cache_read.input_tokens'), 2, 'the cached part of the input');
  t.equal(attr(root, 'tollgate.account'), 'traced');
  t.equal(attr(root, 'tollgate.key.id'), id);
  t.equal(attr(root, 'http.response.status_code'), 200);
  // sim-small: 1.5 credits per 1M input tokens, 2.25 per 1M output → micro-credits, rounded up.
  const cost = attr(root, 'tollgate.cost_micros') as number;
  t.ok(cost > 0, `cost recorded (${cost})`);

  const children = spans.filter((s) => s.parentSpanId === root.spanId);
  const byName = (n: string) => children.find((s) => s.name === n);
  t.ok(byName('tollgate.credit.hold'), 'hold span');
  t.ok((attr(byName('tollgate.credit.hold')!, 'tollgate.hold_micros')! as number) >= cost, 'the hold covers the cost');
  const settle = byName('tollgate.credit.settle');
  t.ok(settle, 'settle span');
  t.equal(attr(settle!, 'tollgate.cost_micros'), cost);
  const upstream = byName('chat sim/small-1')!;
  t.ok(upstream, 'upstream span');
  t.equal(upstream.kind, 3, 'CLIENT');
  t.equal(attr(upstream, 'http.response.status_code'), 200);
  for (const s of children) t.equal(s.traceId, TRACE_ID);

  // The upstream saw our upstream span as its parent: vLLM's spans join the same trace.
  const seen = sim.requests.at(-1)!;
  t.equal(seen.headers.traceparent, `00-${TRACE_ID}-${upstream.spanId}-01`);

  // No key material anywhere in what left the process.
  const exported = JSON.stringify(rx.posts.map((p) => p.body));
  t.notOk(exported.includes(key), 'the full key is not exported');
  t.notOk(exported.includes(key.slice(-12)), 'no part of its secret either');
});

t.test('a refused request (402 before the upstream): the hold span and the request span carry the error', async (t) => {
  const sim = await startSim(t);
  const rx = await startReceiver(t);
  const gw = await startGateway(t, { upstreamUrl: sim.url, config: { otel: { endpoint: `${rx.url}/v1/traces` } } });
  const { key } = await gw.createKey({ account: 'broke', env: 'live' });
  const res = await postChat(gw, key, { model: 'sim-small', messages: [{ role: 'user', content: 'hi' }] }, { traceparent: TRACEPARENT });
  t.equal(res.status, 402);
  await gw.close();
  const spans = rx.spans();
  const root = spans.find((s) => s.kind === 2)!;
  t.equal(root.traceId, TRACE_ID);
  t.equal(attr(root, 'http.response.status_code'), 402);
  t.equal(attr(root, 'error.type'), 'insufficient_credit');
  const hold = spans.find((s) => s.name === 'tollgate.credit.hold')!;
  t.equal(hold.parentSpanId, root.spanId);
  t.equal(hold.status?.code, 2, 'STATUS_CODE_ERROR');
  t.notOk(
    spans.some((s) => s.kind === 3),
    'no upstream span: the upstream was never called',
  );
  t.equal(sim.requests.length, 0);
});

t.test('off by default: OTEL_* variables alone export nothing; the client traceparent passes upstream unchanged', async (t) => {
  const sim = await startSim(t);
  const rx = await startReceiver(t);
  // What an operator's environment might carry for other services: it must not turn Tollgate's tracing on.
  const saved = { ...process.env };
  Object.assign(process.env, { OTEL_EXPORTER_OTLP_ENDPOINT: rx.url, OTEL_TRACES_EXPORTER: 'otlp', OTEL_SERVICE_NAME: 'x' });
  t.teardown(() => {
    for (const k of ['OTEL_EXPORTER_OTLP_ENDPOINT', 'OTEL_TRACES_EXPORTER', 'OTEL_SERVICE_NAME']) {
      if (saved[k] === undefined) delete process.env[k];
      else process.env[k] = saved[k];
    }
  });
  const gw = await startGateway(t, { upstreamUrl: sim.url, env: { ...process.env } });
  t.equal(gw.gateway.routes.public.length > 0, true);
  const { key } = await gw.createKey({ account: 'untraced', env: 'test' });
  const res = await postChat(gw, key, { model: 'sim-small', messages: [{ role: 'user', content: 'hi' }] }, { traceparent: TRACEPARENT });
  t.equal(res.status, 200);
  await res.text();
  await gw.close();
  // The batch processor would export on shutdown at the latest; give a stray exporter a moment anyway.
  await new Promise((r) => setTimeout(r, 200));
  t.equal(rx.posts.length, 0, 'nothing reached the receiver');
  t.equal(sim.requests.at(-1)!.headers.traceparent, TRACEPARENT, 'forwarded as the client sent it');
});

t.test('sample_ratio 0: no spans, and the client traceparent passes upstream unchanged', async (t) => {
  const sim = await startSim(t);
  const rx = await startReceiver(t);
  const gw = await startGateway(t, { upstreamUrl: sim.url, config: { otel: { endpoint: rx.url, sample_ratio: 0 } } });
  const { key } = await gw.createKey({ account: 'unsampled', env: 'test' });
  const res = await postChat(gw, key, { model: 'sim-small', messages: [{ role: 'user', content: 'hi' }] }, { traceparent: TRACEPARENT });
  t.equal(res.status, 200);
  await res.text();
  await gw.close();
  t.equal(rx.spans().length, 0);
  t.equal(sim.requests.at(-1)!.headers.traceparent, TRACEPARENT);
});

t.test('a streamed test-key request and an embeddings request: operation names, no credit spans, cost 0', async (t) => {
  const sim = await startSim(t);
  const rx = await startReceiver(t);
  const gw = await startGateway(t, {
    upstreamUrl: sim.url,
    config: {
      otel: { endpoint: rx.url },
      // The list replaces the default one: keep sim-small beside the embeddings model.
      models: [
        ...(testConfigDoc(sim.url).models as unknown[]),
        {
          name: 'sim-embed',
          upstream_model: 'sim/embed-1',
          endpoints: ['embeddings'],
          price: { input: 1, output: 0 },
          upstreams: [{ url: sim.url }],
        },
      ],
    },
  });
  const { key } = await gw.createKey({ account: 'tester', env: 'test' });
  const res = await postChat(
    gw,
    key,
    { model: 'sim-small', stream: true, messages: [{ role: 'user', content: 'stream please' }] },
    { traceparent: TRACEPARENT, 'x-sim-tokens': '6' },
  );
  t.equal(res.status, 200);
  await res.text();
  const emb = await fetch(`${gw.url}/v1/embeddings`, {
    method: 'POST',
    headers: { ...gw.auth(key), 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'sim-embed', input: 'embed me' }),
  });
  t.equal(emb.status, 200);
  await emb.text();
  await gw.close();

  const roots = rx.spans().filter((s) => s.kind === 2);
  const chat = roots.find((s) => s.name === 'chat sim-small')!;
  t.ok(chat, 'the streamed chat span');
  t.equal(attr(chat, 'gen_ai.usage.output_tokens'), 6);
  t.equal(attr(chat, 'tollgate.cost_micros'), 0, 'a test key costs nothing');
  t.equal(attr(chat, 'tollgate.key.env'), 'test');
  const kids = rx.spans().filter((s) => s.parentSpanId === chat.spanId);
  t.same(
    kids.map((s) => s.name),
    ['chat sim/small-1'],
    'only the upstream span: a test key has no hold or settle',
  );
  t.equal(attr(kids[0]!, 'tollgate.relay_end'), 'complete');
  const embed = roots.find((s) => s.name === 'embeddings sim-embed')!;
  t.ok(embed, 'the embeddings span');
  t.equal(attr(embed, 'gen_ai.operation.name'), 'embeddings');
  t.equal(attr(embed, 'gen_ai.response.model'), 'sim/embed-1');
  t.equal(embed.parentSpanId, undefined, 'no client traceparent: a root span');
});
