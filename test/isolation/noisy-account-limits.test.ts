// SPEC §13 "limits are per account too", §1.5, attack 4 of issue 24: 20 test keys of one account used to
// get 20 × every per-key limit (5 requests a minute each → 100). Now rate_limits.test_account (default
// 4 × the per-key limits) bounds the account's test keys together, shared through Redis, and
// limits.max_concurrent_per_account bounds its requests in flight; a 429 names its scope. A victim
// account is measured while the 20 keys push.
import t from 'tap';
import { setTimeout as sleep } from 'node:timers/promises';
import { baseline, describe, p99, startNoisyStack, victimLoad } from './noisy-fixture.ts';

const stack = await startNoisyStack(t, {
  // Per key 5 requests and 1M tokens a minute; the account: 20 requests (4 ×, the default's factor) and 1M tokens
  // (so one request of ~300k tokens is what a key may send, and three what the account may).
  rate_limits: {
    test: { requests_per_minute: 5, tokens_per_minute: 1_000_000 },
    test_account: { requests_per_minute: 20, tokens_per_minute: 1_000_000 },
  },
  limits: { max_concurrent_per_account: 6 },
});

if (stack) {
  const { gw } = stack;
  const victimKey = await stack.victim();

  const chat = async (key: string, body: Record<string, unknown>) => {
    const r = await fetch(`${gw.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(10_000),
    });
    const text = await r.text();
    return { status: r.status, scope: r.headers.get('x-ratelimit-scope'), body: JSON.parse(text) as any };
  };

  t.test('20 test keys of one account together get at most the account limit; the victim is unaffected', async (t) => {
    const keys = await Promise.all(Array.from({ length: 20 }, () => stack.key('horde', 'test')));
    const base = await baseline(gw, victimKey, 1000);
    let done!: () => void;
    const stop = new Promise<void>((r) => (done = r));
    const victimRun = victimLoad(gw, victimKey, stop, 30_000);
    // Every key tries its full per-key allowance: 5 requests each, 100 in all (one after another: the account's
    // concurrency limit is the next test's subject).
    const replies = [];
    for (let i = 0; i < 5; i++) {
      for (const k of keys) replies.push(await chat(k, { model: 'sim-free', messages: [{ role: 'user', content: 'x' }], max_tokens: 8 }));
    }
    done();
    const victim = await victimRun;
    const ok = replies.filter((r) => r.status === 200);
    t.equal(ok.length, 20, `the account's 20 requests a minute, not 20 keys × 5 = 100`);
    const refused = replies.filter((r) => r.status === 429);
    t.equal(refused.length, 80);
    t.ok(
      refused.every((r) => r.scope === 'account' && r.body.error.code === 'rate_limit_exceeded'),
      'every refusal names the account scope',
    );
    t.match(refused[0]!.body.error.message, /this account's test keys together/);
    // Latency under attack is the trickle and deep-JSON files' subject; here the victim's success is.
    t.ok(victim.ok / victim.total >= 0.99, `victim: ${describe(victim)} (baseline p99 ${p99(base.victim).toFixed(1)} ms)`);
  });

  t.test("tokens too: the account's keys together are admitted at most the account's token limit", async (t) => {
    // Six keys (the account's concurrency limit), one request each, admitted on its estimate (its prompt's
    // ~300,000 bytes + output): one fits a key's 1M tokens, six would take 1.8M; the account's 1M admits
    // three while they are all in flight (the upstream holds each for ~1 s, so no settle frees room early).
    const keys = await Promise.all(Array.from({ length: 6 }, () => stack.key('horde-tokens', 'test')));
    const prompt = 'word '.repeat(60_000);
    const replies = await Promise.all(
      keys.map((k) =>
        chat(k, { model: 'sim-free', messages: [{ role: 'user', content: prompt }], max_tokens: 8, sim: { tokens: 4, delay_ms: 250 } }),
      ),
    );
    const ok = replies.filter((r) => r.status === 200);
    t.ok(ok.length >= 1 && ok.length <= 3, `${ok.length} of 6 admitted (account limit 1M tokens, ~300k each)`);
    t.ok(
      replies.filter((r) => r.status === 429).every((r) => r.body.error.code === 'rate_limit_exceeded'),
      'refused on tokens',
    );
    t.ok(
      replies.filter((r) => r.status === 429).every((r) => r.scope === 'account'),
      'the refusals are the account limit',
    );
  });

  t.test('limits.max_concurrent_per_account: the keys of one account hold at most 6 requests in flight', async (t) => {
    const keys = await Promise.all(Array.from({ length: 10 }, () => stack.key('herd', 'test', { requests_per_minute: 100 })));
    const slow = (k: string) =>
      chat(k, { model: 'sim-free', messages: [{ role: 'user', content: 'x' }], max_tokens: 8, sim: { tokens: 8, delay_ms: 150 } });
    const replies = await Promise.all(keys.map(slow));
    const ok = replies.filter((r) => r.status === 200).length;
    const refused = replies.filter((r) => r.status === 429);
    t.ok(ok <= 6, `${ok} served at once`);
    t.ok(refused.length >= 4);
    t.ok(
      refused.every((r) => r.scope === 'account' && r.body.error.code === 'concurrency_limit_exceeded'),
      'the refusals are the account concurrency limit',
    );
    // The victim's own account has its own slots.
    const v = await fetch(`${gw.url}/v1/models`, { headers: { authorization: `Bearer ${victimKey}` } });
    t.equal(v.status, 200);
    await v.arrayBuffer();
    await sleep(10);
  });
}
