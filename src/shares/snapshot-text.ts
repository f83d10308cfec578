/**
 * The published text of one member of a JSON object (SPEC §2a: snapshots are returned exactly as
 * published). `JSON.stringify(JSON.parse(x))` is not `x`: it drops whitespace, rewrites escapes and
 * numbers (`1.0` → `1`, 2^64 loses digits), collapses duplicate keys and moves integer-like keys first.
 * So the share stores the snapshot's own characters, cut out of the request body, and reads splice
 * them into the response without a parse.
 */

// Sticky scanners: one regex step per string or primitive instead of a JS loop per character
// (5 MB strings scan in 9-100 ms here, without regex stack trouble).
const STRING = /"[^"\\]*(?:\\[^][^"\\]*)*"/y;
const PRIMITIVE = /[^,}\]\s]*/y;
const STRUCTURE = /["{}[\]]/g;
const WS = /[ \t\n\r]*/y;

function skipWs(s: string, i: number): number {
  WS.lastIndex = i;
  WS.test(s);
  return WS.lastIndex;
}

function endOfString(s: string, i: number): number {
  STRING.lastIndex = i;
  if (!STRING.test(s)) throw new SyntaxError(`unterminated string at ${i}`);
  return STRING.lastIndex;
}

/** Index just past the JSON value that starts at `i`. */
function endOfValue(s: string, i: number): number {
  const c = s[i];
  if (c === '"') return endOfString(s, i);
  if (c !== '{' && c !== '[') {
    PRIMITIVE.lastIndex = i;
    PRIMITIVE.test(s);
    return PRIMITIVE.lastIndex;
  }
  let depth = 0;
  STRUCTURE.lastIndex = i;
  for (let m = STRUCTURE.exec(s); m !== null; m = STRUCTURE.exec(s)) {
    const ch = m[0];
    if (ch === '"') STRUCTURE.lastIndex = endOfString(s, m.index);
    else if (ch === '{' || ch === '[') depth++;
    else if (--depth === 0) return m.index + 1;
  }
  throw new SyntaxError(`unterminated value at ${i}`);
}

/**
 * The text of member `name` of the JSON object `json`, exactly as written (the last one when the key
 * repeats, as JSON.parse keeps the last); undefined when absent. `json` must already have passed
 * JSON.parse: the scanner trusts its syntax. Keys are compared after unescaping ("snap\u0073hot").
 */
export function memberText(json: string, name: string): string | undefined {
  let i = skipWs(json, 0);
  if (json[i] !== '{') return undefined;
  let found: string | undefined;
  i = skipWs(json, i + 1);
  if (json[i] === '}') return undefined;
  for (;;) {
    const keyEnd = endOfString(json, i);
    const raw = json.slice(i + 1, keyEnd - 1);
    const key = raw.includes('\\') ? (JSON.parse(json.slice(i, keyEnd)) as string) : raw;
    const start = skipWs(json, skipWs(json, keyEnd) + 1); // past ':'
    const end = endOfValue(json, start);
    if (key === name) found = json.slice(start, end);
    i = skipWs(json, end);
    if (json[i] !== ',') return found;
    i = skipWs(json, i + 1);
  }
}
