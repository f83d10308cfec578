// Some servers (mlx-vlm; some vLLM versions) send reasoning under both `reasoning_content` and its alias
// `reasoning`, with the same text, in one delta (or one message). When the usage is missing (omitted,
// or the stream cut before it) the completion is counted from the text that arrived, and counting both
// keys billed the reasoning twice. The simulator sends both when steered `reasoning_fields: both`
// (src/simulator/output.ts). On a real redis-server.
import t from 'tap';
import { startRedis } from '../helpers/redis.ts';
import { startGateway } from '../helpers/gateway.ts';
import { createTokenizer } from '../../src/meter/tokenizer.ts';
import { simCompletionText } from '../../src/simulator/simulator.ts';
import { sseData, startSim } from './chat-fixture.ts';
import { checkLedger, debitOf, ledgerOf, accountOf } from './credit-support.ts';

const tokenizer = createTokenizer();
await tokenizer.load();

const redis = await startRedis(t);
if (redis) {
  t.test('reasoning sent under both reasoning_content and reasoning is counted once when the usage is missing', async (t) => {
    const sim = await startSim(t);
    const gw = await startGateway(t, { redisUrl: redis.url, upstreamUrl: sim.url });
    const { key } = await gw.createKey({ account: 'alias', env: 'live' });
    await gw.grant('alias', 10_000_000);

    /** The completion tokens billed for one request; `sim` steers the simulator (30 tokens, 20 of them reasoning). */
    async function billed(stream: boolean, sim: Record<string, unknown>): Promise<number> {
      const res = await fetch(`${gw.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: JSON.stringify({
          model: 'sim-small',
          messages: [{ role: 'user', content: 'think first' }],
          stream,
          max_tokens: 100,
          sim: { tokens: 30, reasoning_tokens: 20, ...sim },
        }),
      });
      t.equal(res.status, 200);
      const body = await res.text().catch(() => '');
      if (stream && sim['reasoning_fields'] === 'both' && sim['cut_after'] === undefined) {
        const delta = JSON.parse(sseData(body)[1]!).choices[0].delta;
        t.same(delta, { reasoning_content: 'tok0 ', reasoning: 'tok0 ' }, 'the simulator sends the same text under both keys');
      }
      const e = await debitOf(gw, 'alias', res.headers.get('x-request-id')!);
      t.equal(e.usage_source, 'estimated');
      return e.completion_tokens!;
    }

    const whole = await tokenizer.countTextBounded(simCompletionText(30));
    for (const stream of [true, false]) {
      for (const fields of ['reasoning', 'reasoning_content', 'both']) {
        const n = await billed(stream, { usage: 'absent', reasoning_fields: fields });
        t.equal(n, whole, `stream ${stream}, usage omitted, ${fields}: the 30 tokens' text counted once (${whole})`);
      }
    }
    // A stream cut before its usage: the role chunk and 12 reasoning chunks arrived.
    const cut = await tokenizer.countTextBounded(simCompletionText(12));
    for (const fields of ['reasoning', 'both']) {
      const n = await billed(true, { cut_after: 13, reasoning_fields: fields });
      t.equal(n, cut, `stream cut after 12 reasoning tokens, ${fields}: counted once (${cut})`);
    }
    checkLedger(t, await ledgerOf(gw.admin, 'alias'), await accountOf(gw.admin, 'alias'));
  });
}
