// Graceful shutdown (SPEC §8) of a real `node src/main.ts` on a real redis-server: SIGTERM stops
// accepting, lets the stream in flight finish (up to the drain deadline), settles its hold, closes the
// store and exits 0. A stream that outlives the deadline is cut, and what it produced is still billed.
import { connect } from 'node:net';
import t from 'tap';
import { startRedis } from '../helpers/redis.ts';
import { startGateway } from '../helpers/gateway.ts';
import { simCompletionText, startSimulator } from '../../src/simulator/simulator.ts';
import { createTokenizer } from '../../src/meter/tokenizer.ts';
import { accountOf, chat, checkLedger, ledgerOf, spawnGateway, streamBody } from './credit-support.ts';
import { sseData, SIM_SMALL, expectedCost } from './chat-fixture.ts';
import { readContent } from './fault-support.ts';
import { waitFor } from '../helpers/wait.ts';

/** Resolves true when a new TCP connection to `url` is refused, false when it connects. */
function refused(url: string): Promise<boolean> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve) => {
    const s = connect(Number(port), hostname);
    s.once('connect', () => (s.destroy(), resolve(false)));
    s.once('error', (e: NodeJS.ErrnoException) => resolve(e.code === 'ECONNREFUSED'));
  });
}

const redis = await startRedis(t);
if (redis) {
  const sim = await startSimulator();
  t.teardown(() => sim.close());
  // In-process, on the same Redis: creates keys and credit, reads the ledger after the child is gone.
  const admin = await startGateway(t, { redisUrl: redis.url, upstreamUrl: sim.url });

  t.test('SIGTERM mid-stream: the stream completes, new connections are refused, exit 0, debit in the ledger', async (t) => {
    const { key } = await admin.createKey({ account: 'drain', env: 'live' });
    await admin.grant('drain', 1_000_000);
    const gw = await spawnGateway(t, { redisUrl: redis.url, upstreamUrl: sim.url });

    // 150 tokens × 20 ms: 3 s of stream (within the default 5 s drain), SIGTERM after 5 of them; the rest
    // is long enough that a loaded child still streams when its listener has closed.
    const res = await chat(gw.url, key, streamBody({ tokens: 150, delay_ms: 20 }));
    t.equal(res.status, 200);
    const id = res.headers.get('x-request-id')!;
    const { rest } = await readContent(res, 5);
    gw.child.kill('SIGTERM');
    await waitFor(() => refused(gw.url), 1000, 'the listener to close', 20);
    t.pass('new connections are refused while the stream drains');
    const rec = sim.requests.find((r) => r.headers['x-request-id'] === id);
    t.notOk(rec?.endedAt, 'the stream was still running at that point');

    const data = sseData(await rest());
    t.equal(data.at(-1), '[DONE]', 'the client receives the whole stream');
    t.equal(data.filter((d) => d.includes('"content":"tok')).length, 150, 'every token');
    const { code, signal } = await gw.exited;
    t.equal(code, 0, `exit code 0${signal ? ` (signal ${signal})` : ''}`);

    const entries = await ledgerOf(admin.admin, 'drain');
    const debit = entries.find((e) => e.kind === 'debit' && e.request_id === id);
    t.ok(debit, 'the debit was written before the process exited');
    t.equal(debit?.usage_source, 'upstream');
    t.equal(debit?.completion_tokens, 150);
    t.equal(debit?.amount_micros, -expectedCost(SIM_SMALL, debit?.prompt_tokens ?? 0, 150));
    const acct = await accountOf(admin.admin, 'drain');
    t.equal(acct.held_micros, 0, 'no hold left behind');
    checkLedger(t, entries, acct, new Set([id]));
  });

  t.test('SIGTERM with a stream longer than the drain deadline: cut at the deadline, produced tokens billed, exit 0', async (t) => {
    const tokenizer = createTokenizer();
    await tokenizer.load();
    const { key } = await admin.createKey({ account: 'deadline', env: 'live' });
    await admin.grant('deadline', 1_000_000);
    const gw = await spawnGateway(t, { redisUrl: redis.url, upstreamUrl: sim.url, config: { server: { drain_seconds: 1 } } });

    // 100 tokens × 60 ms: 6 s of stream against a 1 s drain deadline.
    const messages = [{ role: 'user', content: 'a long answer, please' }];
    const res = await chat(gw.url, key, { ...streamBody({ tokens: 100, delay_ms: 60 }), messages });
    t.equal(res.status, 200);
    const id = res.headers.get('x-request-id')!;
    const { rest } = await readContent(res, 5);
    const termAt = Date.now();
    gw.child.kill('SIGTERM');
    const text = await rest().catch(() => '');
    t.not(sseData(text).at(-1), '[DONE]', 'the stream was cut');
    const { code } = await gw.exited;
    t.equal(code, 0, 'exit code 0');
    t.ok(Date.now() - termAt < 5000, `exited ${Date.now() - termAt} ms after SIGTERM, before the stream would have ended`);

    const rec = await sim.waitFor((r) => r.headers['x-request-id'] === id && r.endedAt !== undefined, 2000);
    t.equal(rec.aborted, true, 'the upstream request was aborted');
    const entries = await ledgerOf(admin.admin, 'deadline');
    const debit = entries.find((e) => e.kind === 'debit' && e.request_id === id);
    t.ok(debit, 'the cut stream was settled before the process exited');
    if (debit) {
      t.equal(debit.usage_source, 'estimated', 'no usage chunk: tokenizer count');
      // At most what the simulator sent before its socket closed (what was still in the socket when the
      // gateway let go is not billed), at least what the client received.
      const sent = rec.completionTokensSent;
      // (5 were read before SIGTERM; the text after them is empty if the cut surfaced as an error.)
      const received = Math.max(5, sseData(text).filter((d) => d.includes('"content":"tok')).length);
      const [most, least] = [tokenizer.countText(simCompletionText(sent)), tokenizer.countText(simCompletionText(received))];
      t.ok(
        debit.completion_tokens! <= most && debit.completion_tokens! >= least,
        `completion tokens ${debit.completion_tokens}: at most the tokenizer over the ${sent} tokens sent (${most}), at least over the ${received} received (${least})`,
      );
      t.equal(debit.prompt_tokens, tokenizer.countPromptTokens(messages));
      t.equal(debit.amount_micros, -expectedCost(SIM_SMALL, debit.prompt_tokens!, debit.completion_tokens!));
    }
    const acct = await accountOf(admin.admin, 'deadline');
    t.equal(acct.held_micros, 0, 'no hold left behind');
    checkLedger(t, entries, acct, new Set([id]));
  });
}
