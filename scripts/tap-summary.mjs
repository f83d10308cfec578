// CI filter: `npx tap --reporter=tap | node scripts/tap-summary.mjs`.
// Passes TAP through unchanged and ends with one line, `N passed, N failed` (+ `, N skipped`), built
// from tap's own final count line `# { total: 8, pass: 7, fail: 1, skip: 1 }` (NOTES.md §9): no tap
// reporter prints that line itself. Exits 1 when anything failed or no count line arrived (tap crashed,
// or the pipe was cut), so `set -o pipefail` is not the only guard.
import { createInterface } from 'node:readline';

// Only the root-level count line: nested subtests never print one, and it has no indentation.
const COUNTS = /^# \{ (total: \d+.*) \}$/;

/** Parse `total: 8, pass: 7, fail: 1` into { total: 8, pass: 7, fail: 1 }. */
function parseCounts(body) {
  const counts = {};
  for (const pair of body.split(', ')) {
    const [key, value] = pair.split(': ');
    if (key !== undefined && value !== undefined) counts[key] = Number(value);
  }
  return counts;
}

// Every `not ok` line, with the first lines of its diagnostic block, is printed again just above the
// count: CI shows only the end of this output, and the end must say which test failed and where.
const NOT_OK = /^(\s*)not ok \d+ - /;
const failures = [];
let diag = null; // { indent, lines } while inside the YAML block of the last `not ok`

let last = null;
for await (const line of createInterface({ input: process.stdin, crlfDelay: Infinity })) {
  process.stdout.write(line + '\n');
  const match = COUNTS.exec(line);
  if (match) last = parseCounts(match[1]);
  if (diag !== null) {
    if (diag.lines.length < 14 && line.startsWith(diag.indent)) diag.lines.push(line);
    if (line.trim() === '...' || !line.startsWith(diag.indent)) diag = null;
  }
  const notOk = NOT_OK.exec(line);
  if (notOk && failures.length < 40) {
    diag = { indent: notOk[1] + '  ', lines: [] };
    failures.push({ line, diag: diag.lines });
  }
}

if (failures.length > 0) {
  console.log(`# failed (${failures.length}${failures.length === 40 ? '+' : ''}), innermost first:`);
  for (const f of failures) {
    console.log(f.line);
    for (const d of f.diag) if (!/^\s*(---|\.\.\.|typeName:|columnNumber:)/.test(d)) console.log(d);
  }
}

if (last === null) {
  console.log('tap-summary: no "# { total: … }" line in the TAP stream (did tap crash?)');
  console.log('0 passed, 1 failed');
  process.exit(1);
}
const passed = last.pass ?? 0;
const failed = last.fail ?? 0;
const skipped = (last.skip ?? 0) + (last.todo ?? 0);
console.log(`${passed} passed, ${failed} failed` + (skipped > 0 ? `, ${skipped} skipped` : ''));
process.exitCode = failed > 0 ? 1 : 0;
