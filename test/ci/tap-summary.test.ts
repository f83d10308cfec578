// scripts/tap-summary.mjs is what turns tap's stream into CI's last line. CI shows only the end of the
// output, so the end must carry the count, and the failures by name and place.
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const script = fileURLToPath(new URL('../../scripts/tap-summary.mjs', import.meta.url));

function summarize(tap: string): { status: number | null; lines: string[] } {
  const run = spawnSync(process.execPath, [script], { input: tap, encoding: 'utf8' });
  return { status: run.status, lines: run.stdout.trimEnd().split('\n') };
}

const failing = [
  'TAP version 14',
  '# Subtest: test/a.test.ts',
  '    ok 1 - fine',
  '    not ok 2 - the inner check',
  '      ---',
  '      at:',
  '        fileName: test/a.test.ts',
  '        lineNumber: 42',
  '        columnNumber: 5',
  '      found: 1',
  '      wanted: 2',
  '      ...',
  '    1..2',
  'not ok 1 - test/a.test.ts # time=10ms',
  '  ---',
  '  at: top',
  '  ...',
  '1..1',
  '# { total: 3, pass: 1, fail: 2, skip: 1 }',
].join('\n');

t.test('a failing run ends with its failures, then the count, and exits 1', async (t) => {
  const { status, lines } = summarize(failing);
  t.equal(status, 1);
  t.equal(lines.at(-1), '1 passed, 2 failed, 1 skipped');
  const tail = lines.slice(lines.indexOf('# failed (2), innermost first:'));
  t.strictSame(tail, [
    '# failed (2), innermost first:',
    '    not ok 2 - the inner check',
    '      at:',
    '        fileName: test/a.test.ts',
    '        lineNumber: 42',
    '      found: 1',
    '      wanted: 2',
    'not ok 1 - test/a.test.ts # time=10ms',
    '  at: top',
    '1 passed, 2 failed, 1 skipped',
  ]);
  t.ok(lines.slice(0, 19).join('\n') === failing, 'the stream passes through unchanged');
});

t.test('a passing run ends with the count alone and exits 0', async (t) => {
  const { status, lines } = summarize('TAP version 14\nok 1 - x\n1..1\n# { total: 1, pass: 1 }\n');
  t.equal(status, 0);
  t.strictSame(lines.slice(-2), ['# { total: 1, pass: 1 }', '1 passed, 0 failed']);
});

t.test('no count line (tap crashed) is a failure', async (t) => {
  const { status, lines } = summarize('TAP version 14\nok 1 - x\n');
  t.equal(status, 1);
  t.equal(lines.at(-1), '0 passed, 1 failed');
});
