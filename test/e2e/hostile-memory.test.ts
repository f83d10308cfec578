// SPEC §12 "Memory is bounded under any mix of requests" and "No request blocks the event loop": the
// attacks of the hostile-clients issue, reproduced.
//   - 60 parallel streaming requests with a 4 MB unknown field, one free test key: the process died
//     (heap out of memory at npm start's 256 MB cap) and every tenant's stream with it
//   - one key holding every slot of the process
//   - a 1 MB one-word prompt billed without usage froze /healthz for seconds (BPE is quadratic in a word)
import t from 'tap';
import { request } from 'node:http';
import { startGateway } from '../helpers/gateway.ts';
import { setTimeout as sleep } from 'node:timers/promises';
import { waitFor } from '../helpers/wait.ts';
import { worstHealth } from '../helpers/health.ts';
import { startSimulator } from '../../src/simulator/simulator.ts';
import { chat, spawnGateway, streamBody } from './credit-support.ts';
import { postChat, sseData, startSim, waitForDebit } from './chat-fixture.ts';

/** A POST whose body is sent as fast as the socket takes it; resolves with the status (or 0 on a reset). */
function postRaw(url: string, key: string, body: Buffer): Promise<number> {
  return new Promise((resolve) => {
    const req = request(
      `${url}/v1/chat/completions`,
      {
        method: 'POST',
        agent: false,
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'content-length': body.length },
      },
      (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode!));
        res.on('error', () => resolve(0));
      },
    );
    req.on('error', () => resolve(0));
    req.end(body);
  });
}

t.test('60 × 4 MB bodies on a free test key: the process stays up, another client streams, memory comes back', async (t) => {
  const sim = await startSimulator();
  t.teardown(() => sim.close());
  // The way npm start runs it: the heap capped at 256 MB.
  const gw = await spawnGateway(t, {
    upstreamUrl: sim.url,
    nodeArgs: ['--max-old-space-size=256'],
    // The per-key body cap (SPEC §13, 8 MiB) would refuse this key with 429 long before the process budget:
    // raised here so the process-wide budget (503) is what is tested; test/isolation/noisy-body-trickle.test.ts tests the cap.
    config: {
      rate_limits: {
        test: { requests_per_minute: 100_000, tokens_per_minute: 100_000_000 },
        test_account: { requests_per_minute: 100_000, tokens_per_minute: 100_000_000 },
      },
      limits: { max_inflight_body_bytes_per_key: 256 * 1024 * 1024 },
    },
  });
  const admin = async (path: string, body: unknown) =>
    (
      await fetch(`${gw.adminUrl}${path}`, {
        method: 'POST',
        headers: { authorization: `Bearer ${(await import('../helpers/gateway.ts')).ADMIN_TOKEN}`, 'content-type': 'application/json' },
        body: JSON.stringify(body),
      })
    ).json() as Promise<{ key: string }>;
  const attacker = (await admin('/admin/keys', { account: 'mallory', env: 'test', name: 'free' })).key;
  const victim = (await admin('/admin/keys', { account: 'alice', env: 'test', name: 'paying' })).key;
  const gauge = async (name: string) =>
    Number(new RegExp(`^${name} (\\d+)`, 'm').exec(await (await fetch(`${gw.adminUrl}/metrics`)).text())?.[1]);
  const heap = () => gauge('tollgate_nodejs_heap_size_used_bytes');
  const before = await heap();

  const junk = Buffer.from(
    JSON.stringify({
      model: 'sim-small',
      stream: true,
      messages: [{ role: 'user', content: 'hi' }],
      sim: { tokens: 20, delay_ms: 20 },
      junk: 'x'.repeat(4_000_000),
    }),
  );
  const victimStream = chat(gw.url, victim, streamBody({ tokens: 60, delay_ms: 20 }));
  const statuses = await Promise.all(Array.from({ length: 60 }, () => postRaw(gw.url, attacker, junk)));
  const counts: Record<number, number> = {};
  for (const s of statuses) counts[s] = (counts[s] ?? 0) + 1;
  t.ok((counts[200] ?? 0) > 0, `some were served: ${JSON.stringify(counts)}`);
  t.ok((counts[503] ?? 0) > 0, 'past the in-flight body budget: 503 overloaded');
  t.equal(counts[0] ?? 0, 0, 'no connection was cut');
  const data = sseData(await (await victimStream).text());
  t.equal(data.at(-1), '[DONE]', "the other client's stream completed");
  t.equal(data.filter((d) => d.includes('"content":"tok')).length, 60);
  t.equal(gw.child.exitCode, null, 'the process is alive');
  t.equal((await fetch(`${gw.adminUrl}/healthz`)).status, 200);
  // Nothing of the 60 bodies is held once the burst is over, and the heap stays far under the cap.
  await waitFor(async () => (await gauge('tollgate_inflight_body_bytes')) === 0, 5_000, 'every body reservation to be released');
  const after = await heap();
  t.ok(
    after < 200e6,
    `heap used before ${Math.round(before / 1e6)} MB, after ${Math.round(after / 1e6)} MB (cap 256 MB), RSS ${Math.round((await gauge('tollgate_process_resident_memory_bytes')) / 1e6)} MB`,
  );
  const over = await fetch(`${gw.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${attacker}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'sim-small', messages: [{ role: 'user', content: 'x' }] }),
  });
  t.equal(over.status, 200, 'the budget was given back: a normal request is served again');
  await over.arrayBuffer();
});

t.test('per-key concurrency: the limit+1th request of a key is 429; other keys are served; a slot frees on end and on abort', async (t) => {
  const sim = await startSim(t);
  const gw = await startGateway(t, { upstreamUrl: sim.url, config: { limits: { max_concurrent_per_key: 2 } } });
  const { key } = await gw.createKey({ account: 'conc', env: 'test', rate_limits: { requests_per_minute: 10_000 } });
  const other = await gw.createKey({ account: 'conc2', env: 'test' });
  const slow = () =>
    postChat(gw, key, { model: 'sim-small', messages: [{ role: 'user', content: 'x' }], stream: true, sim: { tokens: 20, delay_ms: 25 } });
  const a = await slow();
  const ctl = new AbortController();
  const b = await fetch(`${gw.url}/v1/chat/completions`, {
    method: 'POST',
    signal: ctl.signal,
    headers: { ...gw.auth(key), 'content-type': 'application/json' },
    body: JSON.stringify({
      model: 'sim-small',
      messages: [{ role: 'user', content: 'x' }],
      stream: true,
      sim: { tokens: 200, delay_ms: 25 },
    }),
  });
  const third = await slow();
  t.equal(third.status, 429);
  const err = (await third.json()) as { error: { code: string } };
  t.equal(err.error.code, 'concurrency_limit_exceeded');
  t.equal(third.headers.get('retry-after'), '1');
  t.equal((await fetch(`${gw.url}/v1/models`, { headers: gw.auth(key) })).status, 429, 'every route of that key');
  t.equal((await fetch(`${gw.url}/v1/models`, { headers: gw.auth(other.key) })).status, 200, 'another key is served');
  ctl.abort();
  await b.arrayBuffer().catch(() => {});
  const aborted = Date.now();
  await waitFor(
    async () => (await fetch(`${gw.url}/v1/models`, { headers: gw.auth(key) })).status === 200,
    10_000,
    'the aborted request to free its slot',
  );
  t.comment(`slot freed ${Date.now() - aborted} ms after the abort`);
  await a.text();
  const after = await Promise.all([slow(), slow()]);
  t.same(
    after.map((r) => r.status),
    [200, 200],
    'both slots free once the streams ended',
  );
  await Promise.all(after.map((r) => r.text()));
});

t.test('/healthz answers within 100 ms while a 1 MB one-word prompt is billed without usage', async (t) => {
  const sim = await startSim(t);
  const gw = await startGateway(t, { upstreamUrl: sim.url });
  const { key } = await gw.createKey({ account: 'bpe', env: 'live' });
  await gw.grant('bpe', 100_000_000);
  // One request without usage first: the tokenizer loads once, lazily (a one-time ~0.2 s import).
  const warm = await postChat(gw, key, {
    model: 'sim-small',
    messages: [{ role: 'user', content: 'warm up' }],
    sim: { usage: 'absent', tokens: 3 },
  });
  await warm.text();
  await waitForDebit(gw, 'bpe', warm.headers.get('x-request-id')!);

  // What /healthz takes on this shared box anyway, probed the same way, so a scheduler hiccup during the
  // count is not read as the count's stall (test/helpers/health.ts).
  const baseline = await worstHealth(gw.adminUrl, sleep(1_000));

  const word = 'abcdefghij'.repeat(100_000);
  const res = await postChat(gw, key, {
    model: 'sim-small',
    messages: [{ role: 'user', content: word }],
    sim: { usage: 'absent', tokens: 5 },
  });
  t.equal(res.status, 200);
  await res.text();
  const rid = res.headers.get('x-request-id')!;
  const billed = waitForDebit(gw, 'bpe', rid, 20_000);
  const during = await worstHealth(gw.adminUrl, billed);
  const debit = await billed;
  t.ok(during.probes >= 1, `${during.probes} probes while billing`);
  // SPEC §13's 100 ms, over the baseline: a count that held the event loop for the whole word fails it.
  t.ok(
    during.worst < 100 + baseline.worst,
    `the slowest /healthz took ${during.worst.toFixed(1)} ms (baseline worst ${baseline.worst.toFixed(1)} ms)`,
  );
  t.equal(debit.usage_source, 'estimated');
  t.ok(
    debit.prompt_tokens! > 0 && debit.prompt_tokens! <= Buffer.byteLength(word) + 100,
    `prompt billed ${debit.prompt_tokens} tokens: counted, at most the byte bound`,
  );
});
