// Which UTC day a request billed at the turn of a day lands in (SPEC §10), on real Redis, S3 and HTTP:
// one settled at 23:59:59.900 and one at 00:00:00.000 (the gateway's clock, held at those instants while
// each request runs). The usage aggregates, the ledger entry's ts, the exported object's dt= partition
// and a rebuild from the objects all put each request in the same day: billing time is one clock read
// (routes/metered.ts billedAt), the entry's ts is it, and both the export and the rebuild split by ts.
import t from 'tap';
import { startRedis } from '../helpers/redis.ts';
import { startGateway } from '../helpers/gateway.ts';
import { sharesS3Config, startS3 } from '../helpers/s3.ts';
import { waitFor } from '../helpers/wait.ts';
import { startSim } from '../e2e/chat-fixture.ts';
import { chat, ledgerOf } from '../e2e/credit-support.ts';
import { exportedLines, PREFIX, sinkFor } from '../ledger/support.ts';

const DAY_MS = 86_400_000;
const redis = await startRedis(t);
if (redis) {
  const sim = await startSim(t);
  const s3 = await startS3(t, 'day-boundary');
  let held: number | undefined;
  const gw = await startGateway(t, {
    redisUrl: redis.url,
    upstreamUrl: sim.url,
    now: () => held ?? Date.now(),
    config: {
      shares: { s3: sharesS3Config(s3) },
      ledger: { retention_days: 7, export: { interval_seconds: 3600, batch_size: 100 } },
      usage: { flush_interval_ms: 100 },
    },
  });
  const key = await gw.createKey({ account: 'midnight', env: 'live', name: 'k' });
  await gw.grant('midnight', 10_000_000);
  const today = new Date(Date.now() - (Date.now() % DAY_MS));
  const yesterday = new Date(today.getTime() - DAY_MS).toISOString().slice(0, 10);
  const todayDay = today.toISOString().slice(0, 10);

  t.test('23:59:59.900 is the old day, 00:00:00.000 the new one, in the aggregates, the ledger, the export and a rebuild', async (t) => {
    const billedAt = [today.getTime() - 100, today.getTime()];
    for (const [i, at] of billedAt.entries()) {
      held = at;
      const res = await chat(gw.url, key.key, {
        model: 'sim-small',
        messages: [{ role: 'user', content: `req ${i}` }],
        sim: { tokens: 3 + i },
      });
      t.equal(res.status, 200, `request ${i} served`, { body: await res.text() });
      held = undefined;
    }
    const debits = () => ledgerOf(gw.admin, 'midnight').then((l) => l.filter((e) => e.kind === 'debit'));
    await waitFor(async () => (await debits()).length === 2, 5000, 'both debits in the ledger');
    const ledger = await debits();
    t.same(
      ledger.map((e) => e.ts),
      [new Date(billedAt[0]!).toISOString(), new Date(billedAt[1]!).toISOString()],
      'the entries carry the billing instants',
    );
    const usage = async () =>
      (await gw.admin(`/admin/accounts/midnight/usage?from=${yesterday}&to=${todayDay}&group_by=day`)).body.rows as {
        day: string;
        requests: number;
        cost_micros: number;
      }[];
    await waitFor(async () => (await usage()).reduce((n, r) => n + r.requests, 0) === 2, 5000, 'both requests aggregated');
    const rows = await usage();
    const expected = [
      { day: yesterday, requests: 1, cost_micros: -ledger[0]!.amount_micros },
      { day: todayDay, requests: 1, cost_micros: -ledger[1]!.amount_micros },
    ];
    t.same(
      rows.map((r) => ({ day: r.day, requests: r.requests, cost_micros: r.cost_micros })),
      expected,
      'the aggregates: one request each day, at its debit',
    );

    const report = (await gw.admin('/admin/ledger/export', { method: 'POST' })).body;
    t.equal(report.failed, 0, 'exported');
    const doc = (await (await fetch(`${gw.adminUrl}/openapi.json`)).json()) as any;
    t.same(
      Object.keys(report).sort(),
      Object.keys(doc.paths['/admin/ledger/export'].post.responses['200'].content['application/json'].schema.properties).sort(),
      "the pass's report has the fields /openapi.json documents (`conflicts` was missing)",
    );
    const lines = (await exportedLines(sinkFor(s3))).filter((l) => l.entry.kind === 'debit');
    t.same(
      lines.map((l) => l.key.slice(PREFIX.length, PREFIX.length + 'dt=YYYY-MM-DD'.length)).sort(),
      [`dt=${yesterday}`, `dt=${todayDay}`],
      'the export: each debit under its own day',
    );

    const rebuilt = await gw.admin('/admin/accounts/midnight/usage/rebuild', { method: 'POST', body: { from: yesterday, to: todayDay } });
    t.equal(rebuilt.status, 200, 'rebuilt', { body: rebuilt.body });
    t.equal(rebuilt.body.entries, 2, 'from both debits');
    t.same(
      (await usage()).map((r) => ({ day: r.day, requests: r.requests, cost_micros: r.cost_micros })),
      expected,
      'the rebuild puts them in the same days',
    );
  });
}
