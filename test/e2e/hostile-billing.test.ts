// SPEC §12 "Output is capped by what was held" and "Usage is always read": the attacks of the hostile
// clients issue, each reproduced against a real gateway and the simulator, on both stores.
//   - n × max_tokens spent far past the balance (n multiplied nothing; max_tokens never reached upstream)
//   - max_tokens near 2^53 on a key with a token limit: 500, and the next request 500 too
//   - a non-streaming answer too large to keep was billed as prompt only
import t from 'tap';
import { startRedis } from '../helpers/redis.ts';
import { startGateway, type TestGateway } from '../helpers/gateway.ts';
import { SIM_SMALL, accountVsLedger, expectedCost, metricsText, postChat, sample, startSim, waitForDebit } from './chat-fixture.ts';
import { costMicros, parsePrice } from '../../src/credit/pricing.ts';
import { estimatePromptTokens } from '../../src/credit/hold-estimate.ts';
import type { Simulator } from '../../src/simulator/simulator.ts';

const CAP = 256; // sim-small's max_output_tokens in the test config
const PRICE = parsePrice(1.5, 2.25, 'test');
const messages = [{ role: 'user', content: 'hello there' }];

/** The hold a body of the priced model must take: prompt bound + n × clamped max output. */
function expectedHold(body: Record<string, unknown>, output: number): number {
  return costMicros(PRICE, estimatePromptTokens(body as { messages: unknown }, Buffer.byteLength(JSON.stringify(body))), output);
}

async function run(t: import('tap').Test, gw: TestGateway, sim: Simulator, tag: string): Promise<void> {
  t.test('n above limits.max_n is refused before any hold; n multiplies the output part of the hold', async (t) => {
    const { key } = await gw.createKey({ account: `${tag}-n`, env: 'live' });
    await gw.grant(`${tag}-n`, 1_500);
    const before = sim.requests.length;
    const r = await postChat(gw, key, { model: 'sim-small', messages, n: 100, max_tokens: 100 });
    t.equal(r.status, 422);
    t.match(((await r.json()) as any).detail, [{ loc: ['body', 'n'], type: 'less_than_equal', ctx: { le: 8 } }]);
    t.equal(sim.requests.length, before, 'the upstream was not called');

    // 8 × 100 tokens at 2.25 µ each is 1,800 µ of output alone, more than the 1,500 granted.
    const body = { model: 'sim-small', messages, n: 8, max_tokens: 100 };
    t.ok(expectedHold(body, 800) > 1_500, 'the n-multiplied hold exceeds the balance');
    const refused = await postChat(gw, key, body);
    t.equal(refused.status, 402, 'the hold covers all n choices: not enough credit');
    await refused.text();
    t.equal(sim.requests.length, before, 'still no upstream call');

    const { key: rich } = await gw.createKey({ account: `${tag}-n2`, env: 'live' });
    await gw.grant(`${tag}-n2`, 1_000_000);
    const ok = await postChat(gw, rich, { ...body, sim: { tokens: 50 } });
    t.equal(ok.status, 200);
    await ok.text();
    const e = await waitForDebit(gw, `${tag}-n2`, ok.headers.get('x-request-id')!);
    t.equal(e.hold_micros, expectedHold({ ...body, sim: { tokens: 50 } }, 800), 'hold = cost(prompt bound, n × max_tokens)');
    t.equal(sim.requests.at(-1)!.body.n, 8, 'n reaches the upstream unchanged');
  });

  t.test('max_tokens is always sent upstream, clamped to the model cap; max_completion_tokens likewise', async (t) => {
    const { key } = await gw.createKey({ account: `${tag}-cap`, env: 'live' });
    await gw.grant(`${tag}-cap`, 10_000_000);
    const cases: [Record<string, unknown>, Record<string, unknown>][] = [
      [{}, { max_tokens: CAP }],
      [{ max_tokens: 10 }, { max_tokens: 10 }],
      [{ max_tokens: 100_000 }, { max_tokens: CAP }],
      [{ max_tokens: 2 ** 53 - 1 }, { max_tokens: CAP }],
      [{ max_completion_tokens: 5000 }, { max_tokens: CAP, max_completion_tokens: CAP }],
      [
        { max_completion_tokens: 7, max_tokens: 100 },
        { max_tokens: 7, max_completion_tokens: 7 },
      ],
    ];
    for (const [extra, sent] of cases) {
      const r = await postChat(gw, key, { model: 'sim-small', messages, ...extra });
      t.equal(r.status, 200, JSON.stringify(extra));
      await r.text();
      const got = sim.requests.at(-1)!.body;
      t.same(
        {
          max_tokens: got.max_tokens,
          ...(got.max_completion_tokens !== undefined && { max_completion_tokens: got.max_completion_tokens }),
        },
        sent,
        `${JSON.stringify(extra)} → ${JSON.stringify(sent)}`,
      );
    }
  });

  t.test('an upstream that ignores max_tokens is debited in full and counted as an overrun', async (t) => {
    const { key } = await gw.createKey({ account: `${tag}-over`, env: 'live' });
    await gw.grant(`${tag}-over`, 10_000_000);
    const m0 = sample(await metricsText(gw), 'tollgate_upstream_overruns_total', { model: 'sim-small' });
    const r = await postChat(gw, key, { model: 'sim-small', messages, max_tokens: 20, sim: { tokens: 300, ignore_max_tokens: true } });
    t.equal(r.status, 200);
    const usage = ((await r.json()) as any).usage;
    t.equal(usage.completion_tokens, 300);
    const e = await waitForDebit(gw, `${tag}-over`, r.headers.get('x-request-id')!);
    t.equal(e.completion_tokens, 300);
    t.equal(e.amount_micros, -expectedCost(SIM_SMALL, usage.prompt_tokens, 300), 'the whole overrun is debited');
    t.ok(-e.amount_micros > e.hold_micros!, 'more than was held: the one overspend SPEC §4 allows');
    t.equal(sample(await metricsText(gw), 'tollgate_upstream_overruns_total', { model: 'sim-small' }), m0 + 1);
    const line = gw.logs.map((l) => JSON.parse(l)).find((l) => l.request_id === r.headers.get('x-request-id'));
    t.equal(line?.overrun_tokens, 280, 'the request line says by how much');
    const a = await accountVsLedger(gw, `${tag}-over`);
    t.equal(a.balance, a.sum, 'balance = Σ ledger');
  });

  t.test('max_tokens near 2^53 on a key with a token limit: clamped, no 500, the window unharmed', async (t) => {
    const { key } = await gw.createKey({ account: `${tag}-big`, env: 'test', rate_limits: { tokens_per_minute: 100_000 } });
    for (let i = 0; i < 3; i++) {
      const r = await postChat(gw, key, { model: 'sim-small', messages, max_tokens: 2 ** 53 - 1 });
      t.equal(r.status, 200, `request ${i + 1}`);
      await r.text();
      t.ok(Number(r.headers.get('x-ratelimit-remaining-tokens')) > 99_000 - (i + 1) * 1000, 'the window counts the clamped estimate');
    }
  });

  t.test('a non-streaming answer too large to keep is still billed from its usage', async (t) => {
    const { key } = await gw.createKey({ account: `${tag}-huge`, env: 'live' });
    await gw.grant(`${tag}-huge`, 100_000_000);
    // 200,000 tokens of "tokN " ≈ 1.4 MB, past the 1 MiB kept whole; usage is the body's last key.
    const r = await postChat(gw, key, { model: 'sim-small', messages, sim: { tokens: 200_000, ignore_max_tokens: true } });
    t.equal(r.status, 200);
    const text = await r.text();
    t.ok(text.length > 1024 * 1024, `${text.length} bytes relayed`);
    const usage = JSON.parse(text).usage;
    const e = await waitForDebit(gw, `${tag}-huge`, r.headers.get('x-request-id')!);
    t.equal(e.usage_source, 'upstream');
    t.equal(e.completion_tokens, 200_000);
    t.equal(e.prompt_tokens, usage.prompt_tokens);

    // Without usage, it is billed as the output it was held for, never 0.
    const r2 = await postChat(gw, key, {
      model: 'sim-small',
      messages,
      sim: { tokens: 200_000, ignore_max_tokens: true, usage: 'absent' },
    });
    t.equal(r2.status, 200);
    await r2.text();
    const e2 = await waitForDebit(gw, `${tag}-huge`, r2.headers.get('x-request-id')!);
    t.equal(e2.usage_source, 'estimated');
    t.equal(e2.completion_tokens, CAP, 'the clamped max_tokens it was held for');
  });
}

t.test('embedded store', async (t) => {
  const sim = await startSim(t);
  const gw = await startGateway(t, { upstreamUrl: sim.url });
  await run(t, gw, sim, 'mem');
});

const redis = await startRedis(t);
if (redis) {
  t.test('redis store', async (t) => {
    const sim = await startSim(t);
    const gw = await startGateway(t, { redisUrl: redis.url, upstreamUrl: sim.url });
    await run(t, gw, sim, 'redis');
  });
}
