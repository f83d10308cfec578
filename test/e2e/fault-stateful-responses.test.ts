// Issue 25 item 6 / SPEC §4 "Stateful requests": a /v1/responses request naming previous_response_id
// makes the upstream prepend history the gateway never sees (the simulator stores responses and does the
// same). Its hold's input part is the model's context_window, so
//  - 64 concurrent follow-ups on one key never take the balance negative (no debit exceeds its hold);
//  - a streamed follow-up the client abandons before response.completed is billed from
//    GET {upstream}/responses/{id} (the history included), and, when that GET fails, from the held input
//    part (the context window) plus the output counted — never from the new input alone.
import t, { type Test } from 'tap';
import { startTokenPriced, abandonResponsesStream } from './chat-fixture.ts';
import { accountOf, checkLedger, debitOf, ledgerOf, settledAccount } from './credit-support.ts';

const CONTEXT_WINDOW = 16_384;
/** The base response's input: 40,000 characters, 10,000 tokens for the simulator. */
const HISTORY_INPUT = 'x'.repeat(40_000);

function setup(t: Test) {
  return startTokenPriced(t, { maxOutputTokens: 256, contextWindow: CONTEXT_WINDOW });
}

function post(gw: { url: string }, key: string, body: Record<string, unknown>, signal?: AbortSignal): Promise<Response> {
  return fetch(`${gw.url}/v1/responses`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'm', ...body }),
    ...(signal && { signal }),
  });
}

/** A stored response of 10,000 input and 8 output tokens: the history of every follow-up. */
async function base(gw: { url: string }, key: string): Promise<string> {
  const res = await post(gw, key, { input: HISTORY_INPUT, sim: { tokens: 8 } });
  const body = (await res.json()) as { id: string; usage: { input_tokens: number } };
  if (res.status !== 200) throw new Error(`base response: ${res.status} ${JSON.stringify(body)}`);
  return body.id;
}

t.test('64 concurrent follow-ups on one key never take the balance negative', async (t) => {
  const { gw } = await setup(t);
  const { key } = await gw.createKey({ account: 'stateful', env: 'live' });
  await gw.grant('stateful', 60_000);
  const prev = await base(gw, key);
  const before = await accountOf(gw.admin, 'stateful');

  const answers = await Promise.all(
    Array.from({ length: 64 }, async () => {
      const res = await post(gw, key, { input: 'hi', previous_response_id: prev, max_output_tokens: 16, sim: { tokens: 4 } });
      await res.text();
      return res.status;
    }),
  );
  const served = answers.filter((s) => s === 200).length;
  t.ok(
    answers.every((s) => s === 200 || s === 402),
    'each follow-up is served or refused 402 insufficient_credit',
  );
  t.ok(served >= 1, `${served} follow-up(s) served`);
  const account = await settledAccount(gw, 'stateful');
  t.ok(
    account.balance_micros >= 0,
    `balance ${account.balance_micros} µ after 64 follow-ups from ${before.balance_micros} µ: never negative`,
  );
  const entries = await ledgerOf(gw.admin, 'stateful');
  const debits = entries.filter((e) => e.kind === 'debit');
  t.equal(debits.length, served + 1, 'one debit per served request (the base and the follow-ups)');
  const over = debits.filter((e) => -e.amount_micros > (e.hold_micros ?? 0));
  t.same(over, [], 'no debit exceeds its hold');
  const followUps = debits.slice(1);
  t.ok(
    followUps.every((e) => e.prompt_tokens! > 10_000 && e.usage_source === 'upstream'),
    "the follow-ups are billed the upstream's input tokens, history included",
  );
  checkLedger(t, entries, account);
});

/** A streamed follow-up abandoned after 3 deltas; returns its request id. */
async function abandoned(t: Test, gw: { url: string }, key: string, body: Record<string, unknown>): Promise<string> {
  const ac = new AbortController();
  const res = await post(gw, key, { input: 'hi', stream: true, sim: { tokens: 100, delay_ms: 20 }, ...body }, ac.signal);
  if (res.status !== 200) throw new Error(`follow-up: ${res.status} ${await res.text()}`);
  return abandonResponsesStream(t, res, ac);
}

t.test(
  'a streamed follow-up abandoned before response.completed: billed from the upstream GET, else context window + output',
  async (t) => {
    const { sim, gw } = await setup(t);
    const { key } = await gw.createKey({ account: 'cut', env: 'live' });
    await gw.grant('cut', 10_000_000);
    const prev = await base(gw, key);

    // 1. The upstream still has the response: its usage (history included) is what is billed.
    const id = await abandoned(t, gw, key, { previous_response_id: prev });
    const entry = await debitOf(gw, 'cut', id);
    const rec = await sim.waitFor((r) => r.headers['x-request-id'] === id && r.endedAt !== undefined);
    const gets = sim.requests.filter((r) => r.method === 'GET' && r.path.startsWith('/v1/responses/resp_sim_'));
    t.equal(gets.length, 1, 'the gateway asked the upstream for the response once');
    t.equal(gets[0]?.headers['authorization'], 'Bearer upstream-secret', "with the operator's credential, never the client's");
    t.match(
      entry,
      { prompt_tokens: 10_000 + 8 + 1, usage_source: 'upstream' },
      `billed from GET /responses/{id}: ${entry.prompt_tokens} input tokens (history included), ${entry.completion_tokens} output`,
    );
    // The GET may cross one more token leaving the upstream before it saw the abort.
    t.ok(
      Math.abs(entry.completion_tokens! - rec.completionTokensSent) <= 1,
      `the output the upstream produced (${rec.completionTokensSent})`,
    );
    t.equal(-entry.amount_micros, entry.prompt_tokens! + entry.completion_tokens!, 'at 1 µ a token');
    t.ok(-entry.amount_micros <= entry.hold_micros!, 'within its hold');

    // 2. The upstream did not store it (store: false, GET 404): the held input part plus the output counted.
    const id2 = await abandoned(t, gw, key, { previous_response_id: prev, store: false });
    const entry2 = await debitOf(gw, 'cut', id2);
    t.match(entry2, { prompt_tokens: CONTEXT_WINDOW, usage_source: 'estimated' }, 'the context window, not the new input alone');
    t.ok(entry2.completion_tokens! >= 6, `and the ${entry2.completion_tokens} output tokens counted`);
    t.ok(-entry2.amount_micros <= entry2.hold_micros!, 'within its hold');

    checkLedger(t, await ledgerOf(gw.admin, 'cut'), await settledAccount(gw, 'cut'));
  },
);

t.test('an upstream that compresses (stream and GET) is billed from its GET just the same', async (t) => {
  const { sim, gw } = await setup(t);
  const { key } = await gw.createKey({ account: 'gz', env: 'live' });
  await gw.grant('gz', 10_000_000);
  const prev = await base(gw, key);
  for (const encoding of ['gzip', 'br']) {
    // The answer's id is read from the decoded stream, the usage from the decoded GET.
    const id = await abandoned(t, gw, key, { previous_response_id: prev, sim: { tokens: 100, delay_ms: 20, encoding } });
    const entry = await debitOf(gw, 'gz', id);
    const rec = await sim.waitFor((r) => r.headers['x-request-id'] === id && r.endedAt !== undefined);
    const get = await sim.waitFor((r) => r.method === 'GET' && r.path === `/v1/responses/resp_sim_${rec.id}`);
    t.equal(get.headers['accept-encoding'], 'identity', `${encoding}: the GET asks for identity`);
    t.match(
      entry,
      { prompt_tokens: 10_000 + 8 + 1, usage_source: 'upstream' },
      `${encoding}: billed from the compressed GET, history included`,
    );
    t.ok(Math.abs(entry.completion_tokens! - rec.completionTokensSent) <= 1, `${encoding}: the output the upstream produced`);
  }
});

t.test('a follow-up whose client leaves before any upstream answered: billed the held input part, not 0', async (t) => {
  const { sim, gw } = await setup(t);
  const { key } = await gw.createKey({ account: 'early', env: 'live' });
  await gw.grant('early', 10_000_000);
  const prev = await base(gw, key);
  const leave = async (body: Record<string, unknown>, mine: (b: Record<string, any>) => boolean) => {
    const ac = new AbortController();
    const sent = post(gw, key, { input: 'hi', sim: { tokens: 4, headers_delay_ms: 3_000 }, ...body }, ac.signal).catch(() => null);
    // The upstream has the request (it prefills the history) and has not answered: the client leaves.
    const rec = await sim.waitFor((r) => typeof r.body === 'object' && mine(r.body) && r.endedAt === undefined);
    ac.abort();
    await sent;
    return rec.headers['x-request-id'] as string;
  };
  const follow = await debitOf(gw, 'early', await leave({ previous_response_id: prev }, (b) => b.previous_response_id === prev));
  t.equal(follow.prompt_tokens, CONTEXT_WINDOW, 'the follow-up: its held input part, the context window');
  t.equal(follow.completion_tokens, 0, 'nothing was produced that the gateway saw');
  t.equal(follow.usage_source, 'estimated');
  t.ok(-follow.amount_micros <= (follow.hold_micros ?? 0), 'within its hold');
  const plain = await debitOf(gw, 'early', await leave({ metadata: { plain: 'yes' } }, (b) => b.metadata?.plain === 'yes'));
  t.equal(plain.amount_micros, 0, 'a stateless request no upstream answered stays at 0 (docs/behaviour.md)');
});
