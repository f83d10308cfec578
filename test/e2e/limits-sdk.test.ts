// The official openai SDK against a rate-limited key (SPEC §1.5): with maxRetries 2 it waits the
// gateway's retry-after-ms (not its own 0.5 s / 1 s backoff, which would retry inside the window and
// fail twice) and succeeds once the window frees. Timing comes from the SDK's own fetch calls, the
// simulator's records and the gateway's request log lines.
import t from 'tap';
import OpenAI from 'openai';
import { requestLogs, startLimitsStack } from './limits-fixture.ts';

const WINDOW_MS = 3000;
const stack = await startLimitsStack(t, { window_seconds: WINDOW_MS / 1000, test: { requests_per_minute: 1, tokens_per_minute: 100_000 } });
if (stack) {
  const { sim, gw } = stack;

  t.test('maxRetries: 2 retries once, after retry-after-ms, and succeeds', async (t) => {
    const { key, id } = await gw.createKey({ account: 'acme', env: 'test' });
    const attempts: Array<{ sentAt: number; status: number; retryAfterMs: number | undefined; retryCount: string | null }> = [];
    const client = new OpenAI({
      apiKey: key,
      baseURL: `${gw.url}/v1`,
      maxRetries: 2,
      timeout: 10_000,
      fetch: async (url, init) => {
        const sentAt = performance.timeOrigin + performance.now();
        const retryCount = new Headers(init?.headers).get('x-stainless-retry-count');
        const res = await fetch(url, init);
        const ra = res.headers.get('retry-after-ms');
        attempts.push({ sentAt, status: res.status, retryAfterMs: ra === null ? undefined : Number(ra), retryCount });
        return res;
      },
    });
    const ask = () => client.chat.completions.create({ model: 'sim-free', messages: [{ role: 'user', content: 'hello' }], max_tokens: 8 });

    const first = await ask();
    t.equal(first.choices[0]?.message.content, 'tok0 tok1 tok2 tok3 tok4 tok5 tok6 tok7 ', 'first call answered');
    const second = await ask();
    t.equal(second.object, 'chat.completion', 'the second call succeeds after one 429');

    t.same(
      attempts.map((a) => a.status),
      [200, 429, 200],
      'three HTTP attempts: ok, limited, ok',
    );
    const limited = attempts[1]!;
    const retry = attempts[2]!;
    t.ok(
      limited.retryAfterMs !== undefined && limited.retryAfterMs > 1000 && limited.retryAfterMs <= WINDOW_MS,
      `retry-after-ms ${limited.retryAfterMs} is most of the window, longer than the SDK's first default backoff (<= 0.5 s)`,
    );
    t.equal(retry.retryCount, '1', 'the SDK marks the attempt as its first retry');
    const waited = retry.sentAt - limited.sentAt;
    t.ok(waited >= limited.retryAfterMs! - 5, `the retry waited ${waited.toFixed(0)} ms >= retry-after-ms ${limited.retryAfterMs}`);
    t.ok(
      waited <= limited.retryAfterMs! + 2000,
      `... once, not a second wait on top (${waited.toFixed(0)} ms; loose bound for loaded CI boxes)`,
    );

    const upstream = sim.requests.filter((r) => r.path === '/v1/chat/completions');
    t.equal(upstream.length, 2, 'the upstream saw the two admitted requests only');
    const gap = upstream[1]!.startedAt - upstream[0]!.startedAt;
    t.ok(gap >= WINDOW_MS - 50, `the retry reached the upstream after the window (${gap.toFixed(0)} ms after the first)`);

    const statuses = requestLogs(gw)
      .filter((l) => l.key_id === id)
      .map((l) => l.status);
    t.same(statuses, [200, 429, 200], 'the gateway logged ok, limited, ok');
  });

  t.test('maxRetries: 0 surfaces the 429 as a RateLimitError carrying the headers', async (t) => {
    const { key } = await gw.createKey({ account: 'acme', env: 'test' });
    const client = new OpenAI({ apiKey: key, baseURL: `${gw.url}/v1`, maxRetries: 0 });
    await client.models.list();
    const err = await client.models.list().then(
      () => undefined,
      (e: unknown) => e,
    );
    t.ok(err instanceof OpenAI.RateLimitError, 'RateLimitError');
    const e = err as InstanceType<typeof OpenAI.RateLimitError>;
    t.equal(e.status, 429);
    t.equal(e.code, 'rate_limit_exceeded');
    t.equal(e.type, 'rate_limit_error');
    t.match(e.message, new RegExp(`1 requests per ${WINDOW_MS / 1000}s window`));
    t.ok(Number(e.headers?.get('retry-after-ms')) > 0);
    t.equal(e.headers?.get('x-ratelimit-remaining-requests'), '0');
  });
}
