// Zero overspend (issue 3, SPEC §4): 200 concurrent streaming requests on an account funded for about
// 50 holds, on a real redis-server. Every answer is a complete stream or a clean 402; the account never
// goes below zero (polled straight from Redis while the crowd runs); the ledger has exactly one debit per
// served request and none for refused ones; every hold is released afterwards.
import t from 'tap';
import OpenAI from 'openai';
import { startRedis } from '../helpers/redis.ts';
import { startGateway } from '../helpers/gateway.ts';
import { startSimulator } from '../../src/simulator/simulator.ts';
import * as K from '../../src/store/redis-keys.ts';
import { accountOf, chat, checkLedger, ledgerOf, streamBody } from './credit-support.ts';
import { sseData } from './chat-fixture.ts';
import { waitFor } from '../helpers/wait.ts';

const CROWD = 200;
const FUNDED_FOR = 50;
// 40 tokens × 3 ms: each stream lasts ≥ 120 ms, so the 200 requests overlap and holds pile up.
// max_tokens = tokens makes the hold's output part exact; the prompt part is the byte-based bound (~25×
// the simulator's count for this short prompt), so a request costs ~45 % of its hold and 200 of them
// (≈ 200 × 95 micros) would cost far more than the grant (50 × ~210) if holds did not gate them.
const SIM = { tokens: 40, delay_ms: 3 };
const BODY = streamBody(SIM, 'hello there', { max_tokens: 40 });

const redis = await startRedis(t);
if (redis) {
  t.test('200 concurrent streams on credit for ~50: no overspend, clean 402s, consistent ledger', async (t) => {
    const sim = await startSimulator();
    t.teardown(() => sim.close());
    // The harness's 2 s store command timeout matters here: on a loaded 2-core box a burst of 200 holds
    // can exceed 300 ms, and a hold that times out answers 503 yet still lands in Redis, leaving an
    // orphaned hold (reported as BUG 2 in the test notes). That is not what this test is about.
    const gw = await startGateway(t, { redisUrl: redis.url, upstreamUrl: sim.url });

    // The hold of one request, read from its own ledger entry on a separate account.
    const probe = await gw.createKey({ account: 'probe', env: 'live' });
    await gw.grant('probe', 10_000_000);
    const first = await chat(gw.url, probe.key, BODY);
    t.equal(first.status, 200);
    await first.text();
    const probeEntry = await waitFor(
      async () => (await ledgerOf(gw.admin, 'probe')).find((e) => e.kind === 'debit'),
      1000,
      'the probe debit',
    );
    const hold = probeEntry.hold_micros!;
    const cost = -probeEntry.amount_micros;
    t.ok(hold > 0 && cost > 0 && cost <= hold, `one request holds ${hold} and costs ${cost} micro-credits`);
    t.ok(CROWD * cost > FUNDED_FOR * hold, 'without holds the crowd would spend more than the grant');

    const grant = FUNDED_FOR * hold;
    const { key } = await gw.createKey({ account: 'crowd', env: 'live' });
    await gw.grant('crowd', grant);
    const simBefore = sim.requests.length;

    // Straight from Redis (no gateway in the way): one HMGET is atomic, so balance and held are coherent.
    const samples: { balance: number; held: number }[] = [];
    let polling = true;
    const poller = (async () => {
      while (polling) {
        const [b, h] = await redis.client.hmget(K.balance('crowd'), 'balance', 'held');
        samples.push({ balance: Number(b ?? 0), held: Number(h ?? 0) });
        await new Promise((r) => setTimeout(r, 5));
      }
    })();

    const results = await Promise.all(
      Array.from({ length: CROWD }, async () => {
        const res = await chat(gw.url, key, BODY);
        return {
          status: res.status,
          id: res.headers.get('x-request-id')!,
          type: res.headers.get('content-type') ?? '',
          text: await res.text(),
          retry: res.headers.get('x-should-retry'),
        };
      }),
    );

    const served = results.filter((r) => r.status === 200);
    const refused = results.filter((r) => r.status === 402);
    const statuses = JSON.stringify(
      Object.fromEntries([...new Set(results.map((r) => r.status))].map((s) => [s, results.filter((r) => r.status === s).length])),
    );
    t.equal(served.length + refused.length, CROWD, `every answer is a 200 or a 402: ${statuses}`);
    t.ok(refused.length > 0, `the grant ran out: ${served.length} served, ${refused.length} refused`);
    // A refusal needs ≥ 49 other holds or settled debits (each debit ≤ its hold), so ≥ 50 get through.
    t.ok(served.length >= FUNDED_FOR, `at least ${FUNDED_FOR} served (${served.length})`);

    const complete = served.filter((r) => {
      const data = sseData(r.text);
      const tokens = data.filter((d) => d.includes('"content":"tok')).length;
      return data.at(-1) === '[DONE]' && tokens === SIM.tokens && !r.text.includes('"error"');
    });
    t.equal(complete.length, served.length, 'every 200 is a whole stream ending in [DONE]');

    const clean = refused.filter((r) => {
      const body = JSON.parse(r.text) as { error?: { code?: string; type?: string; message?: string } };
      return (
        r.type.startsWith('application/json') &&
        body.error?.code === 'insufficient_credit' &&
        typeof body.error.message === 'string' &&
        /^req_/.test(r.id)
      );
    });
    t.equal(clean.length, refused.length, 'every 402 is a JSON insufficient_credit error with a request id');
    t.ok(
      refused.every((r) => r.retry === 'false'),
      'every 402 tells SDKs not to retry',
    );
    t.equal(sim.requests.length - simBefore, served.length, 'refused requests never reached the upstream');

    const settled = new Set(served.map((r) => r.id));
    const entries = await waitFor(
      async () => {
        const all = await ledgerOf(gw.admin, 'crowd');
        return all.filter((e) => e.kind === 'debit').length >= settled.size && all;
      },
      2000,
      'one debit per served request',
    );
    polling = false;
    await poller;

    t.ok(samples.length > 10, `balance sampled ${samples.length} times during the run`);
    t.same(
      samples.filter((s) => s.balance < 0 || s.held > s.balance),
      [],
      'balance never below 0 and never below the holds',
    );
    const peak = Math.max(...samples.map((s) => s.held));
    t.ok(peak >= 10 * hold, `the requests overlapped: up to ${peak / hold} holds open at once`);
    const acct = await accountOf(gw.admin, 'crowd');
    t.equal(acct.held_micros, 0, 'every hold released');
    const debited = -entries.filter((e) => e.kind === 'debit').reduce((s, e) => s + e.amount_micros, 0);
    t.ok(debited <= grant, `debited ${debited} ≤ granted ${grant}`);
    t.equal(debited, served.length * cost, 'each served request costs exactly what the probe cost');
    t.ok(acct.balance_micros >= 0, 'final balance ≥ 0');
    checkLedger(t, entries, acct, settled);
    t.ok(
      entries.filter((e) => e.kind === 'debit').every((e) => e.hold_micros === hold && e.usage_source === 'upstream'),
      'each debit released its full hold and used upstream usage',
    );
    checkLedger(t, await ledgerOf(gw.admin, 'probe'), await accountOf(gw.admin, 'probe'), new Set([first.headers.get('x-request-id')!]));
  });

  t.test('the OpenAI SDK sees a 402 as insufficient_credit and does not retry it', async (t) => {
    const sim = await startSimulator();
    t.teardown(() => sim.close());
    const gw = await startGateway(t, { redisUrl: redis.url, upstreamUrl: sim.url });
    const { key } = await gw.createKey({ account: 'broke', env: 'live' });
    await gw.grant('broke', 10);
    const client = new OpenAI({ apiKey: key, baseURL: `${gw.url}/v1`, maxRetries: 2 });
    const err = await client.chat.completions
      .create({ model: 'sim-small', messages: [{ role: 'user', content: 'hi' }], stream: true })
      .then(
        () => undefined,
        (e: unknown) => e,
      );
    t.ok(err instanceof OpenAI.APIError, 'an APIError');
    const e = err as InstanceType<typeof OpenAI.APIError>;
    t.equal(e.status, 402);
    t.equal(e.code, 'insufficient_credit');
    t.match(e.requestID, /^req_/, 'with the request id');
    const attempts = gw.logs.filter((l) => l.includes('"route":"/v1/chat/completions"')).length;
    t.equal(attempts, 1, 'one attempt: x-should-retry: false stops the SDK retrying');
    t.equal(sim.requests.length, 0, 'the upstream was never called');
    t.same(
      (await ledgerOf(gw.admin, 'broke')).map((x) => x.kind),
      ['grant'],
      'no debit for a refused request',
    );
  });

  t.test('the one exception: an upstream that ignores max_tokens is debited in full and recorded', async (t) => {
    const sim = await startSimulator();
    t.teardown(() => sim.close());
    const gw = await startGateway(t, { redisUrl: redis.url, upstreamUrl: sim.url });
    const { key } = await gw.createKey({ account: 'overrun', env: 'live' });
    // Funded for exactly one hold of a 5-token request; the upstream sends 200 tokens anyway.
    const body = streamBody({ tokens: 200, ignore_max_tokens: true }, 'hello there', { max_tokens: 5 });
    await gw.grant('overrun', 1_000_000);
    const sizing = await chat(gw.url, key, body);
    await sizing.text();
    const first = await waitFor(
      async () => (await ledgerOf(gw.admin, 'overrun')).find((e) => e.kind === 'debit'),
      1000,
      'the sizing debit',
    );
    const hold = first.hold_micros!;
    const { balance_micros } = await accountOf(gw.admin, 'overrun');
    await gw.grant('overrun', hold - balance_micros, 'down to one hold');

    const res = await chat(gw.url, key, body);
    t.equal(res.status, 200);
    const data = sseData(await res.text());
    t.equal(data.filter((d) => d.includes('"content":"tok')).length, 200, 'the client got all 200 tokens');
    const id = res.headers.get('x-request-id')!;
    const entry = await waitFor(
      async () => (await ledgerOf(gw.admin, 'overrun')).find((e) => e.kind === 'debit' && e.request_id === id),
      1000,
      'the overrun debit',
    );
    t.equal(entry.completion_tokens, 200, 'the overrun is recorded: 200 completion tokens for max_tokens 5');
    t.ok(-entry.amount_micros > entry.hold_micros!, `debit ${-entry.amount_micros} > hold ${entry.hold_micros}: the overrun is debited`);
    const acct = await accountOf(gw.admin, 'overrun');
    t.equal(acct.balance_micros, hold + entry.amount_micros, 'balance = what was there − the whole cost (below 0: SPEC §4 exception)');
    t.equal(acct.held_micros, 0);
    checkLedger(t, await ledgerOf(gw.admin, 'overrun'), acct, new Set([sizing.headers.get('x-request-id')!, id]));
    const next = await chat(gw.url, key, body);
    t.equal(next.status, 402, 'the account is refused afterwards');
    await next.text();
  });
}
