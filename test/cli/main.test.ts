import t from 'tap';
import { GROUPS } from '../../src/cli/main.ts';
import { runCli } from './run-cli.ts';

// The commands SPEC §2, §10 and the CLI brief name; the help must list each one (a test, not GROUPS, is the list).
const COMMANDS = [
  'keys create',
  'keys list',
  'keys show',
  'keys disable',
  'keys enable',
  'keys rename',
  'keys limits',
  'keys scopes',
  'keys expire',
  'keys budget',
  'keys roll',
  'keys delete',
  'credits grant',
  'credits show',
  'credits ledger',
  'usage show',
  'usage rebuild',
  'ledger export',
  'shares create',
  'shares revoke',
  'shares show',
  'console link',
  'serve',
  'spool replay',
];

t.test('tollgate --help lists every command, the token variable and the exit codes', async (t) => {
  const r = await runCli(['--help'], {});
  t.equal(r.code, 0);
  t.equal(r.stderr, '');
  for (const c of COMMANDS) t.match(r.stdout, new RegExp(`^ {2}tollgate ${c}\\b`, 'm'), c);
  const registered = GROUPS.flatMap((g) => Object.keys(g.commands).map((c) => `${g.name} ${c}`.trim()));
  t.same(registered.sort(), [...COMMANDS].sort(), 'no command is missing from the list above, nor extra');
  t.match(r.stdout, /TOLLGATE_ADMIN_TOKEN/);
  t.match(r.stdout, /never from a flag/);
  t.match(r.stdout, /Exit codes: 0 ok, 1 API error .*, 2 usage error/);

  t.equal((await runCli(['help'], {})).stdout, r.stdout, '`tollgate help` is the same');
  t.equal((await runCli(['-h'], {})).stdout, r.stdout, '-h is the same');
});

t.test('tollgate <group> --help lists the group commands and its notes', async (t) => {
  const results = await Promise.all(GROUPS.map((g) => runCli([g.name, '--help'], {})));
  for (const [i, g] of GROUPS.entries()) {
    const r = results[i]!;
    t.equal(r.code, 0, g.name);
    for (const c of COMMANDS.filter((c) => c.split(' ')[0] === g.name))
      t.match(r.stdout, `tollgate ${c}`, `${g.name} --help mentions ${c}`);
    for (const note of g.notes) t.ok(r.stdout.includes(note), `${g.name} --help has its notes`);
    for (const other of COMMANDS.filter((c) => c.split(' ')[0] !== g.name))
      t.notOk(r.stdout.includes(`tollgate ${other}`), `${g.name} --help is about ${g.name} only`);
  }
  const deep = await runCli(['keys', 'create', '--help'], {});
  t.equal(deep.code, 0, 'help after a command needs no other argument and no token');
  t.match(deep.stdout, /tollgate keys limits/);
});

t.test('a wrong invocation exits 2 with a short usage on stderr', async (t) => {
  const cases: Array<[string[], RegExp]> = [
    [[], /^error: missing command\n/],
    [['frobnicate'], /^error: unknown command "frobnicate"/],
    [['credits', 'refund', 'acme'], /^error: unknown command "tollgate credits refund"/],
    [['shares'], /^error: missing command after "tollgate shares"/],
    [['serve', 'now'], /^error: unexpected argument "now"/],
    [['credits', 'show', 'acme', '--jsn'], /^error: Unknown option '--jsn'/],
  ];
  const results = await Promise.all(cases.map(([args]) => runCli(args, {})));
  for (const [i, [args, message]] of cases.entries()) {
    const r = results[i]!;
    t.equal(r.code, 2, args.join(' ') || '(no args)');
    t.match(r.stderr, message);
    t.match(r.stderr, /\nUsage:\n/);
    t.match(r.stderr, /More: tollgate .*--help/);
    t.equal(r.stdout, '');
  }
});
