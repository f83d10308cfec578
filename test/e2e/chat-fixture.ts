// Shared pieces of the chat completions e2e tests (test/e2e/chat-*.test.ts): a simulator per test, a
// steering front for failover, raw SSE reading, exact expected costs, the ledger and the metrics text.
import {
  createServer,
  request as httpRequest,
  type IncomingHttpHeaders,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from 'node:http';
import type { AddressInfo } from 'node:net';
import OpenAI from 'openai';
import type { Test } from 'tap';
import { startSimulator, type Simulator } from '../../src/simulator/simulator.ts';
import type { LedgerEntry } from '../../src/store/types.ts';
import { startGateway, type TestGateway } from '../helpers/gateway.ts';

interface Teardown {
  teardown(fn: () => unknown): void;
}

/** Listens on a free loopback port, closed (its connections too) at teardown; the base URL an upstream is configured with. */
export async function serveUpstream(t: Teardown, server: Server): Promise<string> {
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.teardown(
    () =>
      new Promise<void>((r) => {
        server.close(() => r());
        server.closeAllConnections();
      }),
  );
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
}

/**
 * A hand-written upstream that answers each request from its parsed JSON body (`handle(body, req, res)`),
 * for answers the simulator does not make (vLLM's echo, its embeddings form choice): serveUpstream's URL.
 */
export function serveJsonUpstream(t: Teardown, handle: (body: any, req: IncomingMessage, res: ServerResponse) => void): Promise<string> {
  return serveUpstream(
    t,
    createServer((req, res) => {
      let body = '';
      req.on('data', (c: Buffer) => (body += c.toString()));
      req.on('end', () => handle(JSON.parse(body), req, res));
    }),
  );
}

/**
 * A model priced as `sim-small` (SIM_SMALL: input 1.5, output 2.25 credits per million tokens), served by
 * `urls` in order, each with `apiKey` (none when null).
 */
export function simSmallModel(name: string, urls: readonly string[], apiKey: string | null = 'upstream-secret') {
  return {
    name,
    upstream_model: 'sim/small-1',
    max_output_tokens: 256,
    price: { input: 1.5, output: 2.25 },
    upstreams: urls.map((url) => (apiKey === null ? { url } : { url, api_key: apiKey })),
  };
}

/** The `upstream` label of an upstream's metrics: its URL's host and port. */
export const hostOf = (url: string) => new URL(url).host;

/** A simulator closed when the test ends. */
export async function startSim(t: Teardown): Promise<Simulator> {
  const sim = await startSimulator();
  t.teardown(() => sim.close());
  return sim;
}

/**
 * A simulator and a gateway (embedded store, or Redis at `redisUrl`) serving one model `m` priced 1 µ a
 * token both ways, so costs read as token counts, with a large per-key concurrency for crowds: the
 * stateful, unseen-input and rendered-fields tests.
 */
export async function startTokenPriced(
  t: Teardown,
  model: { maxOutputTokens: number; contextWindow: number },
  redisUrl?: string,
): Promise<{ sim: Simulator; gw: TestGateway }> {
  const sim = await startSim(t);
  const gw = await startGateway(t, {
    ...(redisUrl !== undefined && { redisUrl }),
    upstreamUrl: sim.url,
    config: {
      limits: { max_concurrent_per_key: 1000 },
      models: [
        {
          name: 'm',
          max_output_tokens: model.maxOutputTokens,
          context_window: model.contextWindow,
          price: { input: 1, output: 1 },
          upstreams: [{ url: sim.url, api_key: 'upstream-secret' }],
        },
      ],
    },
  });
  return { sim, gw };
}

/** A simulator, a gateway on it (embedded store), and a live key of `account` granted `grant` µ. */
export async function liveGateway(t: Teardown, account: string, grant = 10_000_000) {
  const sim = await startSim(t);
  const gw = await startGateway(t, { upstreamUrl: sim.url });
  const { key } = await gw.createKey({ account, env: 'live' });
  await gw.grant(account, grant);
  return { sim, gw, key };
}

/**
 * An HTTP front that forwards every request to `target` with extra `x-sim-*` headers, so one upstream of
 * a model misbehaves (e.g. `x-sim-status: 503`) while its sibling, reached directly, does not. The
 * steering still happens in the simulator, which records the request. Returns the front's `/v1` URL.
 */
export async function startSteeredFront(t: Teardown, target: Simulator, inject: Record<string, string>): Promise<string> {
  const server = createServer((req, res) => {
    const out = httpRequest(
      {
        host: '127.0.0.1',
        port: target.port,
        method: req.method,
        path: req.url,
        headers: { ...req.headers, ...inject },
      },
      (up) => {
        res.writeHead(up.statusCode ?? 502, up.headers);
        up.pipe(res);
      },
    );
    out.on('error', () => res.destroy());
    req.pipe(out);
  });
  return await serveUpstream(t, server);
}

/** A fake upstream that answers every request with a fixed status, headers and body; records headers and raw bodies. */
export async function startFixedUpstream(
  t: Teardown,
  status: number,
  headers: Record<string, string | string[]>,
  body: string,
): Promise<{ url: string; seen: IncomingHttpHeaders[]; bodies: string[] }> {
  const seen: IncomingHttpHeaders[] = [];
  const bodies: string[] = [];
  const server = createServer((req, res) => {
    seen.push(req.headers);
    let raw = '';
    req.setEncoding('utf8');
    req.on('data', (c: string) => (raw += c));
    req.on('end', () => {
      bodies.push(raw);
      res.writeHead(status, { ...headers, 'content-length': Buffer.byteLength(body) });
      res.end(body);
    });
  });
  return { url: await serveUpstream(t, server), seen, bodies };
}

/** Price of a test model in hundredths of a micro-credit per token (1.5 credits/M = 150). */
export interface CentPrice {
  input: bigint;
  output: bigint;
}

/** `sim-small` in the default test config: input 1.5, output 2.25 credits per million tokens. */
export const SIM_SMALL: CentPrice = { input: 150n, output: 225n };

/** SPEC §4 cost, exact: ceil(prompt × input + completion × output) micro-credits, in integer arithmetic. */
export function expectedCost(price: CentPrice, prompt: number, completion: number): number {
  const hundredths = BigInt(prompt) * price.input + BigInt(completion) * price.output;
  return Number((hundredths + 99n) / 100n);
}

/** A chat completions POST with raw fetch. */
export function postChat(
  gw: Pick<TestGateway, 'url' | 'auth'>,
  key: string,
  body: unknown,
  headers: Record<string, string> = {},
): Promise<Response> {
  return fetch(`${gw.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { ...gw.auth(key), 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
}

/** The `data:` payloads of an SSE body, in order (`[DONE]` included as the string); events without data are skipped. */
export function sseData(text: string): string[] {
  const out: string[] = [];
  for (const e of text.split('\n\n')) {
    const line = e.split('\n').find((l) => l.startsWith('data:'));
    if (line !== undefined) out.push(line.slice(5).trim());
  }
  return out;
}

/** The `usage` of a chat answer: a JSON body's, or a stream's last event that carries one. */
export function usageOf(text: string, stream: boolean): any {
  if (!stream) return JSON.parse(text).usage;
  const last = text
    .split('\n')
    .filter((l) => l.startsWith('data: {') && l.includes('"usage":{'))
    .at(-1)!;
  return JSON.parse(last.slice(6)).usage;
}

/** An OpenAI SDK client for the gateway with SDK retries off, so every attempt is ours to count. */
export function sdk(gw: TestGateway, key: string): OpenAI {
  return new OpenAI({ apiKey: key, baseURL: `${gw.url}/v1`, maxRetries: 0 });
}

/** Every ledger entry of the account, oldest first (follows `next_after`). */
export async function ledger(gw: TestGateway, account: string): Promise<LedgerEntry[]> {
  const out: LedgerEntry[] = [];
  let after: string | null = null;
  do {
    const r = await gw.admin(`/admin/accounts/${account}/ledger?limit=1000${after ? `&after=${after}` : ''}`);
    if (r.status !== 200) throw new Error(`ledger: ${r.status} ${JSON.stringify(r.body)}`);
    out.push(...(r.body.entries as LedgerEntry[]));
    after = r.body.next_after;
  } while (after);
  return out;
}

/** The debit entry of a request; settles land after the response (SPEC §2a: within 1 s), so poll. */
export async function waitForDebit(gw: TestGateway, account: string, requestId: string, timeoutMs = 2000): Promise<LedgerEntry> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const hit = (await ledger(gw, account)).filter((e) => e.kind === 'debit' && e.request_id === requestId);
    if (hit.length > 1) throw new Error(`request ${requestId} has ${hit.length} debit entries`);
    if (hit[0]) return hit[0];
    if (Date.now() > until) throw new Error(`no debit entry for ${requestId} within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** Account state and the ledger sum (SPEC §4: balance = Σ grants − Σ debits, at every instant). */
export async function accountVsLedger(
  gw: TestGateway,
  account: string,
): Promise<{ balance: number; held: number; sum: number; entries: LedgerEntry[] }> {
  const entries = await ledger(gw, account);
  const acct = await gw.admin(`/admin/accounts/${account}`);
  return { balance: acct.body.balance_micros, held: acct.body.held_micros, sum: entries.reduce((s, e) => s + e.amount_micros, 0), entries };
}

/**
 * Balance = Σ ledger and nothing left held, checked once the holds have settled (settles the answer does
 * not wait for land late) or `timeoutMs` has passed.
 */
export async function checkBooks(t: Test, gw: TestGateway, account: string, timeoutMs = 2000): Promise<void> {
  const until = Date.now() + timeoutMs;
  let s = await accountVsLedger(gw, account);
  while (s.held !== 0 && Date.now() < until) {
    await new Promise((r) => setTimeout(r, 20));
    s = await accountVsLedger(gw, account);
  }
  t.equal(s.balance, s.sum, `${account}: balance equals the ledger sum`);
  t.equal(s.held, 0, `${account}: nothing left held`);
}

/** The admin listener's Prometheus text. */
export async function metricsText(gw: TestGateway): Promise<string> {
  const r = await fetch(`${gw.adminUrl}/metrics`);
  return r.text();
}

/** The value of one sample (`name{labels}`), labels matched as a subset; 0 when absent. */
export function sample(text: string, name: string, labels: Record<string, string> = {}): number {
  let total = 0;
  for (const line of text.split('\n')) {
    if (!line.startsWith(name)) continue;
    const m = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!m || m[1] !== name) continue;
    const got: Record<string, string> = {};
    for (const kv of (m[2] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) got[kv[1]!] = kv[2]!;
    if (Object.entries(labels).every(([k, v]) => got[k] === v)) total += Number(m[3]);
  }
  return total;
}

/**
 * A gateway whose model `m` (the sim's prices) has two upstreams, so a retry after the first byte would be
 * visible, and a funded live key of `account`.
 */
export async function twoUpstreamGateway(t: Teardown, account: string) {
  const a = await startSim(t);
  const b = await startSim(t);
  const gw = await startGateway(t, {
    upstreamUrl: a.url,
    config: { models: [simSmallModel('m', [a.url, b.url], null)] },
  });
  const { key } = await gw.createKey({ account, env: 'live' });
  await gw.grant(account, 1_000_000);
  return { gw, key, requests: () => [...a.requests, ...b.requests], sims: [a, b] as const };
}

/**
 * Reads a streamed /v1/responses answer until 6 text deltas arrived, checks it has not completed, then
 * aborts it (`ac` is the request's): a follow-up abandoned mid-stream. Returns its x-request-id.
 */
export async function abandonResponsesStream(
  t: { notMatch(found: string, pattern: RegExp, message: string): unknown },
  res: Response,
  ac: AbortController,
): Promise<string> {
  const id = res.headers.get('x-request-id')!;
  const reader = res.body!.getReader();
  let text = '';
  while ((text.match(/response\.output_text\.delta/g) ?? []).length < 6) {
    const { value, done } = await reader.read();
    if (done) throw new Error('stream ended early');
    text += Buffer.from(value).toString('utf8');
  }
  t.notMatch(text, /response\.completed/, 'abandoned before response.completed');
  ac.abort();
  return id;
}
