// Credit leases end to end (`credit.leases: true`, docs/ledger.md "Leases"): a crowd of live requests of
// a funded account and a poor one, through the official SDK, on a real redis-server. Once the funded
// account is hot, its holds are drawn from the gateway's lease (no hold reaches Redis) and its settles go
// as lease passes; yet every served request has exactly one debit, the poor account's refusals (402,
// never leased: it has no credit to spare) stay its own, both ledgers add up, and once the crowd is
// over the lease gives back its rest by itself: nothing stays held.
import { readFileSync } from 'node:fs';
import t from 'tap';
import OpenAI from 'openai';
import { monitorRedis, startRedis } from '../helpers/redis.ts';
import { startGateway } from '../helpers/gateway.ts';
import { waitFor } from '../helpers/wait.ts';
import { startSimulator } from '../../src/simulator/simulator.ts';
import { luaScript } from '../../src/store/script-pipe.ts';
import { createRedisStore } from '../../src/store/redis-store.ts';
import { accountOf, chat, checkLedger, crowdRequest, debitOf, ledgerOf, type Entry } from './credit-support.ts';

const RICH = 96;
const WAVE = 16;
const POOR_PER_WAVE = 5;
const POOR = (RICH / WAVE) * POOR_PER_WAVE;

const redis = await startRedis(t);
if (redis) {
  t.test('a hot account draws from its lease; each request billed once; the lease gives back its rest', async (t) => {
    const sim = await startSimulator();
    t.teardown(() => sim.close());
    const gw = await startGateway(t, {
      redisUrl: redis.url,
      upstreamUrl: sim.url,
      // A 180 s hold TTL (30 s upstream deadline + 150 s): 3 s hold buckets, so the waves share a few buckets
      // even on a slow machine (each bucket starts with 8 holds of its own before its lease).
      config: { credit: { hold_margin_seconds: 150, reaper_interval_ms: 200, leases: true } },
    });
    const rich = await gw.createKey({ account: 'ls-rich', env: 'live' });
    const poor = await gw.createKey({ account: 'ls-poor', env: 'live' });
    await gw.grant('ls-rich', 1_000_000_000);
    const client = (key: string) => new OpenAI({ apiKey: key, baseURL: `${gw.url}/v1`, maxRetries: 0 });
    const base = { model: 'sim-small', messages: [{ role: 'user' as const, content: 'hello there' }], max_tokens: 16 };
    const probe = await client(rich.key).chat.completions.create(base);
    t.ok(probe.choices[0]?.message.content);
    const [first] = (await ledgerOf(gw.admin, 'ls-rich')).filter((e) => e.kind === 'debit');
    const hold = first!.hold_micros!;
    await gw.grant('ls-poor', Math.floor((POOR / 4) * hold));

    const leaseSettle = luaScript(readFileSync(new URL('../../src/store/lua/lease-settle.lua', import.meta.url), 'utf8')).sha;
    const mon = await monitorRedis(redis.url);
    t.teardown(() => mon.close());
    const served = new Map<string, Set<string>>([
      ['ls-rich', new Set()],
      ['ls-poor', new Set()],
    ]);
    const one = (account: string, key: string, i: number) => crowdRequest(client(key), base, i % 4 === 0, served.get(account)!);
    // In waves, so the funded account is hot (8 holds in a bucket) before most of its requests.
    const results: PromiseSettledResult<void>[] = [];
    for (let w = 0; w < RICH / WAVE; w++) {
      results.push(
        ...(await Promise.allSettled([
          ...Array.from({ length: WAVE }, (_, i) => one('ls-rich', rich.key, w * WAVE + i)),
          ...Array.from({ length: POOR_PER_WAVE }, (_, i) => one('ls-poor', poor.key, i)),
        ])),
      );
    }
    const richOk = results.filter((r, i) => i % (WAVE + POOR_PER_WAVE) < WAVE && r.status === 'fulfilled').length;
    t.equal(richOk, RICH, 'every request of the funded account served');
    const refused = results.filter((r) => r.status === 'rejected').map((r) => (r as PromiseRejectedResult).reason);
    t.ok(refused.length > 0 && refused.length < POOR, `the poor account: ${POOR - refused.length} served, ${refused.length} refused`);
    t.ok(
      refused.every((e) => e instanceof OpenAI.APIError && e.status === 402),
      'every refusal is 402',
    );

    for (const account of ['ls-rich', 'ls-poor']) {
      const ids = account === 'ls-rich' ? new Set([...served.get(account)!, first!.request_id!]) : served.get(account)!;
      const entries = await waitFor(
        async () => {
          const e = await ledgerOf(gw.admin, account);
          return e.filter((x) => x.kind === 'debit').length >= ids.size ? e : undefined;
        },
        5000,
        `${account}'s debits`,
      );
      // The bucket's window (3 s with this config's hold TTL) ends: the lease's rest goes back by itself.
      const acct = await waitFor(
        async () => {
          const a = await accountOf(gw.admin, account);
          return a.held_micros === 0 ? a : undefined;
        },
        10_000,
        `${account}: nothing held`,
      );
      checkLedger(t, entries, acct, ids);
    }
    mon.close();
    // The lease passes: the funded account's settles they carried (their request ids, after 5 arguments).
    const passes = mon.seen
      .map((l) => l.split(' '))
      .filter((w) => w[0]!.toLowerCase() === 'evalsha' && w[1] === leaseSettle)
      .map((w) => w.slice(3 + Number(w[2])));
    const leased = new Set(passes.flatMap((a) => a.slice(5, 5 + Number(a[2]))));
    // Each 3 s bucket (this config's hold TTL) starts with 8 holds of its own before its lease: a slow machine
    // spreads the crowd over more buckets, so only a quarter is asked for.
    t.ok(leased.size >= RICH / 4, `${leased.size} of the funded account's ${RICH} requests were drawn from a lease`);
    t.ok(
      [...leased].every((id) => served.get('ls-rich')!.has(id)),
      "only the funded account's requests (the poor one never has credit to spare)",
    );
    // /metrics counts them: the leases taken and every hold drawn (the lease passes' settles among them).
    // A lease drawn down to exactly nothing leaves nothing held in Redis while it is still open: the book
    // closes it when its window ends (its sweep), so the gauge is read once that has happened.
    let text = '';
    const value = (name: string) => Number(new RegExp(`^${name} (\\d+)`, 'm').exec(text)?.[1] ?? NaN);
    await waitFor(
      async () => {
        text = await (await fetch(`${gw.adminUrl}/metrics`)).text();
        return value('tollgate_credit_leases_open') === 0;
      },
      10_000,
      'every lease closed once its window is over',
    );
    t.ok(value('tollgate_credit_leases_taken_total') >= 1, `leases taken: ${value('tollgate_credit_leases_taken_total')}`);
    t.ok(value('tollgate_credit_lease_draws_total') >= leased.size, `draws: ${value('tollgate_credit_lease_draws_total')}`);
    const holds = mon.seen.filter((l) => l.toLowerCase().startsWith('evalsha') && !l.includes(leaseSettle)).length;
    t.comment(`${passes.length} lease passes carried ${leased.size} settles; ${holds} other credit script calls`);
  });
}

// Lingering passes (`credit.lease_linger_ms`, docs/ledger.md "Lingering passes"): a drawn request's settle
// waits up to the linger for others to share its call, but its response does not wait for it (SPEC §4:
// the settle is not awaited), and the shutdown sends what waits: nothing is unbilled or spooled.
if (redis) {
  t.test('lingering settles: the answer comes first, the debit within the linger, and shutdown loses none', async (t) => {
    const sim = await startSimulator();
    t.teardown(() => sim.close());
    const gw = await startGateway(t, {
      redisUrl: redis.url,
      upstreamUrl: sim.url,
      config: { credit: { hold_margin_seconds: 150, leases: true, lease_linger_ms: 1000 } },
    });
    const acct = 'ls-linger';
    const { key } = await gw.createKey({ account: acct, env: 'live' });
    await gw.grant(acct, 1_000_000_000);
    const body = { model: 'sim-small', messages: [{ role: 'user', content: 'hello there' }], max_tokens: 8 };
    const taken = async () => {
      const text = await (await fetch(`${gw.adminUrl}/metrics`)).text();
      return Number(/^tollgate_credit_leases_taken_total (\d+)/m.exec(text)?.[1] ?? 0);
    };
    // Hot: 8 holds of the bucket before its lease (a slow machine may cross into a new bucket: go on).
    await waitFor(
      async () => {
        t.equal((await chat(gw.url, key, body)).status, 200);
        return (await taken()) >= 1;
      },
      20_000,
      'a lease is taken',
    );
    const debits = async () => (await ledgerOf(gw.admin, acct)).filter((e) => e.kind === 'debit');
    const res = await chat(gw.url, key, body);
    t.equal(res.status, 200);
    await res.json();
    const id = res.headers.get('x-request-id')!;
    t.notOk(
      (await debits()).some((e) => e.request_id === id),
      'answered while its settle still waits for the linger (a second)',
    );
    await debitOf(gw, acct, id, 5000);

    // A crowd, then the shutdown at once: its drain sends the lingering settles, the close gives the lease back.
    const crowd = await Promise.all(Array.from({ length: 6 }, () => chat(gw.url, key, body)));
    const ids = await Promise.all(crowd.map(async (r) => (await r.json(), r.headers.get('x-request-id')!)));
    await gw.close();
    const reader = await createRedisStore({ url: redis.url, commandTimeoutMs: 2000, settledTtlSeconds: 60 });
    t.teardown(() => reader.close());
    const entries: Entry[] = [];
    for (let page; (page = await reader.ledger(acct, entries.at(-1)?.id, 1000)).length > 0;) entries.push(...page);
    const debited = new Set(entries.filter((e) => e.kind === 'debit').map((e) => e.request_id));
    t.ok(
      ids.every((x) => debited.has(x)),
      'every request answered before the shutdown is debited',
    );
    const a = await reader.getAccount(acct);
    t.equal(a.held_micros, 0, 'nothing held: every draw settled and the lease given back');
    t.equal(
      a.balance_micros,
      entries.reduce((s, e) => s + e.amount_micros, 0),
      'balance = Σ ledger',
    );
  });
}
