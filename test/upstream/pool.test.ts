// The upstream pool (SPEC §1.2): least-outstanding pick, passive health with ejection, a back-off that
// doubles while the upstream keeps failing (capped), recovery once the back-off has passed, and a reset
// after a success. The clock is a plain number passed in.
import t from 'tap';
import { compileConfig } from '../../src/config/schema.ts';
import { createUpstreams, type Upstream } from '../../src/upstream/pool.ts';

const ups = (...urls: (string | { url: string; api_key: string })[]) => urls.map((u) => (typeof u === 'string' ? { url: u } : u));
const config = compileConfig(
  {
    models: [
      {
        name: 'a',
        price: { input: 1, output: 1 },
        upstreams: ups('http://10.0.0.1:8000/v1', 'http://10.0.0.2:8000/v1/', 'http://10.0.0.3:9000'),
      },
      {
        name: 'b',
        price: { input: 1, output: 1 },
        upstreams: ups('http://10.0.0.1:8000/v1', { url: 'http://10.0.0.2:8000/v1', api_key: 'other' }),
      },
      { name: 'solo', price: { input: 1, output: 1 }, upstreams: ups({ url: 'https://api.example.com/openai/v1', api_key: 'k1' }) },
    ],
  },
  {},
);
const [A, B, SOLO] = config.models as [(typeof config.models)[0], (typeof config.models)[0], (typeof config.models)[0]];
const NONE: ReadonlySet<Upstream> = new Set();
/** The first three upstreams of a model, typed as present. */
const three = (list: readonly Upstream[]) => list.slice(0, 3) as [Upstream, Upstream, Upstream];

function make(
  t: { teardown(fn: () => unknown): void },
  o: { ejectAfterFailures?: number; ejectSeconds?: number; maxEjectSeconds?: number } = {},
) {
  const u = createUpstreams(config.models, {
    connectTimeoutMs: 100,
    ejectAfterFailures: o.ejectAfterFailures ?? 3,
    ejectSeconds: o.ejectSeconds ?? 10,
    maxEjectSeconds: o.maxEjectSeconds ?? 60,
    maxConnections: 0,
  });
  t.teardown(() => u.close());
  return u;
}

t.test('upstreams carry a host:port label, the base path and the configured credential', async (t) => {
  const u = make(t);
  const [a1, a2, a3] = three(u.of(A));
  t.match(a1, { label: '10.0.0.1:8000', basePath: '/v1', authorization: undefined, outstanding: 0 });
  t.match(a2, { label: '10.0.0.2:8000', basePath: '/v1' }, 'trailing slash removed');
  t.match(a3, { label: '10.0.0.3:9000', basePath: '' });
  t.match(u.of(SOLO)[0], { label: 'api.example.com', basePath: '/openai/v1', authorization: 'Bearer k1' });
});

t.test('one upstream per url + credential, shared across models; one pool per origin', async (t) => {
  const u = make(t);
  t.equal(u.of(A)[0], u.of(B)[0], 'same url, same key: one upstream, one health record');
  t.not(u.of(A)[1], u.of(B)[1], 'same url, another key: another upstream');
  t.equal(u.of(A)[1]!.pool, u.of(B)[1]!.pool, 'but the same connection pool');
  t.equal(u.of(B)[1]!.authorization, 'Bearer other');
});

t.test('least outstanding requests wins; ties rotate; tried upstreams are skipped', async (t) => {
  const u = make(t);
  const [a1, a2, a3] = three(u.of(A));
  a1.outstanding = 5;
  a2.outstanding = 1;
  a3.outstanding = 3;
  for (let i = 0; i < 6; i++) t.equal(u.pick(A, NONE, 0), a2, `pick ${i}: the least loaded, whatever the rotation`);
  t.equal(u.pick(A, new Set([a2]), 0), a3, 'next least loaded when a2 was tried');
  t.equal(u.pick(A, new Set([a2, a3]), 0), a1);
  t.equal(u.pick(A, new Set([a1, a2, a3]), 0), undefined, 'all tried');

  a1.outstanding = a2.outstanding = a3.outstanding = 0;
  const seen = new Set<Upstream | undefined>();
  for (let i = 0; i < 3; i++) seen.add(u.pick(A, NONE, 0));
  t.equal(seen.size, 3, 'idle ties spread over every upstream');
});

t.test('ejection after N consecutive failures, back-off doubling while it keeps failing (capped), recovery after a success', async (t) => {
  const u = make(t, { ejectAfterFailures: 3, ejectSeconds: 10 });
  const [a1, a2, a3] = three(u.of(A));
  a2.outstanding = a3.outstanding = 1; // a1 is the pick whenever it is healthy
  let now = 1_000_000;

  u.failed(a1, now);
  u.failed(a1, now);
  t.equal(u.pick(A, NONE, now), a1, 'two failures: still in');
  u.failed(a1, now);
  t.equal(a1.ejectedUntil, now + 10_000, 'third failure: ejected for eject_seconds');
  t.not(u.pick(A, NONE, now), a1);
  t.not(u.pick(A, NONE, now + 9_999), a1, 'still out 1 ms before the end');
  now += 10_000;
  t.equal(u.pick(A, NONE, now), a1, 'back once the back-off has passed');

  // Keeps failing: on probation (no success since the ejection) one failure re-ejects: 20 s, then 40 s…
  u.failed(a1, now);
  t.equal(a1.ejectedUntil, now + 20_000, 'second ejection: doubled, after one failure');
  now += 20_000;
  u.failed(a1, now);
  t.equal(a1.ejectedUntil, now + 40_000, 'third: doubled again');

  // Capped at max_eject_seconds (60 s here).
  for (let k = 0; k < 10; k++) {
    now = a1.ejectedUntil;
    u.failed(a1, now);
  }
  t.equal(a1.ejectedUntil - now, 60_000, 'the back-off stops at max_eject_seconds');

  // A success resets both the failure count and the back-off.
  now = a1.ejectedUntil;
  u.succeeded(a1);
  t.equal(u.pick(A, NONE, now), a1);
  u.failed(a1, now);
  u.failed(a1, now);
  t.equal(u.pick(A, NONE, now), a1, 'the count restarted from 0');
  u.failed(a1, now);
  t.equal(a1.ejectedUntil, now + 10_000, 'the back-off restarted at eject_seconds');
});

t.test('a success between failures resets the count: only consecutive failures eject', async (t) => {
  const u = make(t, { ejectAfterFailures: 2 });
  const [a1] = three(u.of(A));
  for (let i = 0; i < 10; i++) {
    u.failed(a1, 0);
    u.succeeded(a1);
  }
  t.equal(a1.ejectedUntil, 0, 'never ejected');
});

t.test('every upstream ejected: one half-open trial a second; an upstream shared by two models is ejected for both', async (t) => {
  const u = make(t, { ejectAfterFailures: 1 });
  const [a1, a2, a3] = three(u.of(A));
  u.failed(a1, 0);
  u.failed(a2, 10);
  u.failed(a3, 20);
  t.equal(u.pick(B, NONE, 21), u.of(B)[1], 'model b: only its own-key upstream is left');
  t.equal(u.pick(A, NONE, 30), a1, 'model a: the least recently ejected gets a trial');
  t.equal(u.pick(A, NONE, 31), undefined, 'one trial a second: nothing else to pick');
  t.equal(u.pick(A, NONE, 1029), undefined, 'still nothing 999 ms later');
  t.equal(u.pick(A, new Set([a1]), 1030), a2, 'a request that tried a1 gets the next least recently ejected');
  t.equal(u.pick(A, NONE, 1030), a1, 'a second later: a1 again (its trial did not fail)');
  const back = new Set([0, 1, 2].map(() => u.pick(A, NONE, 10_020)));
  t.equal(back.size, 3, 'all three back after the back-off');
});

t.test('a burst counts once: failures of requests started before the ejection neither count nor re-eject', async (t) => {
  const u = make(t, { ejectAfterFailures: 5, ejectSeconds: 0.5 });
  const [a1] = three(u.of(A));
  // 64 streams in flight on a1 break together (its server restarted).
  const burst = Array.from({ length: 64 }, () => u.start(a1, 1000));
  for (const at of burst) u.succeeded(a1, at); // their headers arrived
  for (const at of burst) u.failed(a1, 5000, at);
  t.equal(a1.ejectedUntil, 5500, 'one ejection of eject_seconds, not 12 doubling ones');
  t.equal(a1.ejections, 1);
  t.equal(a1.failures, 0, 'the rest of the burst counted for nothing');
  // Back after 0.5 s: a request of the new epoch succeeds.
  const next = u.start(a1, 5600);
  u.succeeded(a1, next);
  t.equal(u.pick(A, new Set([u.of(A)[1]!, u.of(A)[2]!]), 5600), a1);
  // A late success of a request from before the ejection says nothing about the upstream now.
  u.failed(a1, 6000);
  u.failed(a1, 6000);
  u.succeeded(a1, burst[0]);
  t.equal(a1.failures, 2, 'an old success does not reset the count');
});

t.test('half-open: a failed trial re-ejects at once (doubled, capped); a successful one ends the ejection', async (t) => {
  const u = make(t, { ejectAfterFailures: 5, ejectSeconds: 0.5, maxEjectSeconds: 2 });
  const solo = u.of(SOLO)[0]!;
  for (let i = 0; i < 5; i++) u.failed(solo, 0);
  t.equal(solo.ejectedUntil, 500);
  // The back-off after failed trials: 1 s, 2 s, then capped at 2 s; a trial goes out every second anyway.
  let now = 100;
  const windows: number[] = [];
  for (let k = 0; k < 4; k++) {
    const trial = u.pick(SOLO, NONE, now);
    t.equal(trial, solo, `trial ${k} at ${now} ms`);
    const at = u.start(solo, now);
    u.failed(solo, now + 10, at);
    windows.push(solo.ejectedUntil - (now + 10));
    t.equal(u.pick(SOLO, NONE, now + 20), undefined, 'no second trial within the second');
    now += 1000;
  }
  t.same(windows, [1000, 2000, 2000, 2000], 'each re-ejection doubles, capped at max_eject_seconds');
  const trial = u.start(solo, now);
  t.equal(u.pick(SOLO, NONE, now), solo);
  u.succeeded(solo, trial);
  t.equal(solo.ejectedUntil, 0, 'a successful trial ends the ejection');
  t.equal(u.pick(SOLO, NONE, now + 1), solo, 'and the model is served again at once');
  t.equal(solo.ejections, 0, 'the back-off restarts from eject_seconds');
});

t.test('a generation timeout counts only when the upstream answered nobody while it waited', async (t) => {
  const u = make(t, { ejectAfterFailures: 2, ejectSeconds: 10 });
  const [a1, a2] = three(u.of(A));
  // Ten long non-streaming requests of one tenant on a1; another tenant's request is answered meanwhile.
  const long = Array.from({ length: 10 }, () => u.start(a1, 0, 'acct-a'));
  const other = u.start(a1, 10);
  a1.answers++; // forward.ts: a 2xx answer's headers
  u.succeeded(a1, other);
  for (const at of long) t.equal(u.generationTimedOut(a1, 300, at), false, 'alive: not counted');
  t.equal(a1.failures, 0);
  t.equal(a1.ejectedUntil, 0, 'not ejected');

  // A 2xx of another upstream proves nothing about this one; answers from before the attempt neither.
  a2.answers++;
  const hung = [u.start(a1, 400, 'acct-a'), u.start(a1, 400, 'acct-a'), u.start(a1, 400, 'acct-a')] as const;
  t.equal(u.generationTimedOut(a1, 700, hung[0]), true, 'nobody answered while it waited: counted');
  t.equal(u.generationTimedOut(a1, 700, hung[1]), true);
  t.equal(a1.ejectedUntil, 10_700, 'ejected as a hung upstream');
  // The rules of failed() hold for it: the rest of the burst counts for nothing.
  t.equal(u.generationTimedOut(a1, 900, hung[2]), true);
  t.equal(a1.ejections, 1, 'one ejection for the burst');
});

t.test("an ejection one account's generation timeouts alone caused stands for that account only", async (t) => {
  const u = make(t, { ejectAfterFailures: 2, ejectSeconds: 10 });
  const solo = u.of(SOLO)[0]!;
  // Long generations of account x on an upstream nobody else uses: counted, and blamed on x.
  for (const at of [u.start(solo, 0, 'x'), u.start(solo, 0, 'x')]) t.equal(u.generationTimedOut(solo, 300, at), true);
  t.equal(solo.ejectedUntil, 10_300, 'ejected');
  t.equal(solo.ejectedFor, 'x', 'for x alone');
  t.equal(u.pick(SOLO, NONE, 400, 'x'), solo, "x's half-open trial");
  t.equal(u.pick(SOLO, NONE, 401, 'x'), undefined, 'x: one trial a second');
  t.equal(u.pick(SOLO, NONE, 401), undefined, 'a request of no account: every ejection stands');
  for (let i = 0; i < 3; i++) t.equal(u.pick(SOLO, NONE, 402 + i, 'y'), solo, 'y: still served, no trial limit');
  // x's failed trial re-ejects it, still for x alone.
  t.equal(u.generationTimedOut(solo, 800, u.start(solo, 500, 'x')), true);
  t.equal(solo.ejectedFor, 'x');
  t.equal(solo.ejectedUntil, 20_800, 'doubled');
  // y's answer proves life: the ejection ends for everyone.
  const y = u.start(solo, 900);
  solo.answers++;
  u.succeeded(solo, y);
  t.equal(solo.ejectedUntil, 0);
  t.equal(u.pick(SOLO, NONE, 901, 'x'), solo, 'x is served again too');
});

t.test('a hang seen by a second account, or any other failure, ejects for everyone', async (t) => {
  const u = make(t, { ejectAfterFailures: 2, ejectSeconds: 10 });
  const [a1, a2, a3] = three(u.of(A));
  // a1: ejected for x; y's request, sent there only once no clean upstream is left, times out too.
  for (const at of [u.start(a1, 0, 'x'), u.start(a1, 0, 'x')]) u.generationTimedOut(a1, 300, at);
  t.equal(a1.ejectedFor, 'x');
  t.not(u.pick(A, NONE, 400, 'y'), a1, 'y: the clean upstreams first');
  t.equal(u.pick(A, new Set([a2, a3]), 400, 'y'), a1, 'then the one ejected for x');
  t.equal(u.generationTimedOut(a1, 700, u.start(a1, 400, 'y')), true, "y's timeout counts at once (probation)");
  t.equal(a1.ejectedFor, null, 'a second account: ejected for everyone');
  t.equal(a1.ejectedUntil, 20_700, 'doubled');
  t.equal(u.pick(A, new Set([a2, a3]), 800, 'y'), a1, "y: a half-open trial now, as everyone's");
  t.equal(u.pick(A, new Set([a2, a3]), 801, 'y'), undefined, 'one a second');
  // a2: one timeout of x, then a refused connection of x's: the streak is the upstream's, for everyone.
  u.generationTimedOut(a2, 300, u.start(a2, 0, 'x'));
  u.failedForEveryone(a2, 310, u.start(a2, 305, 'x'));
  t.equal(a2.ejectedFor, null);
  // a3: x's timeouts with y's before them (no success between): for everyone.
  u.generationTimedOut(a3, 300, u.start(a3, 0, 'y'));
  u.generationTimedOut(a3, 300, u.start(a3, 0, 'x'));
  t.equal(a3.ejectedFor, null);
  t.ok(a3.ejectedUntil > 300);
  // A success starts a fresh streak: x's timeouts then eject for x alone again.
  const s = u.start(a3, 30_000);
  u.succeeded(a3, s);
  for (const at of [u.start(a3, 30_000, 'x'), u.start(a3, 30_000, 'x')]) u.generationTimedOut(a3, 30_300, at);
  t.equal(a3.ejectedFor, 'x');
});

t.test("an ejection one account's answered failures alone caused stands for that account only", async (t) => {
  const u = make(t, { ejectAfterFailures: 2, ejectSeconds: 10 });
  const solo = u.of(SOLO)[0]!;
  // x's requests answered 500 (or 429, or broken after their headers): blamed on x.
  u.failed(solo, 10, u.start(solo, 0, 'x'));
  t.equal(solo.ejectedUntil, 0, 'one failure: not ejected');
  u.failed(solo, 20, u.start(solo, 15, 'x'));
  t.equal(solo.ejectedUntil, 10_020, 'ejected');
  t.equal(solo.ejectedFor, 'x', 'for x alone');
  t.equal(u.pick(SOLO, NONE, 100, 'x'), solo, "x's half-open trial");
  t.equal(u.pick(SOLO, NONE, 101, 'x'), undefined, 'x: one trial a second');
  for (let i = 0; i < 3; i++) t.equal(u.pick(SOLO, NONE, 102 + i, 'y'), solo, 'y: still served, no trial limit');
  // x's failed trial re-ejects it, still for x alone, doubled.
  u.failed(solo, 200, u.start(solo, 150, 'x'));
  t.equal(solo.ejectedFor, 'x');
  t.equal(solo.ejectedUntil, 20_200, 'doubled');
  // y's answer (any status below 500 but 429, forward.ts) ends the ejection for everyone.
  u.succeeded(solo, u.start(solo, 300, 'y'));
  t.equal(solo.ejectedUntil, 0);
  t.equal(solo.ejections, 0, 'off probation');
  t.equal(u.pick(SOLO, NONE, 301, 'x'), solo, 'x is served again too');
  // A success between x's failures: no streak at all.
  u.failed(solo, 400, u.start(solo, 400, 'x'));
  u.succeeded(solo, u.start(solo, 400, 'y'));
  u.failed(solo, 410, u.start(solo, 405, 'x'));
  t.equal(solo.ejectedUntil, 0, 'not ejected');
});

t.test("a second account failing on an upstream ejected for one makes it everyone's (dead upstream)", async (t) => {
  const u = make(t, { ejectAfterFailures: 2, ejectSeconds: 10 });
  const [a1, a2, a3] = three(u.of(A));
  // a1 answers everyone 500: x's failures eject it for x; y's first request there fails too.
  u.failed(a1, 10, u.start(a1, 0, 'x'));
  u.failed(a1, 20, u.start(a1, 0, 'x'));
  t.equal(a1.ejectedFor, 'x');
  t.equal(u.pick(A, new Set([a2, a3]), 30, 'y'), a1, 'y: the one ejected for x, once no clean upstream is left');
  u.failed(a1, 40, u.start(a1, 30, 'y'));
  t.equal(a1.ejectedFor, null, 'a second account: ejected for everyone');
  t.equal(a1.ejectedUntil, 20_040, 'at once (probation), doubled');
  t.equal(u.pick(A, new Set([a2, a3]), 1100, 'y'), a1, "y: a half-open trial now, as everyone's");
  t.equal(u.pick(A, new Set([a2, a3]), 1101, 'y'), undefined, 'one a second');
  t.equal(u.pick(A, new Set([a2, a3]), 1102, 'x'), undefined, 'for x too');
  // a2: an answered failure of x, then x's refused connection: the upstream's, for everyone.
  u.failed(a2, 10, u.start(a2, 0, 'x'));
  u.failedForEveryone(a2, 20, u.start(a2, 0, 'x'));
  t.equal(a2.ejectedFor, null);
  t.ok(a2.ejectedUntil > 20);
  // a3: x's answered failures and x's counted generation timeouts are x's alike.
  u.failed(a3, 10, u.start(a3, 0, 'x'));
  t.equal(u.generationTimedOut(a3, 300, u.start(a3, 0, 'x')), true);
  t.equal(a3.ejectedFor, 'x');
  // A failure without an attempt (or an attempt without an account) is everyone's.
  const solo = u.of(SOLO)[0]!;
  u.failed(solo, 10, u.start(solo, 0, 'x'));
  u.failed(solo, 20);
  t.equal(solo.ejectedFor, null);
});
