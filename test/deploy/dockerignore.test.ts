// The image's build context is what .dockerignore leaves: every COPY source of the Dockerfile must
// survive it (else `COPY … (1 filtered out using .dockerignore)` fails the build), and every file a
// copied file imports must be copied too (bin/tollgate.js once imported scripts/node-check.mjs, which
// was never copied: the CLI inside the image failed). Bare imports must be production dependencies
// (the deps stage runs `npm ci --omit=dev`). The real build runs in scripts/container-smoke.sh.
import t from 'tap';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { dirname, join, normalize } from 'node:path';

const root = new URL('../../', import.meta.url).pathname;
const read = (f: string) => readFileSync(join(root, f), 'utf8');

/** One .dockerignore line as a matcher: Go filepath.Match globs plus `**`, `!` for exceptions. */
function compile(line: string): { re: RegExp; negate: boolean } {
  const negate = line.startsWith('!');
  const pat = normalize((negate ? line.slice(1) : line).trim()).replace(/^\/+|\/+$/g, '');
  let re = '';
  for (let i = 0; i < pat.length; i++) {
    const c = pat[i]!;
    if (c === '*' && pat[i + 1] === '*') {
      re += '.*';
      i++;
      if (pat[i + 1] === '/') i++;
    } else if (c === '*') re += '[^/]*';
    else if (c === '?') re += '[^/]';
    else re += c.replace(/[.+^${}()|[\]\\]/g, '\\$&');
  }
  // A pattern that names a directory excludes everything under it.
  return { re: new RegExp(`^${re}(/.*)?$`), negate };
}

/** Docker's rule: the last pattern that matches a path decides; `!` re-includes. */
function ignoredBy(dockerignore: string): (path: string) => boolean {
  const rules = dockerignore
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l && !l.startsWith('#'))
    .map(compile);
  return (path) => {
    let ignored = false;
    for (const r of rules) if (r.re.test(path)) ignored = !r.negate;
    return ignored;
  };
}

/** Sources of the Dockerfile's `COPY` lines that read the build context (not `--from=` a stage). */
function copySources(dockerfile: string): string[] {
  return dockerfile
    .split('\n')
    .filter((l) => /^COPY\s/.test(l) && !/--from=/.test(l))
    .flatMap((l) => l.trim().split(/\s+/).slice(1, -1))
    .filter((s) => !s.startsWith('--'))
    .map((s) => s.replace(/^\.\/|\/$/g, ''));
}

/** Relative and bare module specifiers a file loads at run time (`import type` is erased). */
function imports(text: string): string[] {
  const found: string[] = [];
  for (const m of text.matchAll(/^\s*(?:import|export)\s+(?!type\s)[^'";]*?\sfrom\s+['"]([^'"]+)['"]/gm)) found.push(m[1]!);
  for (const m of text.matchAll(/^\s*import\s+['"]([^'"]+)['"]/gm)) found.push(m[1]!);
  for (const m of text.matchAll(/\bimport\(\s*['"]([^'"]+)['"]\s*\)/g)) found.push(m[1]!);
  return found;
}

const tracked = execFileSync('git', ['ls-files'], { cwd: root, encoding: 'utf8' }).split('\n').filter(Boolean);
const ignored = ignoredBy(read('.dockerignore'));
const context = new Set(tracked.filter((f) => !ignored(f)));
const sources = copySources(read('Dockerfile'));
const image = new Set([...context].filter((f) => sources.some((s) => f === s || f.startsWith(`${s}/`))));

t.test('the ignore matcher follows Docker: directories, globs, last match wins', async (t) => {
  const m = ignoredBy('scripts\n!scripts/keep.ts\n*.log\ndocs/**/x.md\n');
  t.ok(m('scripts/a.ts'));
  t.notOk(m('scripts/keep.ts'));
  t.ok(m('a.log'));
  t.notOk(m('src/a.log'), '* does not cross /');
  t.ok(m('docs/a/b/x.md'));
  t.notOk(m('src/main.ts'));
});

t.test('every COPY source of the build context survives .dockerignore', async (t) => {
  t.ok(sources.length >= 6, `COPY sources: ${sources.join(', ')}`);
  for (const s of sources) {
    const files = [...context].filter((f) => f === s || f.startsWith(`${s}/`));
    t.ok(files.length > 0, `${s} is in the build context`);
    t.notOk(ignored(s), `${s} itself is not ignored`);
  }
  for (const need of ['src/main.ts', 'bin/tollgate.js', 'scripts/healthcheck.ts', 'scripts/node-check.mjs', 'config/tollgate.yaml'])
    t.ok(image.has(need), `${need} is in the image`);
  for (const secret of ['.env', 'test/helpers/redis.ts', 'docs/operations.md']) t.notOk(image.has(secret), `${secret} stays out`);
});

t.test('every file a copied file imports is in the image, every package a production dependency', async (t) => {
  const pkg = JSON.parse(read('package.json')) as { dependencies: Record<string, string> };
  const deps = new Set(Object.keys(pkg.dependencies));
  const missing: string[] = [];
  let checked = 0;
  for (const file of image) {
    if (!/\.(ts|js|mjs)$/.test(file)) continue;
    for (const spec of imports(read(file))) {
      checked++;
      if (spec.startsWith('node:')) continue;
      if (spec.startsWith('.')) {
        const target = normalize(join(dirname(file), spec));
        if (!image.has(target)) missing.push(`${file} imports ${spec} (${target})`);
      } else {
        const name = spec.startsWith('@') ? spec.split('/').slice(0, 2).join('/') : spec.split('/')[0]!;
        if (!deps.has(name)) missing.push(`${file} imports ${name}, not a production dependency`);
      }
    }
  }
  t.ok(checked > 200, `${checked} imports checked`);
  t.same(missing, [], 'nothing the image runs is missing from it');
});

t.test('the scan catches what broke the CLI in the image', async (t) => {
  t.same(
    imports(
      `import { requireNode } from '../scripts/node-check.mjs';\nimport type { X } from './x.ts';\nconst m = await import('./y.ts');`,
    ),
    ['../scripts/node-check.mjs', './y.ts'],
  );
  const before = ignoredBy('scripts\n');
  t.ok(before('scripts/node-check.mjs'), 'the old .dockerignore dropped the script bin/tollgate.js imports');
});
