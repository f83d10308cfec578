// The tick anchor keeps process.nextTick's tick-object literal monomorphic across full GCs (V8 frees the
// maps of a literal no live object uses, and the literal's one-map feedback then goes MEGAMORPHIC).
import t from 'tap';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';

const anchorUrl = new URL('../src/tick-anchor.ts', import.meta.url).href;

/** In a fresh node: ticks, full GCs with the tick queue empty, one more tick; the literal's feedback states. */
function feedbackAfterGc(withAnchor: boolean): string[] {
  const script = `
    ${withAnchor ? `await import(${JSON.stringify(anchorUrl)});` : ''}
    const tick = () => new Promise((r) => process.nextTick(r));
    for (let i = 0; i < 100; i++) await tick();
    await new Promise((r) => setImmediate(r));
    gc(); gc();
    await tick();
    const fb = new Function('f', 'return %GetFeedback(f)')(process.nextTick);
    console.log(JSON.stringify(fb.filter((x) => String(x[0]).includes('DefineKeyed')).map((x) => String(x[1]))));
  `;
  // A plain node: the test runner's coverage preload (which tap's processinfo adds to every child's
  // NODE_OPTIONS, whatever env it is given) changes V8's feedback here; production runs without it. The
  // shell drops NODE_OPTIONS before it starts node.
  const out = execFileSync(
    '/bin/sh',
    [
      '-c',
      'unset NODE_OPTIONS; exec "$0" "$@"',
      process.execPath,
      '--allow-natives-syntax',
      '--expose-gc',
      '--input-type=module',
      '-e',
      script,
    ],
    { encoding: 'utf8' },
  );
  return JSON.parse(out) as string[];
}

t.test('with the anchor, every key of the tick literal stays monomorphic after full GCs', async (t) => {
  const states = feedbackAfterGc(true);
  t.equal(states.length, 5, `the literal's five defines (${states.join(',')})`);
  t.same(states, Array(5).fill('MONOMORPHIC'));
});

t.test('without it, V8 still turns them megamorphic (when this fails, Node no longer needs the anchor)', async (t) => {
  t.ok(feedbackAfterGc(false).includes('MEGAMORPHIC'));
});

t.test('src/main.ts imports the anchor before anything else', async (t) => {
  const firstImport = /^import .*$/m.exec(readFileSync(new URL('../src/main.ts', import.meta.url), 'utf8'))?.[0];
  t.match(firstImport, /^import '\.\/tick-anchor\.ts';/);
});
