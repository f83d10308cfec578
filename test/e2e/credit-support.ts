// Shared by the credit-* and lifecycle-* e2e tests: chat requests over raw fetch, SSE reading, the whole
// ledger of an account, the ledger invariants every test ends with (SPEC §4: balance = Σ ledger, one
// debit per settled request id), and a gateway run as a real child process (`node src/main.ts`) for the
// SIGKILL / SIGTERM tests.
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import type OpenAI from 'openai';
import type { Test } from 'tap';
import { stringify } from 'yaml';
import { ADMIN_TOKEN, testConfigDoc, type TestGateway } from '../helpers/gateway.ts';
import { freePort } from '../helpers/ports.ts';
import { waitFor } from '../helpers/wait.ts';
import type { LedgerEntry } from '../../src/store/types.ts';

interface Teardown {
  teardown(fn: () => unknown): void;
}

/** A ledger entry as the admin API returns it. */
export type Entry = LedgerEntry;

type Admin = (path: string) => Promise<{ status: number; body: any }>;

/**
 * One chat request of a crowd through the official SDK: streamed when `stream` (its settle comes after
 * the last event), else not; its `x-request-id` is added to `served` once it is answered.
 */
export async function crowdRequest(
  c: OpenAI,
  body: OpenAI.Chat.Completions.ChatCompletionCreateParamsNonStreaming,
  stream: boolean,
  served: Set<string>,
): Promise<void> {
  if (stream) {
    const { data, response } = await c.chat.completions
      .create({ ...body, stream: true, stream_options: { include_usage: true } })
      .withResponse();
    for await (const _ of data);
    served.add(response.headers.get('x-request-id')!);
    return;
  }
  const { response } = await c.chat.completions.create(body).withResponse();
  served.add(response.headers.get('x-request-id')!);
}

/** POST /v1/chat/completions with a JSON body (a `sim` field steers the simulator). */
export function chat(baseUrl: string, key: string, body: Record<string, unknown>, signal?: AbortSignal): Promise<Response> {
  return fetch(`${baseUrl}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
    ...(signal && { signal }),
  });
}

/** A streaming request body for the priced model, with the simulator steered by `sim`. */
export function streamBody(
  sim: Record<string, unknown>,
  content = 'hello there',
  extra: Record<string, unknown> = {},
): Record<string, unknown> {
  return { model: 'sim-small', messages: [{ role: 'user', content }], stream: true, sim, ...extra };
}

/** Every ledger entry of an account, oldest first, following `next_after` pages. */
export async function ledgerOf(admin: Admin, account: string): Promise<Entry[]> {
  const out: Entry[] = [];
  let after: string | null = null;
  do {
    const r = await admin(`/admin/accounts/${account}/ledger?limit=1000${after ? `&after=${after}` : ''}`);
    if (r.status !== 200) throw new Error(`ledger: ${r.status} ${JSON.stringify(r.body)}`);
    out.push(...(r.body.entries as Entry[]));
    after = r.body.next_after;
  } while (after);
  return out;
}

/** `{balance_micros, held_micros}` of an account. */
export async function accountOf(admin: Admin, account: string): Promise<{ balance_micros: number; held_micros: number }> {
  const r = await admin(`/admin/accounts/${account}`);
  if (r.status !== 200) throw new Error(`account: ${r.status} ${JSON.stringify(r.body)}`);
  return r.body;
}

/** The account once every hold has settled (nothing held), polled for up to `timeoutMs`. */
export function settledAccount(gw: { admin: Admin }, account: string, timeoutMs = 10_000) {
  return waitFor(
    async () => {
      const a = await accountOf(gw.admin, account);
      return a.held_micros === 0 && a;
    },
    timeoutMs,
    'every hold settled',
  );
}

/** The debit entry of a request, polled for up to `timeoutMs` (settles land after the answer). */
export function debitOf(gw: { admin: Admin }, account: string, requestId: string, timeoutMs = 10_000): Promise<Entry> {
  return waitFor(
    async () => (await ledgerOf(gw.admin, account)).find((e) => e.kind === 'debit' && e.request_id === requestId),
    timeoutMs,
    `the debit of ${requestId}`,
  );
}

/**
 * SPEC §4 "no debit exceeds its hold" under a crowd: 32 concurrent requests (`send`) on a new live key of
 * `account` granted `grant` µ. Each is served or refused 402, the balance never goes negative, each served
 * request has one debit, none exceeds its hold, each bills the `prompt` input tokens the upstream
 * reported, and the ledger invariants hold.
 */
export async function poorCrowd(
  t: Test,
  gw: Pick<TestGateway, 'admin' | 'createKey' | 'grant'>,
  account: string,
  grant: number,
  prompt: number,
  send: (key: string) => Promise<Response>,
): Promise<void> {
  const { key } = await gw.createKey({ account, env: 'live' });
  await gw.grant(account, grant);
  const answers = await Promise.all(
    Array.from({ length: 32 }, async () => {
      const res = await send(key);
      await res.text();
      return res.status;
    }),
  );
  const served = answers.filter((s) => s === 200).length;
  t.ok(
    answers.every((s) => s === 200 || s === 402),
    `${account}: each request is served or refused 402 insufficient_credit (${served} served)`,
  );
  t.ok(served >= 1, `${account}: at least one is served`);
  const after = await settledAccount(gw, account);
  t.ok(after.balance_micros >= 0, `${account}: balance ${after.balance_micros} µ from ${grant} µ, never negative`);
  const entries = await ledgerOf(gw.admin, account);
  const debits = entries.filter((e) => e.kind === 'debit');
  t.equal(debits.length, served, `${account}: one debit per served request`);
  t.same(
    debits.filter((e) => -e.amount_micros > (e.hold_micros ?? 0)).map((e) => [e.hold_micros, e.amount_micros]),
    [],
    `${account}: no debit exceeds its hold`,
  );
  t.same(
    debits.filter((e) => e.prompt_tokens !== prompt || e.usage_source !== 'upstream').map((e) => [e.prompt_tokens, e.usage_source]),
    [],
    `${account}: each is billed the ${prompt} input tokens the upstream reported`,
  );
  checkLedger(t, entries, after);
}

/**
 * The ledger invariants of SPEC §4 / §2a: balance = Σ entries; no request id debited twice; when
 * `settled` is given, exactly those request ids have a debit (a refused or never-served request none).
 */
export function checkLedger(
  t: Test,
  entries: readonly Entry[],
  account: { balance_micros: number; held_micros: number },
  settled?: ReadonlySet<string>,
): void {
  const sum = entries.reduce((s, e) => s + e.amount_micros, 0);
  t.equal(account.balance_micros, sum, 'balance equals the sum of the ledger');
  const debits = entries.filter((e) => e.kind === 'debit');
  const ids = debits.map((e) => e.request_id);
  const dupes = ids.filter((id, i) => ids.indexOf(id) !== i);
  t.same(dupes, [], 'no request id is debited twice');
  t.ok(
    debits.every((e) => e.amount_micros <= 0 && Number.isInteger(e.amount_micros)),
    'debits are non-positive integers',
  );
  if (settled) {
    const unexpected = ids.filter((id) => !settled.has(id!));
    const missing = [...settled].filter((id) => !ids.includes(id));
    t.same(unexpected, [], 'every debit belongs to a request that was served');
    t.same(missing, [], 'every served request has its debit');
  }
}

export interface ChildGateway {
  url: string;
  adminUrl: string;
  child: ChildProcess;
  /** stdout + stderr so far (pino batches request lines: they arrive up to ~1 s late). */
  output(): string;
  /** Resolves with the exit code and signal once the process has exited. */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

const MAIN = fileURLToPath(new URL('../../src/main.ts', import.meta.url));

/**
 * Runs `node src/main.ts` with a YAML config written to a temp file (the test document of
 * helpers/gateway.ts merged with `config` at the top level of each section), Redis at `redisUrl`,
 * free ports, and waits until /healthz answers. Killed with SIGKILL at teardown if still running.
 */
export async function spawnGateway(
  t: Teardown,
  o: {
    redisUrl?: string;
    upstreamUrl: string;
    config?: Record<string, Record<string, unknown>>;
    nodeArgs?: string[];
    /** How long boot may take (default 10 s); tests that start several children on a busy box give more. */
    readyTimeoutMs?: number;
    /** Alias of readyTimeoutMs. */
    bootTimeoutMs?: number;
  },
): Promise<ChildGateway> {
  const doc = testConfigDoc(o.upstreamUrl) as Record<string, Record<string, unknown>>;
  for (const [section, values] of Object.entries(o.config ?? {})) doc[section] = { ...doc[section], ...values };
  const dir = await mkdtemp(join(tmpdir(), 'tollgate-e2e-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const file = join(dir, 'tollgate.yaml');
  await writeFile(file, stringify(doc));
  const [port, adminPort] = [await freePort(), await freePort()];
  const child = spawn(process.execPath, [...(o.nodeArgs ?? []), MAIN], {
    env: {
      PATH: process.env.PATH,
      TOLLGATE_CONFIG: file,
      ...(o.redisUrl && { REDIS_URL: o.redisUrl }),
      PORT: String(port),
      ADMIN_PORT: String(adminPort),
      TOLLGATE_ADMIN_TOKEN: ADMIN_TOKEN,
      LOG_LEVEL: 'info',
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout!.on('data', (b: Buffer) => (out += b.toString('utf8')));
  child.stderr!.on('data', (b: Buffer) => (out += b.toString('utf8')));
  const exited = once(child, 'exit').then(([code, signal]) => ({ code: code as number | null, signal: signal as NodeJS.Signals | null }));
  t.teardown(async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    await exited;
  });
  const url = `http://127.0.0.1:${port}`;
  const adminUrl = `http://127.0.0.1:${adminPort}`;
  // Boot loads gpt-tokenizer (100–300 ms, NOTES §8) and connects to Redis; 10 s only matters on a starved box.
  await waitFor(
    async () => {
      if (child.exitCode !== null) throw new Error(`gateway exited with ${child.exitCode} before listening:\n${out}`);
      return fetch(`${adminUrl}/healthz`).then(
        (r) => r.ok,
        () => false,
      );
    },
    o.readyTimeoutMs ?? o.bootTimeoutMs ?? 10_000,
    'the child gateway to listen',
    50,
  );
  return { url, adminUrl, child, output: () => out, exited };
}
