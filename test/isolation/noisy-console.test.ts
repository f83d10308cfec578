// SPEC §13 against one account's console pages. A member's usage page reads up to 50,000 stored counters
// and renders them (docs/console.md "The read is bounded"): ~100 ms of the event loop a load. Nothing
// limited how many a member ran at once: 16 tabs reloading it together held a victim account's requests
// behind all of them (p50 1 → 213 ms, p99 1.07 s on a quiet box, the gateway in-process), and one load
// held the loop up to ~110 ms in one piece. Now a member's console requests take turns per account (one
// at a time, sixteen waiting, then 429: console/setup.ts), and the page reads a day's counters a slice
// at a time and renders in turns of its own (store/usage-fields.ts). The victim and /healthz are measured
// against their own baseline while 24 tabs of one member reload the page.
import t from 'tap';
import { setTimeout as sleep } from 'node:timers/promises';
import { ADMIN_TOKEN } from '../helpers/gateway.ts';
import { assertLatency, baseline, describe, healthzLoad, startNoisyStack, victimLoad } from './noisy-fixture.ts';

/** console/setup.ts CONSOLE_RUNNING_PER_ACCOUNT + CONSOLE_WAITING_PER_ACCOUNT, as docs/console.md states them. */
const ADMITTED = 1 + 16;
const TABS = 24;
const CELLS = 8_000; // 40,000 counters: inside the page's bound, so every load reads them all

const stack = await startNoisyStack(t);

if (stack) {
  const { gw, redis } = stack;
  const victimKey = await stack.victim();

  t.test('24 tabs of one member on a full usage page: the others do not wait, the tabs past the line get 429', async (t) => {
    const day = new Date().toISOString().slice(0, 10);
    const fields: string[] = [];
    for (let i = 0; i < CELLS; i++)
      for (const c of ['r', 'p', 'c', '$', 'k']) fields.push(`key_${String(i).padStart(22, '0')}|sim-small|${c}`, String(i + 1));
    await redis.client.hset(`{acct:big}:usage:${day}`, ...fields);
    await redis.client.expire(`{acct:big}:usage:${day}`, 86_400);

    const link = await fetch(`${gw.adminUrl}/admin/console/sessions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ account: 'big' }),
    }).then((r) => r.json() as Promise<{ url: string }>);
    const cookie = (await fetch(link.url, { redirect: 'manual' })).headers.get('set-cookie')!.split(';')[0]!;
    const page = () => fetch(`${gw.url}/console/accounts/big/usage`, { headers: { cookie }, signal: AbortSignal.timeout(30_000) });
    const first = await page();
    const text = await first.text();
    t.equal(first.status, 200);
    t.match(text, new RegExp(`id="total-requests">${(CELLS * (CELLS + 1)) / 2}<`), 'the page sums every counter stored');

    const base = await baseline(gw, victimKey, 2000);
    let done!: () => void;
    const stop = new Promise<void>((r) => (done = r));
    const loads = Promise.all([victimLoad(gw, victimKey, stop, 60_000), healthzLoad(gw, stop, 60_000)]);
    await sleep(200);
    // Every tab at once, three times: each round has TABS requests in the gateway together.
    const statuses: Record<number, number> = {};
    const refusals: Response[] = [];
    for (let round = 0; round < 3; round++) {
      const replies = await Promise.all(Array.from({ length: TABS }, page));
      for (const r of replies) {
        statuses[r.status] = (statuses[r.status] ?? 0) + 1;
        if (r.status === 429) refusals.push(r);
        await r.arrayBuffer();
      }
    }
    await sleep(200);
    done();
    const [victim, healthz] = await loads;
    t.comment(`tabs: ${JSON.stringify(statuses)}; victim ${describe(victim)}; /healthz ${describe(healthz)}`);

    t.same(Object.keys(statuses).sort(), ['200', '429'], 'each tab is served or refused, nothing else');
    t.ok(statuses[200]! >= 3 * ADMITTED, `at least ${ADMITTED} tabs a round served (${statuses[200]})`);
    t.ok(statuses[429]! >= 1, 'the tabs past the line are refused');
    t.ok(
      refusals.every((r) => r.headers.get('retry-after') === '1' && r.headers.get('x-error-code') === 'concurrency_limit_exceeded'),
      'a refusal says when to come back, with its code',
    );
    t.equal(victim.ok, victim.total, 'every victim request served');
    assertLatency(t, base, victim, healthz);
  });
}
