// /v1/responses streams whose events are larger than the event bound (relay.ts maxEventBytes: 1 MiB plus
// twice the request): a long answer repeated whole in the `.done` events and `response.completed`, and a
// hosted image_generation call's partial image and result. The upstream was fine: the stream must reach
// the client byte for byte, be billed the upstream's usage, and not count as a broken stream.
import t, { type Test } from 'tap';
import { simResponsesPromptTokens } from '../../src/simulator/responses.ts';
import { maxEventBytes } from '../../src/meter/relay.ts';
import { startGateway, type TestGateway } from '../helpers/gateway.ts';
import { SIM_SMALL, accountVsLedger, expectedCost, metricsText, sample, startSim, waitForDebit } from './chat-fixture.ts';

function post(url: string, headers: Record<string, string>, body: unknown): Promise<Response> {
  return fetch(url, { method: 'POST', headers: { ...headers, 'content-type': 'application/json' }, body: JSON.stringify(body) });
}

/** A simulator's stream with its per-request parts (ids, timestamps) made equal. */
const normal = (s: string) => s.replaceAll(/resp_sim_\d+/g, 'resp_sim_N').replaceAll(/"created_at":\d+/g, '"created_at":0');

/** The SSE events of a body: `[event type, data length]`. */
function events(body: string): { type: string; data: string }[] {
  return body
    .split('\n\n')
    .filter((e) => e !== '')
    .map((e) => ({ type: /^event: (.*)$/m.exec(e)?.[1] ?? '', data: /^data: (.*)$/m.exec(e)?.[1] ?? '' }));
}

async function checkBooks(t: Test, gw: TestGateway, account: string): Promise<void> {
  let s = await accountVsLedger(gw, account);
  for (let i = 0; i < 50 && s.held !== 0; i++) {
    await new Promise((r) => setTimeout(r, 20));
    s = await accountVsLedger(gw, account);
  }
  t.equal(s.balance, s.sum, 'balance equals the ledger sum');
  t.equal(s.held, 0, 'nothing left held');
}

const cases: [string, Record<string, number>, string][] = [
  // 200 tokens of 8,000 bytes: 1.6 MB of text in output_text.done, content_part.done, output_item.done and completed.
  [
    'a long answer, repeated whole in the .done events and response.completed',
    { tokens: 200, token_bytes: 8000 },
    'response.output_text.done',
  ],
  // A 3 MB image: the partial image, the image item's output_item.done, and response.completed's output.
  [
    'a hosted image_generation call (partial image and result of 3 MB)',
    { tokens: 5, image_bytes: 3_000_000 },
    'response.image_generation_call.partial_image',
  ],
];

for (const [name, sim, bigType] of cases) {
  t.test(`${name}: relayed byte for byte, billed the upstream's usage, not a broken stream`, async (t) => {
    const simulator = await startSim(t);
    const gw = await startGateway(t, { upstreamUrl: simulator.url });
    const account = `large-${sim['image_bytes'] ? 'image' : 'text'}`;
    const { key } = await gw.createKey({ account, env: 'live' });
    await gw.grant(account, 1_000_000);
    const body = { model: 'sim-small', input: 'Draw a lighthouse and describe it at length.', max_output_tokens: 256, stream: true, sim };

    const direct = await (await post(`${simulator.url}/responses`, {}, { ...body, model: 'sim/small-1' })).text();
    const res = await post(`${gw.url}/v1/responses`, gw.auth(key), body);
    t.equal(res.status, 200);
    const text = await res.text();

    const evs = events(text);
    const big = evs.find((e) => e.type === bigType);
    t.ok(big && big.data.length > maxEventBytes(JSON.stringify(body).length), `${bigType} is larger than the event bound`);
    t.equal(evs.at(-1)?.type, 'response.completed', 'the stream ends with response.completed, not the error event');
    t.notOk(
      evs.some((e) => e.type === 'error'),
      'no error event',
    );
    t.ok(normal(text) === normal(direct), 'the client got the upstream stream byte for byte');

    const e = await waitForDebit(gw, account, res.headers.get('x-request-id')!);
    const prompt = simResponsesPromptTokens(body);
    t.match(e, {
      usage_source: 'upstream',
      prompt_tokens: prompt,
      completion_tokens: sim['tokens'],
      amount_micros: -expectedCost(SIM_SMALL, prompt, sim['tokens']!),
    });
    t.equal(sample(await metricsText(gw), 'tollgate_upstream_errors_total', { reason: 'stream_broken' }), 0, 'not counted toward ejection');
    await checkBooks(t, gw, account);
  });
}
