// Cached-input pricing (SPEC §4 "Cached input", §15; issue 28 item 3), live requests against the simulator
// steered to report cached prompt tokens: each debit is exactly
// ceil((prompt − cached) × input + cached × cached_input + completion × output) micro-credits, chat and
// Responses, streaming and not; the ledger entry, the usage rows, the rebuild and the export carry
// cached_tokens; a model without cached_input bills exactly as before (cached tokens at the input price).
import t from 'tap';
import { createLedgerExporter } from '../../src/ledger/exporter.ts';
import { createLogger } from '../../src/obs/logger.ts';
import { startGateway, testConfigDoc, type TestGateway } from '../helpers/gateway.ts';
import { startRedis } from '../helpers/redis.ts';
import { startS3 } from '../helpers/s3.ts';
import { waitFor } from '../helpers/wait.ts';
import { exportedLines, sinkFor } from '../ledger/support.ts';
import { checkBooks, ledger, startSim, usageOf, waitForDebit } from './chat-fixture.ts';

/** Prices in 1e-6 micro-credits per token, as the config below says them. */
const CACHED = { input: 1_500_000n, cached: 375_000n, output: 2_250_000n };
const PLAIN = { input: 1_500_000n, cached: 1_500_000n, output: 2_250_000n };

function expected(p: typeof CACHED, prompt: number, completion: number, cached: number): number {
  const total = BigInt(prompt - cached) * p.input + BigInt(cached) * p.cached + BigInt(completion) * p.output;
  return Number((total + 999_999n) / 1_000_000n);
}

function config(upstreamUrl: string): Record<string, unknown> {
  const base = testConfigDoc(upstreamUrl).models as Record<string, unknown>[];
  return {
    usage: { flush_interval_ms: 100 },
    models: [
      ...base,
      {
        name: 'sim-cached',
        upstream_model: 'sim/cached',
        max_output_tokens: 256,
        price: { input: 1.5, output: 2.25, cached_input: 0.375 },
        upstreams: [{ url: upstreamUrl }],
      },
    ],
  };
}

const LONG = 'Repeat after me, a long shared system prompt that a prefix cache would keep around for the next turn. '.repeat(8);

interface Call {
  requestId: string;
  prompt: number;
  completion: number;
  cached: number;
}

async function chat(gw: TestGateway, key: string, model: string, cached: number, stream: boolean): Promise<Call> {
  const body = {
    model,
    messages: [{ role: 'user', content: LONG }],
    ...(stream && { stream: true, stream_options: { include_usage: true } }),
  };
  const res = await fetch(`${gw.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { ...gw.auth(key), 'content-type': 'application/json', 'x-sim-cached-tokens': String(cached), 'x-sim-tokens': '7' },
    body: JSON.stringify(body),
  });
  if (res.status !== 200) throw new Error(`chat ${res.status}: ${await res.text()}`);
  const text = await res.text();
  const usage = usageOf(text, stream);
  return {
    requestId: res.headers.get('x-request-id')!,
    prompt: usage.prompt_tokens,
    completion: usage.completion_tokens,
    cached: usage.prompt_tokens_details.cached_tokens,
  };
}

async function responses(gw: TestGateway, key: string, model: string, cached: number, stream: boolean): Promise<Call> {
  const res = await fetch(`${gw.url}/v1/responses`, {
    method: 'POST',
    headers: { ...gw.auth(key), 'content-type': 'application/json', 'x-sim-cached-tokens': String(cached), 'x-sim-tokens': '5' },
    body: JSON.stringify({ model, input: LONG, store: false, ...(stream && { stream: true }) }),
  });
  if (res.status !== 200) throw new Error(`responses ${res.status}: ${await res.text()}`);
  const text = await res.text();
  const usage = stream
    ? JSON.parse(
        text
          .split('\n')
          .filter((l) => l.startsWith('data: {') && l.includes('"response.completed"'))
          .at(-1)!
          .slice(6),
      ).response.usage
    : JSON.parse(text).usage;
  return {
    requestId: res.headers.get('x-request-id')!,
    prompt: usage.input_tokens,
    completion: usage.output_tokens,
    cached: usage.input_tokens_details.cached_tokens,
  };
}

const redis = await startRedis(t);
const stores: [string, string | undefined][] = [
  ['embedded store', undefined],
  ...(redis ? [['redis', redis.url] as [string, string]] : []),
];

for (const [kind, redisUrl] of stores) {
  t.test(kind, async (t) => {
    const sim = await startSim(t);
    const gw = await startGateway(t, { upstreamUrl: sim.url, config: config(sim.url), ...(redisUrl !== undefined && { redisUrl }) });
    const account = `cache-${kind.replace(/\W/g, '')}-${Date.now()}`;
    const { key, id: keyId } = await gw.createKey({ account, env: 'live' });
    await gw.grant(account, 100_000_000);

    const calls: (Call & { model: string; price: typeof CACHED })[] = [];
    t.test('each live request is debited exactly, cached tokens at cached_input, and the entry carries them', async (t) => {
      for (const [what, run] of [
        ['chat', (m: string, k: number) => chat(gw, key, m, k, false)],
        ['chat stream', (m: string, k: number) => chat(gw, key, m, k, true)],
        ['responses', (m: string, k: number) => responses(gw, key, m, k, false)],
        ['responses stream', (m: string, k: number) => responses(gw, key, m, k, true)],
      ] as const) {
        for (const [model, price] of [
          ['sim-cached', CACHED],
          ['sim-small', PLAIN],
        ] as const) {
          const c = await run(model, 3 + calls.length * 11);
          t.ok(c.cached > 0 && c.cached < c.prompt, `${what} ${model}: the upstream reported ${c.cached} of ${c.prompt} cached`);
          const e = await waitForDebit(gw, account, c.requestId);
          const cost = expected(price, c.prompt, c.completion, c.cached);
          t.equal(e.amount_micros, -cost, `${what} ${model}: debit ${cost}`);
          t.equal(e.cached_tokens, c.cached, `${what} ${model}: the entry carries cached_tokens`);
          t.equal(e.prompt_tokens, c.prompt, 'prompt_tokens is the whole prompt, cached part included');
          if (model === 'sim-small') {
            // Without cached_input: exactly ceil(prompt × input + completion × output), as before.
            t.equal(cost, expected(PLAIN, c.prompt, c.completion, 0), 'the same cost as without cached tokens');
          } else {
            t.ok(cost < expected(PLAIN, c.prompt, c.completion, 0), 'cheaper than at the input price');
          }
          calls.push({ ...c, model, price });
        }
      }
      // A request without cached tokens writes no cached_tokens field (as entries before this feature).
      const plain = await fetch(`${gw.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { ...gw.auth(key), 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'sim-cached', messages: [{ role: 'user', content: 'hi' }] }),
      });
      t.equal(plain.status, 200);
      const e = await waitForDebit(gw, account, plain.headers.get('x-request-id')!);
      t.equal(e.cached_tokens, undefined, 'no cached tokens: no field');
      // The request log line carries them too.
      const first = calls[0]!;
      const line = await waitFor(
        () => gw.logs.map((l) => JSON.parse(l)).find((l) => l.request_id === first.requestId && l.cost_micros !== undefined),
        3000,
        'the log line',
      );
      t.equal(line.cached_tokens, first.cached, 'the log line has cached_tokens');
      await checkBooks(t, gw, account);
    });

    t.test('usage rows, their rebuild and the ledger export carry cached_tokens', async (t) => {
      const want = (model: string) => calls.filter((c) => c.model === model).reduce((n, c) => n + c.cached, 0);
      const rowsOf = async () => {
        const r = await gw.admin(`/admin/accounts/${account}/usage?group_by=key,model`);
        t.equal(r.status, 200);
        return r.body.rows as { key_id: string; model: string; cached_tokens: number; prompt_tokens: number }[];
      };
      let rows = await rowsOf();
      // Every record flushed (records of one request may land a flush after another's): both models' sums.
      const flushed = () => ['sim-cached', 'sim-small'].every((m) => rows.find((r) => r.model === m)?.cached_tokens === want(m));
      for (let i = 0; i < 100 && !flushed(); i++) {
        await new Promise((r) => setTimeout(r, 50));
        rows = await rowsOf();
      }
      for (const model of ['sim-cached', 'sim-small']) {
        const row = rows.find((r) => r.model === model && r.key_id === keyId);
        t.equal(row?.cached_tokens, want(model), `${model}: the row sums cached_tokens`);
      }
      const today = new Date().toISOString().slice(0, 10);
      const rebuilt = await gw.admin(`/admin/accounts/${account}/usage/rebuild`, { method: 'POST', body: { from: today, to: today } });
      t.equal(rebuilt.status, 200);
      const after = await rowsOf();
      for (const model of ['sim-cached', 'sim-small']) {
        t.equal(after.find((r) => r.model === model)?.cached_tokens, want(model), `${model}: rebuilt from the ledger alike`);
      }

      const s3 = await startS3(t, `cached-${kind.replace(/\W/g, '')}`);
      const sink = sinkFor(s3);
      const exporter = createLedgerExporter({
        store: gw.store,
        logger: createLogger('error'),
        now: Date.now,
        prefix: 'ledger/',
        batchSize: 1000,
        retentionDays: 7,
        intervalSeconds: 60,
        sink,
      });
      await exporter.runOnce();
      const lines = (await exportedLines(sink)).map((l) => l.entry).filter((e) => e.account === account && e.kind === 'debit');
      t.equal(lines.length, (await ledger(gw, account)).filter((e) => e.kind === 'debit').length, 'every debit exported');
      for (const c of calls) {
        const line = lines.find((e) => e.request_id === c.requestId);
        t.equal(line?.cached_tokens, c.cached, `exported line of ${c.requestId} carries cached_tokens`);
      }
    });
  });
}
