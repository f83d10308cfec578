// SPEC §14 "Shutdown is bounded" (issue 25, faults 2 and 4), with the real entry point as a child process:
// streams still open at the drain deadline end with a `shutting_down` error event (no [DONE], so a client
// can tell the cut from a normal end) and are billed for what they produced; and the whole shutdown takes at
// most drain + 5 s, even with Redis away (it used to wait a full drain for connections, then another for
// settles).
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import OpenAI from 'openai';
import { startRedis } from '../helpers/redis.ts';
import { startGateway } from '../helpers/gateway.ts';
import { simCompletionText, startSimulator } from '../../src/simulator/simulator.ts';
import { createTokenizer } from '../../src/meter/tokenizer.ts';
import { accountOf, chat, checkLedger, ledgerOf, spawnGateway, streamBody } from './credit-support.ts';
import { expectedCost, sseData, SIM_SMALL } from './chat-fixture.ts';
import { readContent, spooled } from './fault-support.ts';

const SHUTTING_DOWN = { type: 'server_error', code: 'shutting_down', param: null };

/** The last SSE data event of a cut stream, parsed (undefined when it is not JSON). */
function lastEvent(text: string): { error?: Record<string, unknown> } | undefined {
  const last = sseData(text).at(-1);
  try {
    return last === undefined ? undefined : JSON.parse(last);
  } catch {
    return undefined;
  }
}

const tokenizer = createTokenizer();
await tokenizer.load();
/** The tokenizer's count of what the simulator sent (the gateway counts it so: no usage chunk in a cut stream). */
const producedMax = (sent: number) => tokenizer.countText(simCompletionText(sent));

const redis = await startRedis(t, { restartable: true });
/** Child gateways boot in 0.5–1 s on an idle box; 7 s was seen with the machine's load at 33. */
const BOOT_MS = 30_000;

if (redis) {
  const sim = await startSimulator();
  t.teardown(() => sim.close());
  const admin = await startGateway(t, { redisUrl: redis.url, upstreamUrl: sim.url, config: { store: { command_timeout_ms: 300 } } });

  t.test('streams open at the drain deadline get the shutting_down event, are billed for what they produced', async (t) => {
    const { key } = await admin.createKey({ account: 'cut', env: 'live' });
    await admin.grant('cut', 10_000_000);
    const drainSeconds = 2;
    const gw = await spawnGateway(t, {
      readyTimeoutMs: BOOT_MS,
      redisUrl: redis.url,
      upstreamUrl: sim.url,
      config: { server: { drain_seconds: drainSeconds } },
    });

    // 200 tokens × 40 ms: 8 s of stream against a 2 s drain deadline.
    const responses = await Promise.all([0, 1, 2].map(() => chat(gw.url, key, streamBody({ tokens: 200, delay_ms: 40 }))));
    const ids = responses.map((r) => r.headers.get('x-request-id')!);
    const readers = await Promise.all(responses.map((r) => readContent(r, 3)));
    // And one through the official SDK, which must surface the cut as an error, not as a finished answer.
    const client = new OpenAI({ apiKey: key, baseURL: `${gw.url}/v1`, maxRetries: 0 });
    const sdkStream = await client.chat.completions.create({
      model: 'sim-small',
      messages: [{ role: 'user', content: 'hello there' }],
      stream: true,
      // @ts-expect-error the simulator's steering field
      sim: { tokens: 200, delay_ms: 40 },
    });
    const sdkChunks: unknown[] = [];
    const sdkDone = (async () => {
      for await (const c of sdkStream) sdkChunks.push(c);
    })().then(
      () => undefined,
      (e: unknown) => e,
    );
    while (sdkChunks.length < 2) await new Promise((r) => setTimeout(r, 10));

    const termAt = Date.now();
    gw.child.kill('SIGTERM');
    const texts = await Promise.all(readers.map((r) => r.rest()));
    const cutAfter = Date.now() - termAt;
    const { code } = await gw.exited;
    const took = Date.now() - termAt;
    t.comment(
      gw
        .output()
        .split('\n')
        .find((l) => l.includes('"drained_ms"')) ?? 'no shutdown phases line',
    );
    t.equal(code, 0, 'exit code 0');
    t.ok(cutAfter >= drainSeconds * 1000 - 200, `the streams ran until the drain deadline (${cutAfter} ms)`);
    t.ok(took <= (drainSeconds + 5) * 1000, `exited ${took} ms after SIGTERM: within drain + 5 s`);

    for (const [i, text] of texts.entries()) {
      const data = sseData(text);
      t.notOk(data.includes('[DONE]'), `stream ${i}: no [DONE]`);
      const last = lastEvent(text);
      t.match(last?.error, SHUTTING_DOWN, `stream ${i}: its last event is the shutting_down error`);
      t.type(last?.error?.message, 'string');
      t.ok(data.filter((d) => d.includes('"content":"tok')).length >= 3, 'after the tokens produced');
    }
    const sdkError = (await sdkDone) as { code?: string; type?: string } | undefined;
    t.ok(sdkError instanceof Error, 'the SDK throws on the cut stream');
    t.equal(sdkError?.code, 'shutting_down', 'with the shutting_down code');

    const entries = await ledgerOf(admin.admin, 'cut');
    for (const id of ids) {
      const rec = sim.requests.find((r) => r.headers['x-request-id'] === id)!;
      const debit = entries.find((e) => e.kind === 'debit' && e.request_id === id);
      t.ok(debit, 'the cut stream was debited before the process exited');
      if (!debit) continue;
      // No usage chunk in a cut stream: the tokenizer over what the client received (≤ what the simulator sent).
      t.ok(
        debit.completion_tokens! >= producedMax(3) && debit.completion_tokens! <= producedMax(rec.completionTokensSent),
        `billed ${debit.completion_tokens} completion tokens for ${rec.completionTokensSent} simulator tokens sent`,
      );
      t.ok(rec.completionTokensSent < 200, 'the upstream was cut before the whole answer');
      t.equal(debit.usage_source, 'estimated');
      t.equal(debit.amount_micros, -expectedCost(SIM_SMALL, debit.prompt_tokens!, debit.completion_tokens!));
    }
    const acct = await accountOf(admin.admin, 'cut');
    t.equal(acct.held_micros, 0, 'no hold left behind');
    const sdkId = entries.filter((e) => e.kind === 'debit' && !ids.includes(e.request_id!)).map((e) => e.request_id!);
    t.equal(sdkId.length, 1, "the SDK's stream is debited too");
    checkLedger(t, entries, acct, new Set([...ids, ...sdkId]));
  });

  t.test('Redis away at SIGTERM: exit within drain + 5 s, the cut streams still get their event, their settles spooled', async (t) => {
    const { key } = await admin.createKey({ account: 'bounded', env: 'live' });
    await admin.grant('bounded', 10_000_000);
    const spoolDir = await mkdtemp(join(tmpdir(), 'tollgate-fault-spool-'));
    t.teardown(() => rm(spoolDir, { recursive: true, force: true }));
    // 6 s: the old shutdown took a full drain for the connections and another for the settles (≥ 12 s).
    const drainSeconds = 6;
    const gw = await spawnGateway(t, {
      readyTimeoutMs: BOOT_MS,
      redisUrl: redis.url,
      upstreamUrl: sim.url,
      config: { server: { drain_seconds: drainSeconds, spool_dir: spoolDir }, store: { command_timeout_ms: 300 } },
    });
    // 400 tokens × 40 ms: 16 s of stream.
    const responses = await Promise.all([0, 1].map(() => chat(gw.url, key, streamBody({ tokens: 400, delay_ms: 40 }))));
    const ids = responses.map((r) => r.headers.get('x-request-id')!);
    const readers = await Promise.all(responses.map((r) => readContent(r, 3)));

    await redis.stop();
    const termAt = Date.now();
    gw.child.kill('SIGTERM');
    const texts = await Promise.all(readers.map((r) => r.rest()));
    const { code } = await gw.exited;
    const took = Date.now() - termAt;
    t.comment(
      gw
        .output()
        .split('\n')
        .find((l) => l.includes('"drained_ms"')) ?? 'no shutdown phases line',
    );
    t.equal(code, 0, 'exit code 0');
    t.ok(took <= (drainSeconds + 5) * 1000, `exited ${took} ms after SIGTERM: within drain + 5 s (${(drainSeconds + 5) * 1000} ms)`);
    for (const text of texts) t.match(lastEvent(text)?.error, SHUTTING_DOWN, 'the cut stream ends with the shutting_down event');

    const { files, settles } = await spooled(spoolDir);
    t.equal(files.length, 1, 'one spool file for the process, closed');
    t.same(settles.map((s) => s.requestId).sort(), [...ids].sort(), 'both settles spooled');
    for (const s of settles) {
      const rec = sim.requests.find((r) => r.headers['x-request-id'] === s.requestId)!;
      t.ok(
        s.completionTokens >= producedMax(3) && s.completionTokens <= producedMax(rec.completionTokensSent),
        `billed for what it produced (${s.completionTokens})`,
      );
      t.equal(s.costMicros, expectedCost(SIM_SMALL, s.promptTokens, s.completionTokens));
      t.equal(s.account, 'bounded');
    }
    const out = gw.output();
    for (const id of ids) {
      const line = out.split('\n').find((l) => l.includes('settle spooled') && l.includes(id));
      t.ok(line, 'an error line per spooled settle');
      if (line) t.match(JSON.parse(line), { level: 50, settle: { requestId: id, account: 'bounded' } }, 'carrying the whole settle');
    }
    await redis.start();
  });
}
