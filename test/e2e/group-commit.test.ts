// Group commit end to end (issue 29, docs/ledger.md "Group commit"): a crowd of live requests from two
// accounts, through the official SDK, on a real redis-server. Their holds and settles reach Redis in
// batches (fewer script calls than requests; an account's turn as a run), yet each request is checked and
// billed on its own: the poor account's refused holds (402) never fail the rich account's requests in the
// same batches, every served request has exactly one debit, and both ledgers add up.
import t from 'tap';
import OpenAI from 'openai';
import { startRedis } from '../helpers/redis.ts';
import { startGateway } from '../helpers/gateway.ts';
import { startSimulator } from '../../src/simulator/simulator.ts';
import { accountOf, checkLedger, crowdRequest, ledgerOf } from './credit-support.ts';
import { readFileSync } from 'node:fs';
import { luaScript } from '../../src/store/script-pipe.ts';
import { monitorRedis } from '../helpers/redis.ts';
import { waitFor } from '../helpers/wait.ts';

const RICH = 64;
const POOR = 48;

const redis = await startRedis(t);
if (redis) {
  t.test('a crowd of two accounts: batched holds and settles, each request billed once, refusals stay in their account', async (t) => {
    const sim = await startSimulator();
    t.teardown(() => sim.close());
    const gw = await startGateway(t, { redisUrl: redis.url, upstreamUrl: sim.url });
    const rich = await gw.createKey({ account: 'gc-rich', env: 'live' });
    const poor = await gw.createKey({ account: 'gc-poor', env: 'live' });
    await gw.grant('gc-rich', 1_000_000_000);
    const client = (key: string) => new OpenAI({ apiKey: key, baseURL: `${gw.url}/v1`, maxRetries: 0 });
    const base = { model: 'sim-small', messages: [{ role: 'user' as const, content: 'hello there' }], max_tokens: 16 };

    // What one request holds: the poor account gets enough for about a quarter of its crowd.
    const probe = await client(rich.key).chat.completions.create(base);
    t.ok(probe.choices[0]?.message.content);
    const [first] = (await ledgerOf(gw.admin, 'gc-rich')).filter((e) => e.kind === 'debit');
    const hold = first!.hold_micros!;
    await gw.grant('gc-poor', Math.floor((POOR / 4) * hold));

    // Every script call of the crowd, as MONITOR sees it: which script (by SHA) and which requests it carried.
    const sha = (name: string) => luaScript(readFileSync(new URL(`../../src/store/lua/${name}.lua`, import.meta.url), 'utf8')).sha;
    // The requests a credit script call carried ('hold <id>' / 'settle <id>'), from its arguments (no key of
    // this crowd has a budget): hold.lua / settle.lua one; the -many scripts a group per request (key count,
    // request id, amount, due or key count, request id, amount, entry data, due); a run (run.lua) its ns
    // settles' then nh holds' ids after its first five.
    const as = (kind: string, ids: string[]) => ids.map((id) => `${kind} ${id}`);
    const idsOf = new Map<string, (argv: string[]) => string[]>([
      [sha('hold'), (a) => as('hold', [a[0]!])],
      [sha('settle'), (a) => as('settle', [a[0]!])],
      [
        sha('hold-many'),
        (a) =>
          as(
            'hold',
            a.filter((_, i) => i % 4 === 1),
          ),
      ],
      [
        sha('settle-many'),
        (a) =>
          as(
            'settle',
            a.filter((_, i) => i % 5 === 1),
          ),
      ],
      [
        sha('run'),
        (a) => [...as('settle', a.slice(5, 5 + Number(a[3]))), ...as('hold', a.slice(5 + Number(a[3]), 5 + Number(a[3]) + Number(a[4])))],
      ],
    ]);
    const runs = new Set([sha('run')]);
    const mon = await monitorRedis(redis.url);
    t.teardown(() => mon.close());
    const served = new Map<string, Set<string>>([
      ['gc-rich', new Set()],
      ['gc-poor', new Set()],
    ]);
    // Every fourth streamed: its settle comes after the last event.
    const one = (account: string, key: string, i: number) => crowdRequest(client(key), base, i % 4 === 0, served.get(account)!);
    const results = await Promise.allSettled([
      ...Array.from({ length: RICH }, (_, i) => one('gc-rich', rich.key, i)),
      ...Array.from({ length: POOR }, (_, i) => one('gc-poor', poor.key, i)),
    ]);
    const richResults = results.slice(0, RICH);
    const poorResults = results.slice(RICH);
    t.equal(richResults.filter((r) => r.status === 'fulfilled').length, RICH, 'every request of the funded account served');
    const refused = poorResults.filter((r) => r.status === 'rejected').map((r) => (r as PromiseRejectedResult).reason);
    t.ok(refused.length > 0 && refused.length < POOR, `the poor account: ${POOR - refused.length} served, ${refused.length} refused`);
    t.ok(
      refused.every(
        (e) => e instanceof OpenAI.APIError && e.status === 402 && (e.error as { code?: string })?.code === 'insufficient_credit',
      ),
      'every refusal is 402 insufficient_credit',
    );

    // Settled (and the request lines' usage flushed) shortly after the last answer.
    for (const account of ['gc-rich', 'gc-poor']) {
      const settledIds = served.get(account)!;
      const entries = await waitFor(
        async () => {
          const e = await ledgerOf(gw.admin, account);
          return e.filter((x) => x.kind === 'debit').length >= settledIds.size + (account === 'gc-rich' ? 1 : 0) ? e : undefined;
        },
        5000,
        `${account}'s debits`,
      );
      const acct = await accountOf(gw.admin, account);
      const ids = account === 'gc-rich' ? new Set([...settledIds, first!.request_id!]) : settledIds;
      checkLedger(t, entries, acct, ids);
      t.equal(acct.held_micros, 0, `${account}: every hold released`);
      t.ok(acct.balance_micros >= 0, `${account}: never below zero`);
    }
    mon.close();
    // Per credit script call: is it a hold, is it a run, the request ids it carried.
    const calls = mon.seen
      .map((l) => l.split(' '))
      .filter((w) => w[0]!.toLowerCase() === 'evalsha' && idsOf.has(w[1]!))
      .map((w) => ({ run: runs.has(w[1]!), ids: idsOf.get(w[1]!)!(w.slice(3 + Number(w[2]))) }));
    // A request reaches Redis once per hold and once per settle — or again after a declined run (the poor
    // account could not cover a whole run): a settle-hold run declined goes as runs of each kind, and a
    // run declined as a -many call, so at most three times, every call but the last a run.
    const seen = new Map<string, { run: boolean }[]>();
    for (const c of calls) for (const k of c.ids) seen.set(k, [...(seen.get(k) ?? []), { run: c.run }]);
    const expected = RICH + POOR + RICH + (POOR - refused.length); // a hold each, a settle per served request
    t.equal(seen.size, expected, 'every hold and settle of the crowd went to Redis');
    t.ok(
      [...seen.values()].every((v) => v.length <= 3 && v.every((x, i) => i === v.length - 1 || x.run)),
      'each once, or as declined runs and then once more',
    );
    const batches = calls.filter((c) => c.ids.length > 1);
    t.ok(
      batches.length > 0,
      `${batches.length} calls carried more than one request (largest ${Math.max(0, ...batches.map((c) => c.ids.length))})`,
    );
    t.ok(
      calls.some((c) => c.run && c.ids.length > 1),
      "the funded account's turns went as runs",
    );
    t.comment(`${calls.length} credit script calls (${calls.filter((c) => c.run).length} runs) for ${expected} holds + settles`);
  });
}
