/**
 * The data of one SSE event (WHATWG HTML §9.2.6 "Interpreting an event stream"), for lines ending in
 * LF or CRLF. Every upstream we front (OpenAI, vLLM, SGLang, TGI, llama.cpp, Ollama) uses one of those;
 * lone-CR line endings are not recognised.
 */

const LF = 0x0a;
const CR = 0x0d;
const SPACE = 0x20;
const COLON = 0x3a;
const NEWLINE = Buffer.from('\n', 'latin1');
const DONE = Buffer.from('[DONE]', 'latin1');

/** True when `ev[start, end)` is a `data` field line: `data` then `:` or end of line. Byte compares: compare() is a ~60 ns native call. */
function isDataLine(ev: Buffer, start: number, end: number): boolean {
  if (end - start < 4 || ev[start] !== 0x64 || ev[start + 1] !== 0x61 || ev[start + 2] !== 0x74 || ev[start + 3] !== 0x61) return false;
  return end === start + 4 || ev[start + 4] === COLON;
}

/**
 * The event's data (data lines joined by LF), or null when the event has no data field (a comment or
 * keep-alive, which the SSE spec does not dispatch). One data line — the only shape OpenAI-compatible
 * servers send — is returned as a zero-copy view of `ev`.
 */
export function eventData(ev: Buffer): Buffer | null {
  let first: Buffer | null = null;
  let parts: Buffer[] | null = null;
  let pos = 0;
  while (pos < ev.length) {
    const nl = ev.indexOf(LF, pos);
    const next = nl === -1 ? ev.length : nl + 1;
    let end = nl === -1 ? ev.length : nl;
    if (end > pos && ev[end - 1] === CR) end--;
    if (isDataLine(ev, pos, end)) {
      // The value starts after "data:" and one optional space (the spec strips exactly one).
      let v = Math.min(pos + 5, end);
      if (v < end && ev[v] === SPACE) v++;
      const value = ev.subarray(v, end);
      if (first === null) first = value;
      else (parts ??= [first]).push(value);
    }
    pos = next;
  }
  if (parts === null) return first;
  const joined: Buffer[] = [];
  for (const p of parts) joined.push(p, NEWLINE);
  joined.pop();
  return Buffer.concat(joined);
}

/** True for the stream terminator `data: [DONE]`. */
export function isDone(data: Buffer): boolean {
  return data.length === DONE.length && data.equals(DONE);
}
