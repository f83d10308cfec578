// The README's error code table and the code's table (src/http/errors.ts) list the same codes with the
// same statuses (STYLE: "a test fails when a code is missing from the docs").
//
// What this reads: the first Markdown table after the first heading that mentions errors ("Errors",
// "Error codes"), up to the next heading.
// In each row, the code is the first cell written as `snake_case` in backticks and the status is the
// first cell that is a 3-digit HTTP status, e.g.  | `missing_api_key` | 401 | authentication_error | … |
import t from 'tap';
import { existsSync, readFileSync } from 'node:fs';
import { ERROR_CODES } from '../../src/http/errors.ts';

// The reference moved out of the one-screen README (issue 27): the table lives in docs/reference.md.
const README = new URL('../../docs/reference.md', import.meta.url);

interface Row {
  code: string;
  status: number;
  line: number;
}

/** The rows of the error code table, or null when the README has no such heading. */
function errorTable(markdown: string): Row[] | null {
  const lines = markdown.split('\n');
  const heading = lines.findIndex((l) => /^#{1,6}\s.*\berrors?\b/i.test(l));
  if (heading < 0) return null;
  const rows: Row[] = [];
  let inTable = false;
  for (let i = heading + 1; i < lines.length; i++) {
    const line = lines[i]!.trim();
    if (/^#{1,6}\s/.test(line)) break;
    if (!line.startsWith('|')) {
      if (inTable) break;
      continue;
    }
    inTable = true;
    const cells = line
      .replace(/^\|/, '')
      .replace(/\|$/, '')
      .split('|')
      .map((c) => c.trim());
    if (cells.every((c) => /^:?-+:?$/.test(c))) continue; // the separator row
    const code = cells.map((c) => /^`([a-z][a-z0-9_]*)`$/.exec(c)?.[1]).find((c) => c !== undefined);
    const status = cells.map((c) => /^`?([1-5]\d\d)`?$/.exec(c)?.[1]).find((s) => s !== undefined);
    if (code !== undefined && status !== undefined) rows.push({ code, status: Number(status), line: i + 1 });
  }
  return rows;
}

t.test('README.md has an error code table', async (t) => {
  t.ok(existsSync(README), 'docs/reference.md exists');
  if (!existsSync(README)) return;
  const rows = errorTable(readFileSync(README, 'utf8'));
  t.ok(rows, 'a heading mentioning "Errors" followed by a table');
  t.ok(rows && rows.length > 0, 'the table has `code` | status rows');
});

t.test('every code of ERROR_CODES is in the README with its status, and nothing else is', async (t) => {
  if (!existsSync(README)) {
    t.fail('README.md is missing');
    return;
  }
  const rows = errorTable(readFileSync(README, 'utf8')) ?? [];
  const byCode = new Map<string, Row[]>();
  for (const r of rows) byCode.set(r.code, [...(byCode.get(r.code) ?? []), r]);
  for (const [code, { status }] of Object.entries(ERROR_CODES)) {
    const found = byCode.get(code);
    t.ok(found, `README documents ${code}`);
    if (found) t.equal(found[0]!.status, status, `${code} is documented as ${status} (README line ${found[0]!.line})`);
  }
  for (const [code, found] of byCode) {
    t.ok(code in ERROR_CODES, `README line ${found[0]!.line}: ${code} is a code the gateway can return`);
    t.equal(found.length, 1, `${code} is listed once`);
  }
});

t.test('the table parser reads the documented format', async (t) => {
  const md = [
    '# Tollgate',
    '',
    '| `port` | 900 |',
    '',
    '## Errors',
    '',
    "Every error body is OpenAI's envelope.",
    '',
    '| Code | Status | Type |',
    '|---|:---:|---|',
    '| `missing_api_key` | 401 | `authentication_error` |',
    '| `not_found` | `404` | x |',
    '',
    '| `other_table` | 500 |',
    '',
    '## Next',
    '| `after` | 400 |',
  ].join('\n');
  t.same(
    errorTable(md)?.map((r) => [r.code, r.status]),
    [
      ['missing_api_key', 401],
      ['not_found', 404],
    ],
  );
  t.equal(errorTable('# Nothing here\n'), null);
  t.same(
    errorTable('### Error codes\n| `x_y` | 418 |\n')?.map((r) => r.code),
    ['x_y'],
  );
});
