// Usage aggregates end to end (SPEC §10) on Redis, with the ledger exported to a signature-checking S3:
// after a mixed load (live and test keys, two models, streamed and not) the aggregates equal a
// recomputation from the ledger; every group_by subset sums the same cells; bad queries get 422; a
// rebuild from the exported objects (Redis trimmed) restores corrupted live cells and keeps test cells;
// key reads carry last_used_at; the CLI shows and rebuilds usage and runs the export.
import t from 'tap';
import * as K from '../../src/store/redis-keys.ts';
import { startRedis } from '../helpers/redis.ts';
import { ADMIN_TOKEN, startGateway } from '../helpers/gateway.ts';
import { sharesS3Config, startS3 } from '../helpers/s3.ts';
import { waitFor } from '../helpers/wait.ts';
import { startSim, usageOf } from '../e2e/chat-fixture.ts';
import { chat, ledgerOf } from '../e2e/credit-support.ts';
import { runCli, parseFields } from '../cli/run-cli.ts';
import { exportedLines, sinkFor } from '../ledger/support.ts';

interface Row {
  day?: string;
  key_id?: string;
  model?: string;
  requests: number;
  prompt_tokens: number;
  completion_tokens: number;
  cost_micros: number;
  cached_tokens: number;
}

const ACCOUNT = 'mix';
const DIMENSIONS = ['day', 'key', 'model'] as const;
const FIELD = { day: 'day', key: 'key_id', model: 'model' } as const;

/** Sums `rows` over the dimensions not in `dims`, ordered like the API orders rows. */
function regroup(rows: Row[], dims: readonly (typeof DIMENSIONS)[number][]): Row[] {
  const out = new Map<string, Row>();
  for (const r of rows) {
    // SPEC §10's field order: the grouped dimensions, then the sums.
    const g = {} as Row;
    for (const d of DIMENSIONS) if (dims.includes(d)) (g as unknown as Record<string, unknown>)[FIELD[d]] = r[FIELD[d]];
    Object.assign(g, { requests: 0, prompt_tokens: 0, completion_tokens: 0, cost_micros: 0, cached_tokens: 0 });
    const id = `${g.day ?? ''}\n${g.key_id ?? ''}\n${g.model ?? ''}`;
    const have = out.get(id) ?? out.set(id, g).get(id)!;
    have.requests += r.requests;
    have.prompt_tokens += r.prompt_tokens;
    have.completion_tokens += r.completion_tokens;
    have.cost_micros += r.cost_micros;
    have.cached_tokens += r.cached_tokens;
  }
  return [...out.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([, r]) => r);
}

const redis = await startRedis(t);
if (redis) {
  const sim = await startSim(t);
  const s3 = await startS3(t, 'usage-ledger');
  const gw = await startGateway(t, {
    redisUrl: redis.url,
    upstreamUrl: sim.url,
    config: {
      shares: { s3: sharesS3Config(s3) },
      // The export runs only when asked (POST /admin/ledger/export) and trims everything it exported.
      ledger: { retention_days: 0, export: { interval_seconds: 3600, batch_size: 5 } },
      usage: { flush_interval_ms: 100 },
    },
  });
  const live1 = await gw.createKey({ account: ACCOUNT, env: 'live', name: 'live one' });
  const live2 = await gw.createKey({ account: ACCOUNT, env: 'live', name: 'live two' });
  const test1 = await gw.createKey({ account: ACCOUNT, env: 'test', name: 'test one' });
  await gw.grant(ACCOUNT, 50_000_000);
  const today = new Date().toISOString().slice(0, 10);
  const usage = async (qs = '') => gw.admin(`/admin/accounts/${ACCOUNT}/usage${qs}`);

  // What the test keys did, from their responses' usage: test keys write no ledger.
  const testTally = new Map<string, Row>();
  const keys = [live1, live2, test1];
  const models = ['sim-small', 'sim-free'];
  const requests = Array.from({ length: 36 }, (_, i) => ({
    key: keys[i % 3]!,
    model: models[Math.floor(i / 3) % 2]!,
    stream: i % 4 === 1,
    tokens: 3 + (i % 7),
  }));
  await Promise.all(
    requests.map(async (r, i) => {
      const body = {
        model: r.model,
        messages: [{ role: 'user', content: `request ${i} ${'word '.repeat(i)}` }],
        stream: r.stream,
        ...(r.stream && { stream_options: { include_usage: true } }),
        sim: { tokens: r.tokens },
      };
      const res = await chat(gw.url, r.key.key, body);
      const text = await res.text();
      if (res.status !== 200) throw new Error(`request ${i}: ${res.status} ${text}`);
      if (r.key !== test1) return;
      const usage = usageOf(text, r.stream);
      const id = r.model;
      const have =
        testTally.get(id) ??
        testTally
          .set(id, {
            day: today,
            key_id: test1.id,
            model: r.model,
            requests: 0,
            prompt_tokens: 0,
            completion_tokens: 0,
            cost_micros: 0,
            cached_tokens: 0,
          })
          .get(id)!;
      have.requests++;
      have.prompt_tokens += usage.prompt_tokens;
      have.completion_tokens += usage.completion_tokens;
    }),
  );

  /** The live keys' cells, recomputed from the ledger's debit entries (the truth). */
  const fromLedger = async (): Promise<Row[]> => {
    const rows = new Map<string, Row>();
    for (const e of await ledgerOf(gw.admin, ACCOUNT)) {
      if (e.kind !== 'debit') continue;
      const id = `${e.key_id}\n${e.model}`;
      const r =
        rows.get(id) ??
        rows
          .set(id, {
            day: e.ts.slice(0, 10),
            key_id: e.key_id!,
            model: e.model!,
            requests: 0,
            prompt_tokens: 0,
            completion_tokens: 0,
            cost_micros: 0,
            cached_tokens: 0,
          })
          .get(id)!;
      r.requests++;
      r.prompt_tokens += e.prompt_tokens!;
      r.completion_tokens += e.completion_tokens!;
      r.cost_micros -= e.amount_micros;
      r.cached_tokens += e.cached_tokens ?? 0;
    }
    return [...rows.values()];
  };
  const expected = async () => regroup([...(await fromLedger()), ...testTally.values()], DIMENSIONS);

  t.test('after a mixed load the aggregates equal the ledger (live keys) and the responses (test keys)', async (t) => {
    const want = await expected();
    t.equal(
      want.reduce((n, r) => n + r.requests, 0),
      requests.length,
      'every request is in the expectation',
    );
    t.ok(
      want.some((r) => r.key_id === test1.id && r.cost_micros === 0),
      'test keys are counted, at cost 0',
    );
    t.ok(
      want.some((r) => r.cost_micros > 0),
      'priced live requests cost something',
    );
    // Aggregates lag the ledger by up to the flush interval (SPEC §10: ≤ 2 s).
    const rows = await waitFor(
      async () => {
        const r = await usage();
        return JSON.stringify(r.body.rows) === JSON.stringify(want) && r.body.rows;
      },
      3000,
      'the aggregates to match the ledger',
    );
    t.same(rows, want);
  });

  t.test('every group_by subset sums the same cells, with exactly its dimensions', async (t) => {
    const full = (await usage(`?from=${today}&to=${today}&group_by=day,key,model`)).body.rows as Row[];
    const subsets = [['day'], ['key'], ['model'], ['day', 'key'], ['day', 'model'], ['key', 'model'], ['model', 'day', 'key']] as const;
    for (const dims of subsets) {
      const r = await usage(`?from=${today}&to=${today}&group_by=${dims.join(',')}`);
      t.equal(r.status, 200);
      t.same(r.body.rows, regroup(full, dims), `group_by=${dims.join(',')}`);
      const fields = new Set((r.body.rows as Row[]).flatMap((x) => Object.keys(x)));
      for (const d of DIMENSIONS) t.equal(fields.has(FIELD[d]), (dims as readonly string[]).includes(d), `${d} present iff grouped`);
    }
    t.same((await usage(`?from=2020-01-01&to=2020-01-31&group_by=model`)).body, { rows: [] }, 'a range without traffic: no rows');
  });

  t.test('bad usage queries answer 422 with the field', async (t) => {
    const bad = async (qs: string, loc: string[], type: string) => {
      const r = await usage(qs);
      t.equal(r.status, 422, qs);
      t.same(r.body.detail[0].loc, loc, `${qs}: loc`);
      t.equal(r.body.detail[0].type, type, `${qs}: type`);
    };
    await bad('?group_by=day,week', ['query', 'group_by'], 'value_error');
    await bad('?group_by=', ['query', 'group_by'], 'value_error');
    await bad('?from=2026-13-01', ['query', 'from'], 'date_from_datetime_parsing');
    await bad('?from=yesterday', ['query', 'from'], 'string_pattern_mismatch');
    await bad('?from=2026-11-02&to=2026-11-01', ['query', 'from'], 'value_error');
    await bad('?from=2020-01-01&to=2026-01-01', ['query', 'to'], 'value_error');
  });

  t.test('key reads carry last_used_at, to the minute', async (t) => {
    for (const k of keys) {
      const r = await gw.admin(`/admin/keys/${k.id}`);
      t.match(r.body.last_used_at, /^\d{4}-\d\d-\d\dT\d\d:\d\d:00Z$/, `${k.name}: last_used_at`);
    }
    const fresh = await gw.createKey({ account: ACCOUNT, env: 'live', name: 'never used' });
    t.equal(fresh.last_used_at, null, 'a new key: null');
    const listed = (await gw.admin(`/admin/keys?account=${ACCOUNT}`)).body.data;
    t.equal(
      listed.find((k: { id: string }) => k.id === live1.id).last_used_at,
      (await gw.admin(`/admin/keys/${live1.id}`)).body.last_used_at,
    );
  });

  t.test('export trims Redis; a rebuild from the objects restores corrupted live cells and keeps test cells', async (t) => {
    const before = (await usage()).body.rows as Row[];
    const ledgerBefore = await ledgerOf(gw.admin, ACCOUNT);
    t.equal((await gw.admin(`/admin/accounts/${ACCOUNT}/ledger`)).body.archived_before, null, 'nothing trimmed yet: null');
    const env = { TOLLGATE_ADMIN_TOKEN: ADMIN_TOKEN, TOLLGATE_ADMIN_URL: gw.adminUrl };
    const exported = await runCli(['ledger', 'export', '--once'], env);
    t.equal(exported.code, 0, 'tollgate ledger export --once exits 0', { stderr: exported.stderr });
    const f = parseFields(exported.stdout);
    t.equal(Number(f.entries), ledgerBefore.length, 'every entry exported');
    t.equal(Number(f.trimmed), ledgerBefore.length, 'and trimmed (retention_days 0)');
    const metrics = await (await fetch(`${gw.adminUrl}/metrics`)).text();
    t.match(metrics, new RegExp(`^tollgate_ledger_exported_entries_total ${ledgerBefore.length}$`, 'm'), 'the export counted in /metrics');
    t.match(metrics, new RegExp(`^tollgate_ledger_trimmed_entries_total ${ledgerBefore.length}$`, 'm'), 'and the trim');
    const page = (await gw.admin(`/admin/accounts/${ACCOUNT}/ledger`)).body;
    t.same(page.entries, [], 'Redis holds no entry of the account');
    t.match(page.archived_before, /^\d+-\d+$/, 'archived_before says where the objects take over');

    // The CLI's whole-ledger read says what it no longer holds (before, it printed the Redis part as the ledger).
    const listed = await runCli(['credits', 'ledger', ACCOUNT, '--all'], env);
    t.equal(listed.code, 0, 'tollgate credits ledger --all exits 0');
    t.match(listed.stderr, `before ${page.archived_before}`, 'and says on stderr that entries before archived_before are not listed');
    t.match(listed.stderr, 'exported objects', 'and where they are');
    const listedJson = JSON.parse((await runCli(['credits', 'ledger', ACCOUNT, '--all', '--json'], env)).stdout);
    t.equal(listedJson.archived_before, page.archived_before, '--all --json carries archived_before');
    const later = await runCli(['credits', 'ledger', ACCOUNT, '--after', page.archived_before], env);
    t.notMatch(later.stderr, 'trimmed', 'no note when the listing starts past the archive');

    // No full API key in any exported record (SPEC §10 objects, the usage rows, the ledger read).
    const objects = await exportedLines(sinkFor(s3));
    t.equal(objects.length, ledgerBefore.length, 'every entry is in the objects');
    const exportedText = JSON.stringify(objects.map((o) => o.entry)) + JSON.stringify(before) + JSON.stringify(ledgerBefore);
    for (const k of [live1, live2, test1]) {
      t.notOk(exportedText.includes(k.key), `no object, usage row or ledger entry holds the key ${k.id} itself`);
      t.notOk(exportedText.includes(k.key.slice(0, 24)), `nor a long prefix of it`);
    }
    t.ok(
      objects.filter((o) => o.entry.kind === 'debit').every((o) => [live1.id, live2.id].includes(o.entry.key_id!)),
      'debits name their key by id',
    );

    // Corrupt a live cell, as a lost or doubled flush would.
    const day = K.usageDay(ACCOUNT, today);
    await redis.client.hset(day, `${live1.id}|sim-small|r`, '999');
    const rebuilt = await runCli(['usage', 'rebuild', '--account', ACCOUNT, '--json'], env);
    t.equal(rebuilt.code, 0, 'tollgate usage rebuild exits 0', { stderr: rebuilt.stderr });
    const report = JSON.parse(rebuilt.stdout);
    t.equal(report.from_objects, ledgerBefore.length, 'every entry read back from the exported objects');
    t.equal(report.entries, ledgerBefore.filter((e) => e.kind === 'debit').length, 'every debit counted');
    t.same((await usage()).body.rows, before, 'the aggregates are what they were: live cells recomputed, test cells kept');

    const shown = await runCli(['usage', 'show', '--account', ACCOUNT, '--group-by', 'model', '--json'], env);
    t.same(JSON.parse(shown.stdout), (await usage('?group_by=model')).body, 'usage show --json is the API body');
    const table = await runCli(['usage', 'show', '--account', ACCOUNT, '--group-by', 'key'], env);
    t.match(
      table.stdout.split('\n')[0],
      /^KEY_ID\s+REQUESTS\s+PROMPT_TOKENS\s+COMPLETION_TOKENS\s+COST_MICROS\s+CACHED_TOKENS$/,
      'a table with the grouped column',
    );
    t.equal(table.stdout.trim().split('\n').length, 4, 'one row per key used');
  });
}
