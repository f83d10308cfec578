/**
 * How deep a JSON text nests, found by one linear pass before `JSON.parse` (SPEC §13: "parsing cost is
 * bounded before parsing"). `JSON.parse` of 2 MB of `[` nested a million deep took ~2 s on the main
 * thread and re-serialising it 3 s more; with the depth bounded (limits.max_json_depth, default 64)
 * parsing and building the upstream payload stay linear in the body.
 *
 * Strings are skipped with `indexOf('"')` (memchr speed), so a chat body — mostly string bytes — costs
 * little beyond the parse itself; only bytes outside strings are looked at one by one. The scan does not
 * validate: a text it passes may still be invalid JSON, which `JSON.parse` reports.
 */

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_SQUARE = 0x5b;
const OPEN_CURLY = 0x7b;
const CLOSE_SQUARE = 0x5d;
const CLOSE_CURLY = 0x7d;

/**
 * The index at which `text` opens its `max + 1`th nested array or object, or -1 when it never nests
 * deeper than `max`. Linear in the text; stops at the first offending bracket.
 */
export function findTooDeep(text: string, max: number): number {
  let depth = 0;
  const n = text.length;
  for (let i = 0; i < n; i++) {
    const c = text.charCodeAt(i);
    if (c === QUOTE) {
      // Skip to the closing quote: one preceded by an even run of backslashes.
      let j = i;
      for (;;) {
        j = text.indexOf('"', j + 1);
        if (j < 0) return -1; // unterminated: JSON.parse reports it
        let k = j - 1;
        while (text.charCodeAt(k) === BACKSLASH) k--;
        if ((j - 1 - k) % 2 === 0) break;
      }
      i = j;
    } else if (c === OPEN_SQUARE || c === OPEN_CURLY) {
      if (++depth > max) return i;
    } else if (c === CLOSE_SQUARE || c === CLOSE_CURLY) {
      depth--;
    }
  }
  return -1;
}
