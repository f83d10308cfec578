/**
 * One pass over an event's JSON data, without parsing it: finds the string values of the keys that
 * carry generated text (handing their raw bytes to a TextCollector) and tells whether a `"usage"` key
 * holds an object (so the event must be parsed) rather than `null` (OpenAI sends that on every chunk).
 *
 * Why a JS byte loop and not Buffer.indexOf per key: on a ~240-byte chunk event, each indexOf with a
 * Buffer needle costs ~240 ns (native call), and six keys made ~2 µs per event; this loop visits each
 * byte once (~0.6 ns) and looks closer only at a quote followed by a key's first two letters.
 *
 * Why it is sound without tracking string state: inside a JSON string every quote is escaped, so
 * `"content"` with an unescaped closing quote followed by `:` can only be a key. The one way to fake it,
 * an escaped opening quote (`"x\"content":`), is rejected by checking for an escaping backslash.
 */
import type { TextCollector } from './text-slices.ts';

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const COLON = 0x3a;
const OPEN_BRACE = 0x7b;

const key = (k: string): Uint8Array => new Uint8Array(Buffer.from(k, 'latin1'));
/** Key names after the opening quote, closing quote included. `reasoning` is vLLM ≥ 0.10's `reasoning_content`. */
const CONTENT = key('content"');
const REASONING_CONTENT = key('reasoning_content"');
const REASONING = key('reasoning"');
const REFUSAL = key('refusal"');
const ARGUMENTS = key('arguments"');
const USAGE = key('usage"');

const pair = (s: string): number => (s.charCodeAt(0) << 8) | s.charCodeAt(1);
const CO = pair('co');
const RE = pair('re');
const AR = pair('ar');
const US = pair('us');

/** JSON insignificant whitespace. */
function isWs(b: number | undefined): boolean {
  return b === 0x20 || b === 0x09 || b === 0x0a || b === 0x0d;
}

/** Index just past `k` when `buf` holds it at `at` (before `limit`), else -1. */
function matchKey(buf: Buffer, at: number, k: Uint8Array, limit: number): number {
  if (at + k.length > limit) return -1;
  for (let i = 0; i < k.length; i++) if (buf[at + i] !== k[i]) return -1;
  return at + k.length;
}

/** Index of the quote closing the JSON string whose body starts at `from`, or -1 if it is not before `limit`. */
export function findStringEnd(buf: Buffer, from: number, limit = buf.length): number {
  for (let i = from; i < limit; i++) {
    const b = buf[i];
    if (b === BACKSLASH) i++; // skip the escaped byte (\" \\ \n \uXXXX's 'u')
    else if (b === QUOTE) return i;
  }
  return -1;
}

/** True when the byte at `pos` follows an odd run of backslashes (none before `floor` count). */
function isEscaped(buf: Buffer, pos: number, floor: number): boolean {
  let n = 0;
  for (let i = pos - 1; i >= floor && buf[i] === BACKSLASH; i--) n++;
  return (n & 1) === 1;
}

/**
 * Looks at the quote at `i` (followed by a key's first letter). Returns the index to resume scanning
 * from (the closing quote of a collected value, or `i`), or -2 when it is `"usage"` with an object value.
 */
function atQuote(data: Buffer, i: number, start: number, limit: number, text: TextCollector): number {
  let end = -1;
  let isUsage = false;
  switch (data[i + 1]) {
    case 0x63: // c
      end = matchKey(data, i + 1, CONTENT, limit);
      break;
    case 0x72: // r
      end = matchKey(data, i + 1, REASONING_CONTENT, limit);
      if (end === -1) end = matchKey(data, i + 1, REASONING, limit);
      if (end === -1) end = matchKey(data, i + 1, REFUSAL, limit);
      break;
    case 0x61: // a
      end = matchKey(data, i + 1, ARGUMENTS, limit);
      break;
    default: // u
      end = matchKey(data, i + 1, USAGE, limit);
      isUsage = true;
  }
  if (end === -1 || (i > start && data[i - 1] === BACKSLASH && isEscaped(data, i, start))) return i;
  let j = end;
  while (j < limit && isWs(data[j])) j++;
  if (j >= limit || data[j] !== COLON) return i;
  j++;
  while (j < limit && isWs(data[j])) j++;
  if (j >= limit) return i;
  if (isUsage) return data[j] === OPEN_BRACE ? -2 : i;
  if (data[j] !== QUOTE) return i;
  const close = findStringEnd(data, j + 1, limit);
  if (close === -1) return limit; // malformed: nothing after this is trustworthy
  text.append(data, j + 1, close);
  return close; // the value's bytes cannot hold a key
}

/**
 * Scans one event's data, `data[start, end)`: appends text values to `text` and returns true when a
 * `"usage"` key has an object value. Malformed data (an unterminated string) ends the scan quietly: metering never throws.
 * The loop stays tiny (a quote, then one of four letter pairs) so it runs at ~0.6 ns per byte; the
 * rare candidates go to atQuote.
 */
export function scanData(data: Buffer, start: number, end: number, text: TextCollector): boolean {
  let usageObject = false;
  const last = end - 2; // a key candidate needs two bytes after its quote
  for (let i = start; i < last; i++) {
    if (data[i] !== QUOTE) continue;
    // The first two letters of the keys: "co", "re", "ar", "us". This skips "created", "choices",
    // "chatcmpl-…" and the like without a call; only ~2 candidates per chunk event remain.
    const c2 = (data[i + 1]! << 8) | data[i + 2]!;
    if (c2 !== CO && c2 !== RE && c2 !== AR && c2 !== US) continue;
    const next = atQuote(data, i, start, end, text);
    if (next === -2) usageObject = true;
    else i = next;
  }
  return usageObject;
}
