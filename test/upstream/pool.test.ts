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

function make(t: { teardown(fn: () => unknown): void }, o: { ejectAfterFailures?: number; ejectSeconds?: number } = {}) {
  const u = createUpstreams(config.models, {
    connectTimeoutMs: 100,
    ejectAfterFailures: o.ejectAfterFailures ?? 3,
    ejectSeconds: o.ejectSeconds ?? 10,
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

t.test('ejection after N consecutive failures, back-off doubling while it keeps failing, recovery after it', async (t) => {
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

  // Keeps failing: 20 s, then 40 s…
  for (let i = 0; i < 3; i++) u.failed(a1, now);
  t.equal(a1.ejectedUntil, now + 20_000, 'second ejection: doubled');
  now += 20_000;
  for (let i = 0; i < 3; i++) u.failed(a1, now);
  t.equal(a1.ejectedUntil, now + 40_000, 'third: doubled again');

  // Capped at 2^5 × eject_seconds.
  for (let k = 0; k < 10; k++) {
    now = a1.ejectedUntil;
    for (let i = 0; i < 3; i++) u.failed(a1, now);
  }
  t.equal(a1.ejectedUntil - now, 32 * 10_000, 'the back-off stops doubling at 32×');

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

t.test('every upstream ejected: nothing to pick; an upstream shared by two models is ejected for both', async (t) => {
  const u = make(t, { ejectAfterFailures: 1 });
  for (const up of u.of(A)) u.failed(up, 0);
  t.equal(u.pick(A, NONE, 1), undefined);
  t.equal(u.pick(B, NONE, 1), u.of(B)[1], 'model b: only its own-key upstream is left');
  const back = new Set([0, 1, 2].map(() => u.pick(A, NONE, 10_000)));
  t.equal(back.size, 3, 'all three back after the back-off');
});
