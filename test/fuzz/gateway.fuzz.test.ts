// A seeded, bounded fuzz of a running gateway (SPEC §12, §3): hostile request bodies, headers, slugs
// and admin bodies over real HTTP against the simulator. Properties: never a 500 (nor any status the
// route does not define), every error in the SPEC §3 shape with a known code, x-request-id on every
// response, no key echoed, the process answering /healthz, the heap not left grown, and the ledger
// exact (balance = Σ entries, one debit per request id).
//   FUZZ_SEED=<n> picks another seed; FUZZ_RUNS=<n> scales every property's run count (default 1 = CI).
import t from 'tap';
import fc from 'fast-check';
import { request } from 'node:http';
import { ERROR_CODES } from '../../src/http/errors.ts';
import { startGateway, ADMIN_TOKEN, type TestGateway } from '../helpers/gateway.ts';
import { startSim, ledger } from '../e2e/chat-fixture.ts';
import { startRedis } from '../helpers/redis.ts';

const SEED = Number(process.env.FUZZ_SEED ?? 20261124);
const SCALE = Number(process.env.FUZZ_RUNS ?? 1);
const runs = (n: number) => Math.max(1, Math.round(n * SCALE));
const KNOWN = new Set(Object.keys(ERROR_CODES));

interface Reply {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  text: string;
}

/** Raw HTTP: any method, path, headers and bytes (fetch would refuse some of them). */
function send(base: string, method: string, path: string, headers: Record<string, string>, body?: Buffer | string): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const req = request(`${base}${path}`, { method, headers, agent: false }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (text += c));
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, text }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

/** The checks every response must pass; `allowed` is the route's defined statuses. */
function check(r: Reply, allowed: readonly number[], secrets: readonly string[]): void {
  if (!allowed.includes(r.status)) throw new Error(`status ${r.status} not in ${allowed.join(',')}: ${r.text.slice(0, 300)}`);
  if (typeof r.headers['x-request-id'] !== 'string') throw new Error('no x-request-id');
  for (const s of secrets) if (r.text.includes(s)) throw new Error('a key was echoed');
  if (r.status < 400) return;
  const body = JSON.parse(r.text) as { detail?: unknown; error?: { code?: unknown; message?: unknown; type?: unknown; param?: unknown } };
  if (r.status === 422 && Array.isArray(body.detail)) {
    for (const d of body.detail as Record<string, unknown>[]) {
      for (const f of ['loc', 'msg', 'type', 'input', 'ctx']) if (!(f in d)) throw new Error(`422 detail without ${f}`);
    }
    return;
  }
  const e = body.error;
  if (!e || typeof e.code !== 'string' || !KNOWN.has(e.code) || typeof e.message !== 'string' || !('param' in e) || !('type' in e)) {
    throw new Error(`not an OpenAI error envelope with a known code: ${r.text.slice(0, 300)}`);
  }
}

/** Numbers an attacker picks for counts: edges, huge, negative, fractional, not numbers at all. */
const hostileNumber = fc.oneof(
  fc.constantFrom(0, 1, -1, 8, 9, 256, 2 ** 31, 2 ** 53 - 1, 2 ** 53, 2 ** 53 + 2, 1e308, -1e308, 0.5, 1.0000001),
  fc.integer(),
  fc.double(),
  fc.string({ maxLength: 5 }),
  fc.constant(null),
  fc.boolean(),
  fc.constant([]),
  fc.constant({}),
);
const anyJson = fc.jsonValue({ maxDepth: 3 });
const role = fc.oneof(fc.constantFrom('system', 'developer', 'user', 'assistant', 'tool'), fc.string({ maxLength: 8 }), anyJson);
const content = fc.oneof(
  fc.string({ maxLength: 200 }),
  fc.string({ unit: 'binary', maxLength: 50 }),
  fc.constant(null),
  fc.array(fc.record({ type: fc.constantFrom('text', 'image_url', 'x'), text: fc.string({ maxLength: 20 }) }, { requiredKeys: [] }), {
    maxLength: 3,
  }),
  anyJson,
);
const message = fc.oneof(
  fc.record({ role, content, name: fc.string({ maxLength: 5 }), tool_calls: anyJson }, { requiredKeys: ['role'] }),
  anyJson,
);
const wildBody = fc.record(
  {
    model: fc.oneof(fc.constantFrom('sim-small', 'sim-free', 'nope', ''), anyJson),
    messages: fc.oneof(fc.array(message, { maxLength: 4 }), anyJson),
    stream: fc.oneof(fc.boolean(), anyJson),
    stream_options: fc.oneof(fc.record({ include_usage: fc.oneof(fc.boolean(), anyJson) }), anyJson),
    max_tokens: hostileNumber,
    max_completion_tokens: hostileNumber,
    n: hostileNumber,
    temperature: hostileNumber,
    constructor: anyJson,
    sim: fc.oneof(fc.record({ tokens: fc.integer({ min: 0, max: 40 }), usage: fc.constantFrom('present', 'absent', 'zero') }), anyJson),
  },
  { requiredKeys: [] },
);
/** Mostly a valid request with a few hostile fields, so inputs reach the limiter, the hold and the relay. */
const validMessage = fc.record({
  role: fc.constantFrom('system', 'user', 'assistant'),
  content: fc.oneof(fc.string({ maxLength: 100 }), fc.string({ unit: 'binary', maxLength: 30 })),
});
const nearValidBody = fc
  .record({
    model: fc.constantFrom('sim-small', 'sim-free'),
    messages: fc.array(validMessage, { minLength: 1, maxLength: 3 }),
    stream: fc.boolean(),
    sim: fc.record({
      tokens: fc.integer({ min: 0, max: 40 }),
      usage: fc.constantFrom('present', 'absent', 'zero'),
      ignore_max_tokens: fc.boolean(),
    }),
  })
  .chain((base) =>
    fc
      .record(
        {
          max_tokens: hostileNumber,
          max_completion_tokens: hostileNumber,
          n: hostileNumber,
          temperature: hostileNumber,
          stream_options: anyJson,
          seed: hostileNumber,
        },
        { requiredKeys: [] },
      )
      .map((extra) => ({ ...base, ...extra })),
  );
const chatBody = fc.oneof({ weight: 3, arbitrary: nearValidBody }, { weight: 1, arbitrary: wildBody });

/** The JSON text of a value, sometimes mangled (truncated, invalid UTF-8, deep nesting, not JSON). */
const bodyText = (value: fc.Arbitrary<unknown>) =>
  fc.oneof(
    { weight: 6, arbitrary: value.map((v) => Buffer.from(JSON.stringify(v) ?? 'null')) },
    { weight: 1, arbitrary: value.map((v) => Buffer.from((JSON.stringify(v) ?? '').slice(0, -3))) },
    { weight: 1, arbitrary: fc.uint8Array({ maxLength: 64 }).map((b) => Buffer.from(b)) },
    { weight: 1, arbitrary: fc.integer({ min: 1, max: 50_000 }).map((n) => Buffer.from('['.repeat(n) + ']'.repeat(n))) },
    { weight: 1, arbitrary: fc.constant(Buffer.from([0x7b, 0x22, 0xff, 0xfe, 0x22, 0x3a, 0x31, 0x7d])) },
    // An own __proto__ key (an object literal would set the prototype instead of sending the key).
    {
      weight: 1,
      arbitrary: value.map((v) =>
        Buffer.from(`{"__proto__":{"polluted":true,"model":"sim-small"},${(JSON.stringify(v) ?? '{}').slice(1) || '}'}`),
      ),
    },
  );

const sim = await startSim(t);
// On real Redis where there is one (production's store: the rate limiter and the Lua scripts see the
// inputs), else the embedded store.
const redis = await startRedis(t);
const gw: TestGateway = await startGateway(t, {
  upstreamUrl: sim.url,
  ...(redis && { redisUrl: redis.url }),
  // The limiters are tested on their own: here they would only turn most inputs into 429s.
  // The test key keeps a token limit: a huge max_tokens must not break its window (it gave 500s).
  config: {
    rate_limits: { test: { requests_per_minute: 10_000_000, tokens_per_minute: 1_000_000_000 } },
    auth: { failed_per_minute: 1_000_000, admin_failed_per_minute: 1_000_000 },
  },
});
const live = await gw.createKey({ account: 'fuzz', env: 'live' });
const test = await gw.createKey({ account: 'fuzz', env: 'test' });
await gw.grant('fuzz', 1_000_000_000);
const secrets = [live.key, test.key, ADMIN_TOKEN];
const heapBefore = process.memoryUsage().heapUsed;
const CHAT = [200, 401, 402, 403, 404, 413, 415, 422, 429, 503];

t.test('chat bodies: never a 500, errors in the SPEC shape, ledger exact', async (t) => {
  const keys = fc.constantFrom(live.key, test.key);
  await fc.assert(
    fc.asyncProperty(keys, bodyText(chatBody), async (key, body) => {
      const r = await send(
        gw.url,
        'POST',
        '/v1/chat/completions',
        { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body,
      );
      check(r, CHAT, secrets);
    }),
    { seed: SEED, numRuns: runs(300) },
  );
  const entries = await ledger(gw, 'fuzz');
  const account = (await gw.admin('/admin/accounts/fuzz')).body as { balance_micros: number; held_micros: number };
  t.equal(
    account.balance_micros,
    entries.reduce((s, e) => s + e.amount_micros, 0),
    'balance = Σ ledger',
  );
  const debits = entries.filter((e) => e.kind === 'debit').map((e) => e.request_id);
  t.equal(new Set(debits).size, debits.length, 'no request debited twice');
  t.ok(account.balance_micros >= 0, 'never below zero');
});

t.test('headers: content types, credentials and odd values', async (t) => {
  const header = fc.record(
    {
      'content-type': fc.oneof(
        fc.constantFrom('application/json', 'application/json; charset=utf-8', 'APPLICATION/JSON', 'text/plain', 'application/jsonx', ''),
        fc.string({ maxLength: 30 }).filter((s) => /^[\t\x20-\x7e]*$/.test(s)),
      ),
      authorization: fc.oneof(
        fc.constantFrom(
          `Bearer ${live.key}`,
          `bearer ${test.key}`,
          `Bearer ${live.key}x`,
          'Bearer',
          'Basic abc',
          `Bearer  ${test.key} `,
          'Bearer svc-live-' + 'A'.repeat(32),
        ),
        fc
          .string({ maxLength: 60 })
          .filter((s) => /^[\t\x20-\x7e]*$/.test(s))
          .map((s) => `Bearer ${s}`),
      ),
      'x-request-id': fc.string({ maxLength: 200 }).filter((s) => /^[\x20-\x7e]*$/.test(s)),
      'x-forwarded-for': fc.constantFrom('1.2.3.4', 'garbage', '::1, 10.0.0.1'),
    },
    { requiredKeys: [] },
  );
  const path = fc.constantFrom('/v1/chat/completions', '/v1/models', '/v1/shares');
  const method = fc.constantFrom('GET', 'POST', 'DELETE', 'PUT', 'PATCH', 'OPTIONS');
  await fc.assert(
    fc.asyncProperty(method, path, header, async (m, p, h) => {
      const body =
        m === 'GET' || m === 'DELETE' || m === 'OPTIONS'
          ? undefined
          : JSON.stringify({ model: 'sim-free', messages: [{ role: 'user', content: 'hi' }], snapshot: { messages: [] } });
      const r = await send(gw.url, m, p, h as Record<string, string>, body);
      check(r, [200, 201, 401, 402, 403, 404, 405, 413, 415, 422, 429], secrets);
    }),
    { seed: SEED, numRuns: runs(200) },
  );
});

t.test('slugs: any bytes, any length, percent-encoded', async (t) => {
  const slug = fc.oneof(
    fc.stringMatching(/^[1-9A-HJ-NP-Za-km-z]{20,24}$/),
    fc.string({ unit: 'binary', maxLength: 40 }),
    fc.uint8Array({ maxLength: 30 }).map((b) => [...b].map((x) => `%${x.toString(16).padStart(2, '0')}`).join('')),
  );
  await fc.assert(
    fc.asyncProperty(slug, async (s) => {
      const path = `/v1/shares/${/%[0-9a-f]{2}/.test(s) ? s : encodeURIComponent(s)}`;
      const r = await send(gw.url, 'GET', path, {});
      check(r, [200, 400, 404, 410, 422, 429], secrets);
    }),
    { seed: SEED, numRuns: runs(200) },
  );
});

t.test('admin bodies: keys, patches, grants, shares', async (t) => {
  const routes = fc.constantFrom(
    ['POST', '/admin/keys'],
    ['PATCH', `/admin/keys/${live.id}`],
    ['PATCH', '/admin/keys/key_nope'],
    ['POST', '/admin/accounts/fuzz-admin/credits'],
    ['POST', '/admin/accounts/bad%20id/credits'],
    ['POST', '/admin/shares'],
  );
  const adminBody = fc.record(
    {
      account: fc.oneof(fc.constantFrom('acme', 'fuzz-admin', '', 'a'.repeat(200), '{acct:x}'), anyJson),
      env: fc.oneof(fc.constantFrom('live', 'test', 'prod'), anyJson),
      name: fc.oneof(fc.string({ maxLength: 300 }), anyJson),
      scopes: fc.oneof(fc.array(fc.constantFrom('chat', 'models', 'shares', 'admin')), anyJson),
      models: fc.oneof(fc.array(fc.constantFrom('sim-small', 'gpt-5')), anyJson),
      rate_limits: fc.oneof(
        fc.record({ requests_per_minute: hostileNumber, tokens_per_minute: hostileNumber }, { requiredKeys: [] }),
        anyJson,
      ),
      active: fc.oneof(fc.boolean(), anyJson),
      amount_micros: hostileNumber,
      idempotency_key: fc.oneof(fc.string({ maxLength: 300 }), anyJson),
      note: fc.oneof(fc.string({ maxLength: 2000 }), anyJson),
      snapshot: fc.oneof(fc.record({ messages: fc.array(message, { maxLength: 2 }) }), anyJson),
      files: fc.oneof(
        fc.array(fc.record({ name: fc.string({ maxLength: 20 }), content_type: fc.string({ maxLength: 20 }), size: hostileNumber }), {
          maxLength: 3,
        }),
        anyJson,
      ),
    },
    { requiredKeys: [] },
  );
  await fc.assert(
    fc.asyncProperty(routes, bodyText(adminBody), async ([m, p], body) => {
      const r = await send(gw.adminUrl, m!, p!, { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' }, body);
      check(
        r,
        [200, 201, 404, 413, 415, 422, 429],
        secrets.filter((s) => s !== ADMIN_TOKEN),
      );
    }),
    { seed: SEED, numRuns: runs(200) },
  );
  const a = (await gw.admin('/admin/accounts/fuzz-admin')).body as { balance_micros: number };
  const entries = await ledger(gw, 'fuzz-admin');
  t.equal(
    a.balance_micros,
    entries.reduce((s, e) => s + e.amount_micros, 0),
    'grants: balance = Σ ledger',
  );
});

t.test('afterwards: the process answers and the heap is not left grown', async (t) => {
  t.equal((await fetch(`${gw.adminUrl}/healthz`)).status, 200);
  const grown = process.memoryUsage().heapUsed - heapBefore;
  t.ok(grown < 100e6, `heap grew by ${Math.round(grown / 1e6)} MB over the run (test process and gateway share it)`);
});
