// meter/bill.ts for stateful requests (SPEC §4): the answer's id is read from its first bytes, and a
// stateful request without usage is billed from the upstream's stored answer, else from the held input
// part (the context window) plus the output counted — never from the new input alone.
import t from 'tap';
import { answerId, bill, type StatefulBilling } from '../../src/meter/bill.ts';
import { RESPONSES } from '../../src/meter/formats.ts';
import type { RelayOutcome } from '../../src/meter/relay.ts';
import type { Tokenizer } from '../../src/meter/tokenizer.ts';
import { UpstreamCall } from '../../src/upstream/call.ts';
import { createUpstreams } from '../../src/upstream/pool.ts';
import { compileConfig } from '../../src/config/schema.ts';
import { startSimulator } from '../../src/simulator/simulator.ts';

t.test('answerId: the first "id" of a stream or a body', async (t) => {
  t.equal(
    answerId('event: response.created\ndata: {"type":"response.created","sequence_number":0,"response":{"id":"resp_1","object":"response"'),
    'resp_1',
  );
  t.equal(answerId('{"id" : "resp_2","object":"response"}'), 'resp_2');
  t.equal(answerId('data: {"type":"x","item_id":"msg_1"}'), undefined, '"item_id" is not an id');
  t.equal(answerId(''), undefined);
});

const tokenizer = { loaded: false, load: () => Promise.reject(new Error('no tokenizer here')) } as unknown as Tokenizer;
const outcome = (usage: RelayOutcome['usage'], text = 'abcdef'): RelayOutcome => ({
  usage,
  text: () => (usage ? '' : text),
  end: 'client_gone',
  chunkNs: 0n,
});

t.test('stateful without usage: the stored answer, else the context window + the output counted', async (t) => {
  const sim = await startSimulator();
  t.teardown(() => sim.close());
  const config = compileConfig({ models: [{ name: 'm', price: { input: 1, output: 1 }, upstreams: [{ url: sim.url }] }] }, {});
  const ups = createUpstreams(config.models, { connectTimeoutMs: 1000, ejectAfterFailures: 5, ejectSeconds: 1, maxConnections: 0 });
  t.teardown(() => ups.close());
  const up = ups.of(config.models[0]!)[0]!;
  const res = await fetch(`${sim.url}/responses`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'm', input: 'x'.repeat(400), sim: { tokens: 5 } }),
  });
  const stored = (await res.json()) as { id: string };
  const request = { heldPrompt: 1000, retrievePath: (id: string) => `/responses/${id}` };
  const callWithHead = (head: string) => {
    const c = new UpstreamCall(up);
    c.keepHead();
    c.onResponseData({} as never, Buffer.from(head));
    return c;
  };
  const billed = (call: UpstreamCall | undefined, usage: RelayOutcome['usage'] = null) =>
    bill(tokenizer, async () => 3, 3, true, outcome(usage), 256, {
      request,
      call,
      format: RESPONSES,
      timeoutMs: 1000,
    } satisfies StatefulBilling);

  t.same(
    await billed(callWithHead(`{"id":"${stored.id}"`)),
    { promptTokens: 100, completionTokens: 5, cachedTokens: 0, source: 'upstream' },
    'the stored usage',
  );
  t.same(
    await billed(callWithHead('{"id":"resp_unknown"')),
    { promptTokens: 1000, completionTokens: 6, cachedTokens: 0, source: 'estimated' },
    'GET 404: the held input part plus the output counted (bytes without a tokenizer)',
  );
  t.same(
    await billed(callWithHead('{"object":"response"')),
    { promptTokens: 1000, completionTokens: 6, cachedTokens: 0, source: 'estimated' },
    'no id',
  );
  t.same(
    await billed(callWithHead(`{"id":"${stored.id}"`), { prompt_tokens: 7, completion_tokens: 2 }),
    { promptTokens: 7, completionTokens: 2, cachedTokens: 0, source: 'upstream' },
    'usage reported: billed as reported, nothing asked',
  );
  t.equal(sim.requests.filter((r) => r.method === 'GET').length, 2, 'one GET per answer that had an id and no usage');
});
