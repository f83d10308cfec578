import t from 'tap';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ADMIN_TOKEN, startGateway } from '../helpers/gateway.ts';
import { freePort } from '../helpers/ports.ts';
import { sharesS3Config, startS3 } from '../helpers/s3.ts';
import { parseFields, runCli } from './run-cli.ts';

const SLUG = /^[1-9A-HJ-NP-Za-km-z]{22}$/;

const s3 = await startS3(t);
const gw = await startGateway(t, { config: { shares: { s3: sharesS3Config(s3) } } });
const env = { TOLLGATE_ADMIN_TOKEN: ADMIN_TOKEN, TOLLGATE_ADMIN_URL: gw.adminUrl, TOLLGATE_URL: gw.url };
const cli = (...args: string[]) => runCli(args, env);
const dir = await mkdtemp(join(tmpdir(), 'tollgate-cli-shares-'));
t.teardown(() => rm(dir, { recursive: true, force: true }));

// Written with spacing and a 1.0 that JSON.stringify would rewrite: the share must keep these bytes.
const SNAPSHOT =
  '{ "title": "Trip plan",\n  "model": "sim-small", "messages": [ {"role": "user", "content": "caf\\u00e9 ☕"}, {"role": "assistant", "content": [{"type": "text", "text": "Bonjour"}]} ], "n": 1.0 }';
const PNG = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
const NOTES = Buffer.from('hello world\n');

t.test('shares create publishes the snapshot as written and uploads each file to its presigned URL', async (t) => {
  await writeFile(join(dir, 'snap.json'), `\uFEFF${SNAPSHOT}\n`);
  await writeFile(join(dir, 'photo.PNG'), PNG);
  await writeFile(join(dir, 'notes.txt'), NOTES);
  const r = await cli(
    'shares',
    'create',
    '--account',
    'acme',
    '--file',
    join(dir, 'snap.json'),
    '--upload',
    `photo.png=${join(dir, 'photo.PNG')}`,
    '--upload',
    `notes.txt=${join(dir, 'notes.txt')}`,
  );
  t.equal(r.code, 0, 'exits 0', { stderr: r.stderr });
  const f = parseFields(r.stdout);
  t.match(f.slug, SLUG);
  t.equal(f.files, 'photo.png, notes.txt');
  t.match(r.stderr, /uploaded photo\.png \(8 bytes, image\/png\)/);
  t.match(r.stderr, /uploaded notes\.txt \(12 bytes, text\/plain\)/);

  const res = await fetch(`${gw.url}/v1/shares/${f.slug}`);
  t.equal(res.status, 200);
  const text = await res.text();
  t.ok(text.includes(`"snapshot":${SNAPSHOT},`), 'the snapshot comes back byte for byte as the file had it');
  const read = JSON.parse(text);
  t.same(
    read.files.map((x: { name: string; content_type: string; size: number }) => [x.name, x.content_type, x.size]),
    [
      ['photo.png', 'image/png', 8],
      ['notes.txt', 'text/plain', 12],
    ],
  );
  for (const [i, want] of [PNG, NOTES].entries()) {
    const got = await fetch(read.files[i].url);
    t.equal(got.status, 200);
    t.same(Buffer.from(await got.arrayBuffer()), want, `${read.files[i].name}: the bytes reached S3`);
  }

  const show = await cli('shares', 'show', f.slug!);
  t.equal(show.code, 0, 'exits 0', { stderr: show.stderr });
  t.match(parseFields(show.stdout), { slug: f.slug, title: 'Trip plan', model: 'sim-small', messages: '2' });
  t.match(show.stdout, /^\[user\] café ☕$/m);
  t.match(show.stdout, /^\[assistant\] Bonjour$/m);
  t.match(show.stdout, /^NAME\s+CONTENT_TYPE\s+SIZE/m);
  t.match(show.stdout, /^photo\.png\s+image\/png\s+8\s/m);

  const json = await cli('shares', 'show', f.slug!, '--json');
  t.equal(JSON.parse(json.stdout).snapshot.n, 1);
});

t.test('shares create --json prints the created body; a share without files needs no --upload', async (t) => {
  await writeFile(join(dir, 'plain.json'), '{"messages": [{"role": "user", "content": "hi"}]}');
  const r = await cli('shares', 'create', '--account', 'acme', '--file', join(dir, 'plain.json'), '--json');
  t.equal(r.code, 0, 'exits 0', { stderr: r.stderr });
  const body = JSON.parse(r.stdout);
  t.match(body, { slug: SLUG, account: 'acme', uploads: [] });
});

t.test('shares revoke makes the public read answer 410; revoking an unknown share exits 1', async (t) => {
  await writeFile(join(dir, 'gone.json'), '{"messages": [{"role": "user", "content": "bye"}]}');
  const slug = JSON.parse((await cli('shares', 'create', '--account', 'acme', '--file', join(dir, 'gone.json'), '--json')).stdout).slug;
  const r = await cli('shares', 'revoke', slug);
  t.equal(r.code, 0, 'exits 0', { stderr: r.stderr });
  t.equal(r.stdout.trim(), `revoked ${slug}`);
  t.equal((await fetch(`${gw.url}/v1/shares/${slug}`)).status, 410);

  const shown = await cli('shares', 'show', slug);
  t.equal(shown.code, 1);
  t.match(shown.stderr, /^error: share_revoked \(HTTP 410\)/);

  const unknown = await cli('shares', 'revoke', '1111111111111111111111', '--json');
  t.equal(unknown.code, 1);
  t.match(unknown.stderr, /^error: share_not_found \(HTTP 404\)/);

  const malformed = await cli('shares', 'show', 'short');
  t.equal(malformed.code, 1);
  t.match(malformed.stderr, /path\.slug: String should have at least 22 characters \[string_too_short\]/);
});

t.test('a failed upload exits 1 and names the share that was created without the file', async (t) => {
  const gone = await startS3(t);
  const s3Config = {
    endpoint: gone.endpoint,
    region: 'us-east-1',
    bucket: gone.bucket,
    force_path_style: true,
    access_key_id: gone.accessKeyId,
    secret_access_key: gone.secretAccessKey,
  };
  const gw2 = await startGateway(t, { config: { shares: { s3: s3Config } } });
  await gone.close();
  await writeFile(join(dir, 'up.json'), '{"messages": [{"role": "user", "content": "x"}]}');
  await writeFile(join(dir, 'up.txt'), NOTES);
  const r = await runCli(
    ['shares', 'create', '--account', 'acme', '--file', join(dir, 'up.json'), '--upload', `notes.txt=${join(dir, 'up.txt')}`],
    { ...env, TOLLGATE_ADMIN_URL: gw2.adminUrl },
  );
  t.equal(r.code, 1);
  const m =
    /^error: upload_failed: upload of notes\.txt failed: .*; share ([1-9A-HJ-NP-Za-km-z]{22}) was created without it \(revoke it with: tollgate shares revoke \1\)/.exec(
      r.stderr,
    );
  t.ok(m, 'the error names the share and how to revoke it', { stderr: r.stderr });
  t.equal(r.stdout, '');
});

t.test('shares input errors exit 2 before any request', async (t) => {
  // Nothing listens on this admin URL: a command that sent a request would exit 1, not 2.
  const offline = { ...env, TOLLGATE_ADMIN_URL: `http://127.0.0.1:${await freePort()}` };
  const cli = (...args: string[]) => runCli(args, offline);
  await writeFile(join(dir, 'broken.json'), '{"messages": [');
  await writeFile(join(dir, 'ok.json'), '{"messages": [{"role": "user", "content": "x"}]}');
  const cases: Array<[string[], RegExp]> = [
    [['shares', 'create', '--file', join(dir, 'ok.json')], /--account is required/],
    [['shares', 'create', '--account', 'acme'], /--file is required/],
    [['shares', 'create', '--account', 'acme', '--file', join(dir, 'missing.json')], /cannot read snapshot .*missing\.json: ENOENT/],
    [['shares', 'create', '--account', 'acme', '--file', join(dir, 'broken.json')], /broken\.json is not valid JSON/],
    [['shares', 'create', '--account', 'acme', '--file', join(dir, 'ok.json'), '--upload', 'nopath'], /--upload wants name=path/],
    [
      ['shares', 'create', '--account', 'acme', '--file', join(dir, 'ok.json'), '--upload', `a=${join(dir, 'nope.bin')}`],
      /cannot read upload .*nope\.bin: ENOENT/,
    ],
    [
      [
        'shares',
        'create',
        '--account',
        'acme',
        '--file',
        join(dir, 'ok.json'),
        '--upload',
        `a=${join(dir, 'ok.json')}`,
        '--upload',
        `a=${join(dir, 'ok.json')}`,
      ],
      /given twice/,
    ],
    [['shares', 'revoke'], /missing <slug>/],
  ];
  const results = await Promise.all(cases.map(([args]) => cli(...args)));
  for (const [i, [args, message]] of cases.entries()) {
    t.equal(results[i]!.code, 2, args.slice(0, 4).join(' '));
    t.match(results[i]!.stderr, message);
    t.equal(results[i]!.stdout, '');
  }
});
