// meter/bill.ts for stateful requests (SPEC §4): the answer's id is read from its first bytes, and a
// stateful request without usage is billed from the upstream's stored answer, else from the held input
// part (the context window) plus the output counted — never from the new input alone. And text past the
// meter's keep cap, which nothing billed: an upper bound of its tokens, its raw bytes.
import t from 'tap';
import { answerId, bill, type StatefulBilling } from '../../src/meter/bill.ts';
import { CHAT, RESPONSES } from '../../src/meter/formats.ts';
import { maxEventBytes, relaySse, type RelayOutcome } from '../../src/meter/relay.ts';
import { createTokenizer, type Tokenizer } from '../../src/meter/tokenizer.ts';
import { UpstreamCall } from '../../src/upstream/call.ts';
import { relayOnLoopback } from './relay-fixture.ts';
import { buildStream, event } from './sse-fixture.ts';
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

/** A loaded tokenizer (gpt-tokenizer's o200k_base), for counts the bound is compared with. */
const counter = createTokenizer();
await counter.load();

t.test('text past the keep cap: each raw byte of it billed as a token, added to what was counted', async (t) => {
  const o = (usage: RelayOutcome['usage'], text: string, unseen: number): RelayOutcome => ({
    usage,
    text: () => text,
    unseenTextBytes: unseen,
    end: 'complete',
    chunkNs: 0n,
  });
  const billed = (tk: Tokenizer, out: RelayOutcome) => bill(tk, async () => 3, 3, true, out, 256);
  t.same(await billed(counter, o(null, 'hello world', 1000)), {
    promptTokens: 3,
    completionTokens: 2 + 1000,
    cachedTokens: 0,
    source: 'estimated',
  });
  t.same(
    await billed(tokenizer, o(null, 'hello world', 1000)),
    { promptTokens: 3, completionTokens: 11 + 1000, cachedTokens: 0, source: 'estimated' },
    'bytes without a tokenizer',
  );
  t.same(
    await billed(counter, o({ prompt_tokens: 5, completion_tokens: 7 }, '', 40)),
    { promptTokens: 5, completionTokens: 7 + 40, cachedTokens: 0, source: 'estimated' },
    'after the latest usage: added to it, estimated',
  );
  t.same(
    await billed(counter, o({ prompt_tokens: 5, completion_tokens: 7 }, '', 0)),
    { promptTokens: 5, completionTokens: 7, cachedTokens: 0, source: 'upstream' },
    'nothing past the cap: the usage as reported',
  );
});

t.test('a stream past a small keep cap, relayed and billed: the bill bounds the tokens of all the text produced', async (t) => {
  // Prose, escapes, CJK and emoji: 40 events, ~3.5 KB of raw text, kept up to 1 KiB.
  const pieces = Array.from({ length: 40 }, (_, i) => `Piece ${i}: "quoted"\nline, café 漢字 😀 and more words. `);
  const { sse, text } = buildStream({ pieces, usage: null });
  for (const usage of [null, { prompt_tokens: 4, completion_tokens: 1 }]) {
    // With usage: a usage event after the first piece covers it; the rest (past the cap) comes after.
    const body = usage ? sse.replace('\n\n', `\n\n${event({ choices: [], usage })}`) : sse;
    const { call, controller, url, outcome, close } = await relayOnLoopback((call, res) =>
      relaySse(call, res, true, () => false, CHAT, maxEventBytes(0), 1024),
    );
    t.teardown(close);
    const res = await fetch(url);
    for (let at = 0; at < body.length; at += 700) call.onResponseData(controller, Buffer.from(body.slice(at, at + 700)));
    call.onResponseEnd();
    t.equal(await res.text(), body.replace(usage ? event({ choices: [], usage }) : '', ''), 'relayed whole');
    const out = await outcome;
    t.ok(out.unseenTextBytes! > 0, `${out.unseenTextBytes} raw bytes past the cap`);
    const b = await bill(counter, async () => 3, 3, true, out, 256);
    const produced = counter.countText(usage ? text.slice(pieces[0]!.length) : text) + (usage ? usage.completion_tokens : 0);
    t.ok(b.completionTokens >= produced, `${b.completionTokens} billed ≥ ${produced}, the tokens of everything produced`);
    t.equal(
      b.completionTokens,
      (usage?.completion_tokens ?? 0) + counter.countText(out.text()) + out.unseenTextBytes!,
      'what was kept, counted, plus the bound',
    );
    t.equal(b.source, 'estimated');
  }
});

t.test('uncounted (no usage, text not countable): the output held for and the prompt counted, not its byte estimate', async (t) => {
  const loaded = createTokenizer();
  await loaded.load();
  const uncounted = { ...outcome(null), uncounted: true };
  t.same(await bill(loaded, async () => 7, 40, true, uncounted, 16), {
    promptTokens: 7,
    completionTokens: 16,
    cachedTokens: 0,
    source: 'estimated',
  });
  t.same(
    await bill(tokenizer, async () => 7, 40, true, uncounted, 16),
    {
      promptTokens: 40,
      completionTokens: 16,
      cachedTokens: 0,
      source: 'estimated',
    },
    'no tokenizer: the byte estimate, an upper bound',
  );
});
