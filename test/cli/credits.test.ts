import t from 'tap';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { ADMIN_TOKEN, startGateway } from '../helpers/gateway.ts';
import { freePort } from '../helpers/ports.ts';
import { BIN, parseFields, runCli } from './run-cli.ts';
import { waitFor } from '../helpers/wait.ts';

const gw = await startGateway(t);
const env = { TOLLGATE_ADMIN_TOKEN: ADMIN_TOKEN, TOLLGATE_ADMIN_URL: gw.adminUrl };
const cli = (...args: string[]) => runCli(args, env);
const balance = async (account: string) => (await gw.admin(`/admin/accounts/${account}`)).body.balance_micros;

t.test('credits grant credits an amount in credits once per idempotency key; a replay exits 0 and says so', async (t) => {
  const first = await cli('credits', 'grant', 'acme', '1.5', '--idempotency-key', 'invoice-1', '--note', 'welcome');
  t.equal(first.code, 0, 'exits 0', { stderr: first.stderr });
  const f = parseFields(first.stdout);
  t.equal(f.balance, '1.5 credits (1500000 micros)');
  t.equal(f.available, '1.5 credits (1500000 micros)');
  t.equal(f.replayed, 'no');
  t.match(f.entry_id, /^\d+-\d+$/);
  t.equal(first.stderr, '');

  const replay = await cli('credits', 'grant', 'acme', '--micros', '1500000', '--idempotency-key', 'invoice-1', '--json');
  t.equal(replay.code, 0, 'exits 0', { stderr: replay.stderr });
  const body = JSON.parse(replay.stdout);
  t.equal(body.entry_id, f.entry_id, 'the original entry');
  t.equal(body.balance_micros, 1_500_000);
  t.match(replay.stderr, /idempotency key "invoice-1" was already used: nothing was credited again/);
  t.equal(await balance('acme'), 1_500_000, 'credited once');

  const ledger = (await gw.admin('/admin/accounts/acme/ledger')).body.entries;
  t.match(ledger, [{ kind: 'grant', amount_micros: 1_500_000, note: 'welcome' }]);
  t.equal(ledger.length, 1);
});

t.test('credits convert exactly, --micros is the exact integer, --credits still works; negative amounts are corrections', async (t) => {
  const r = await cli('credits', 'grant', 'dec', '0.1', '--json');
  t.equal(r.code, 0, 'exits 0', { stderr: r.stderr });
  t.equal(JSON.parse(r.stdout).balance_micros, 100_000, '0.1 credits, exactly 100000 micros');

  const more = await cli('credits', 'grant', 'dec', '--credits', '1.000001');
  t.equal(more.code, 0, 'exits 0', { stderr: more.stderr });
  t.equal(await balance('dec'), 1_100_001);

  const minus = await cli('credits', 'grant', 'dec', '--micros=-100001');
  t.equal(minus.code, 0, 'a negative --micros is an exact correction', { stderr: minus.stderr });
  const minusCredits = await cli('credits', 'grant', 'dec', '-0.5', '--json');
  t.equal(minusCredits.code, 0, 'a bare negative number is the amount in credits, not a flag', { stderr: minusCredits.stderr });
  t.equal(await balance('dec'), 500_000);
  const amounts = (await gw.admin('/admin/accounts/dec/ledger')).body.entries.map((e: { amount_micros: number }) => e.amount_micros);
  t.same(amounts, [100_000, 1_000_001, -100_001, -500_000]);
});

t.test('credits show prints balance, held and available', async (t) => {
  await gw.grant('shown', 2_250_000);
  const r = await cli('credits', 'show', 'shown');
  t.equal(r.code, 0, 'exits 0', { stderr: r.stderr });
  t.match(parseFields(r.stdout), {
    account: 'shown',
    balance: '2.25 credits (2250000 micros)',
    held: '0 credits (0 micros)',
    available: '2.25 credits (2250000 micros)',
  });

  const json = await cli('credits', 'show', 'never-granted', '--json');
  t.same(JSON.parse(json.stdout), { id: 'never-granted', balance_micros: 0, held_micros: 0 });
});

t.test('credits ledger pages with --after/--limit and follows every page with --all', async (t) => {
  for (let i = 1; i <= 5; i++) await gw.grant('paged', i * 1000, `g${i}`);
  const page = await cli('credits', 'ledger', 'paged', '--limit', '2', '--json');
  t.equal(page.code, 0, 'exits 0', { stderr: page.stderr });
  const first = JSON.parse(page.stdout);
  t.same(
    first.entries.map((e: { amount_micros: number }) => e.amount_micros),
    [1000, 2000],
  );
  t.equal(first.next_after, first.entries[1].id);

  const text = await cli('credits', 'ledger', 'paged', '--limit', '2', '--after', first.next_after);
  t.equal(text.code, 0, 'exits 0', { stderr: text.stderr });
  const lines = text.stdout.trim().split('\n');
  t.match(lines[0], /^ID\s+TS\s+KIND\s+AMOUNT_MICROS/);
  t.equal(lines.length, 3);
  t.match(lines[1], /\bgrant\s+3000\b/);
  t.match(lines[2], /\bgrant\s+4000\b/);
  t.match(text.stderr, /^more entries: tollgate credits ledger paged --after \d+-\d+ \(or --all\)/);

  const all = await cli('credits', 'ledger', 'paged', '--all', '--limit', '2', '--json');
  t.equal(all.code, 0, 'exits 0', { stderr: all.stderr });
  const body = JSON.parse(all.stdout);
  t.same(
    body.entries.map((e: { amount_micros: number }) => e.amount_micros),
    [1000, 2000, 3000, 4000, 5000],
    'three pages joined',
  );
  t.equal(body.next_after, null);

  const allText = await cli('credits', 'ledger', 'paged', '--all', '--limit', '2');
  t.equal(allText.stdout.trim().split('\n').length, 6, 'header and five entries');
  t.equal(allText.stderr, '');
});

t.test('credits ledger --all prints each page as it comes, never the whole ledger at once', async (t) => {
  for (let i = 1; i <= 5; i++) await gw.grant('streamed', i * 1000, `s${i}`);
  // A real proxy in front of the admin listener holds every page after the first until released: the
  // first page must be on stdout by then (before, every page was gathered and printed at the end).
  let release = () => {};
  let released = Promise.resolve();
  const proxy = createServer(async (req, res) => {
    if (req.url!.includes('after=')) await released;
    const up = await fetch(`${gw.adminUrl}${req.url}`, { headers: { authorization: req.headers.authorization! } });
    res.writeHead(up.status, { 'content-type': 'application/json' }).end(await up.text());
  });
  await new Promise<void>((r) => proxy.listen(0, '127.0.0.1', r));
  t.teardown(() => new Promise((r) => proxy.close(r)));
  const url = `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`;
  for (const json of [false, true]) {
    released = new Promise<void>((r) => (release = r));
    const child = spawn(process.execPath, [BIN, 'credits', 'ledger', 'streamed', '--all', '--limit', '2', ...(json ? ['--json'] : [])], {
      env: { PATH: process.env.PATH ?? '', TOLLGATE_ADMIN_TOKEN: ADMIN_TOKEN, TOLLGATE_ADMIN_URL: url },
    });
    let stdout = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c));
    const exited = once(child, 'close');
    try {
      await waitFor(() => /\b1000\b/.test(stdout), 10_000, `the first page on stdout (json: ${json})`);
      t.notMatch(stdout, /\b3000\b/, 'and nothing of the pages not yet served');
    } finally {
      release();
    }
    t.same(await exited, [0, null]);
    if (json) {
      const body = JSON.parse(stdout);
      t.same(
        body.entries.map((e: { amount_micros: number }) => e.amount_micros),
        [1000, 2000, 3000, 4000, 5000],
      );
      t.equal(body.next_after, null);
      t.equal(body.archived_before, null);
    } else {
      const lines = stdout.trim().split('\n');
      t.match(lines[0], /^ID\s+TS\s+KIND\s+AMOUNT_MICROS/);
      t.equal(lines.length, 6, 'one header, five entries');
    }
  }
});

t.test('credits usage errors exit 2 and send nothing', async (t) => {
  const cases: Array<[string[], RegExp]> = [
    [['credits', 'grant', 'acme'], /give the amount once: <credits>.* or --micros N/],
    [['credits', 'grant', 'acme', '100', '--micros', '1'], /give the amount once/],
    [['credits', 'grant', 'acme', '--credits', '0.0000001'], /at most 6 decimals/],
    [['credits', 'grant', 'acme', '0.0000001'], /at most 6 decimals/],
    [['credits', 'grant', 'acme', '--micros', '1.5'], /must be an integer number of micro-credits/],
    [['credits', 'grant', 'acme', '1', '2'], /unexpected argument "2"/],
    [['credits', 'grant'], /missing <account>/],
    [['credits', 'ledger', 'acme', '--limit', 'ten'], /--limit must be a positive integer/],
    [['credits', 'show'], /missing <account>/],
  ];
  const before = await balance('acme');
  const results = await Promise.all(cases.map(([args]) => cli(...args)));
  for (const [i, [args, message]] of cases.entries()) {
    t.equal(results[i]!.code, 2, args.join(' '));
    t.match(results[i]!.stderr, message, args.join(' '));
    t.match(results[i]!.stderr, /Usage:\n {2}tollgate credits grant/);
  }
  t.equal(await balance('acme'), before);
});

t.test('API and transport errors exit 1 with the error code on stderr', async (t) => {
  const wrong = await runCli(['credits', 'grant', 'acme', '5'], { ...env, TOLLGATE_ADMIN_TOKEN: 'wrong' });
  t.equal(wrong.code, 1);
  t.match(wrong.stderr, /^error: invalid_admin_token \(HTTP 401\): /);
  t.equal(await balance('acme'), 1_500_000, 'nothing granted with a wrong token');

  const tooBig = await cli('credits', 'grant', 'acme', '--micros', '1000000000000001');
  t.equal(tooBig.code, 1);
  t.match(tooBig.stderr, /validation_error \(HTTP 422\)[\s\S]*body\.amount_micros/);

  const badAccount = await cli('credits', 'show', 'no spaces');
  t.equal(badAccount.code, 1);
  t.match(badAccount.stderr, /path\.id: String should match pattern/);

  const noToken = await runCli(['credits', 'show', 'acme'], { TOLLGATE_ADMIN_URL: gw.adminUrl });
  t.equal(noToken.code, 2, 'a missing token is a setup error, found before any request');
  t.match(noToken.stderr, /TOLLGATE_ADMIN_TOKEN is not set/);

  const port = await freePort();
  const down = await runCli(['credits', 'show', 'acme', '--admin-url', `http://127.0.0.1:${port}`], env);
  t.equal(down.code, 1);
  t.match(down.stderr, `error: connection_failed: cannot reach http://127.0.0.1:${port}: ECONNREFUSED`);
});
