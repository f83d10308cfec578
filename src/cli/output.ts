/** Output for the CLI: aligned tables and `key: value` blocks for people, JSON for scripts. */

/** Where the CLI writes; each call prints one or more whole lines (a newline is added). */
export interface Io {
  out(text: string): void;
  err(text: string): void;
}

/** Pretty JSON, as `--json` prints it: the gateway's response body unchanged. */
export function json(value: unknown): string {
  return JSON.stringify(value, null, 2);
}

/** Control characters (C0, DEL, C1) and bidirectional overrides: what a terminal acts on instead of showing. */
const UNPRINTABLE = /[\u0000-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]/g;

/**
 * A value as a table or field shows it: control characters escaped as JSON would (`\n`, `\u001b`). Key
 * names, notes and share titles are user content (a console member names keys): printed raw, a newline
 * broke the table's rows and an escape sequence (`\u001b]…`, `\u001b[2J`) ran in the operator's terminal.
 * `--json` is unchanged (JSON escapes them itself).
 */
export function printable(v: string): string {
  return v.replace(UNPRINTABLE, (c) => (c === '\n' ? '\\n' : `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`));
}

/** A table with an upper-case header row; columns padded to their widest cell, the last one not padded. */
export function table(columns: string[], cells: string[][]): string {
  const rows = cells.map((r) => r.map(printable));
  const widths = columns.map((c, i) => Math.max(c.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: string[]) =>
    cells
      .map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i]!)))
      .join('  ')
      .trimEnd();
  return [line(columns.map((c) => c.toUpperCase())), ...rows.map(line)].join('\n');
}

/**
 * A table printed a batch of rows at a time, for listings too long to hold (`credits ledger --all`): the
 * header comes with the first batch; a column is as wide as its widest cell so far, so a later, wider
 * cell shifts the columns after it from that row on.
 */
export function tableStream(columns: string[]): (cells: string[][]) => string {
  const widths = columns.map((c) => c.length);
  let first = true;
  return (cells) => {
    const rows = cells.map((r) => r.map(printable));
    for (const r of rows) r.forEach((c, i) => (widths[i] = Math.max(widths[i] ?? 0, c.length)));
    const line = (cells: string[]) =>
      cells
        .map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i]!)))
        .join('  ')
        .trimEnd();
    const out = rows.map(line);
    if (first) out.unshift(line(columns.map((c) => c.toUpperCase())));
    first = false;
    return out.join('\n');
  };
}

/** `key: value` lines with the values aligned. */
export function fields(pairs: Array<[string, string]>): string {
  const width = Math.max(0, ...pairs.map(([k]) => k.length)) + 1;
  return pairs.map(([k, v]) => `${`${k}:`.padEnd(width)}  ${printable(v)}`.trimEnd()).join('\n');
}

/** An optional cell: `-` when there is nothing to show. */
export function cell(v: unknown): string {
  return v === undefined || v === null || v === '' ? '-' : String(v);
}
