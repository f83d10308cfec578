/**
 * Bounded request body reading (SPEC §1.2, §13): `Content-Type` must be JSON (415), the body at most
 * `maxBytes` (413, refused from `content-length` before reading when declared), complete within the
 * budget's timeout (408), JSON errors and nesting past the depth limit → 422 `json_invalid`. Nothing is
 * buffered past the limit.
 */
import type { IncomingMessage } from 'node:http';
import { StringDecoder } from 'node:string_decoder';
import { GatewayError, invalid } from './errors.ts';
import type { BodyBudget } from '../limits/body-budget.ts';
import { findTooDeep } from './json-depth.ts';

/** Throws 415 unless the request declares a JSON body (`application/json`, parameters allowed). */
export function requireJson(req: IncomingMessage): void {
  const ct = req.headers['content-type'];
  // What nearly every client sends, compared before anything is split or lowered.
  if (ct === 'application/json') return;
  const base = ct?.split(';', 1)[0]!.trim().toLowerCase();
  if (base !== 'application/json') {
    throw new GatewayError(
      'unsupported_media_type',
      `Content-Type must be application/json, got ${ct ? JSON.stringify(ct.slice(0, 100)) : 'none'}.`,
    );
  }
}

function tooLarge(maxBytes: number): GatewayError {
  return new GatewayError('request_too_large', `Request body exceeds the limit of ${maxBytes} bytes.`);
}

/**
 * Rejects with `err` once the rest of a refused body was read and dropped, or the client left, or `maxMs`
 * passed. A response sent while the client is still uploading is followed by the socket's close, and the
 * client, mid-write, sees a reset instead of the 413/429/503 (15 of 60 refused 4 MB uploads did on
 * loopback), which an SDK does not retry as it retries a 503. Dropped bytes cost no memory. The bound is
 * `server.body_timeout_ms` (10 s by default), the time any body gets: a fixed 2 s was too short for 60
 * concurrent refused 4 MB uploads on a loaded 2-core machine (issue 27, a CI flake of
 * test/e2e/hostile-memory.test.ts), and no bound at all let a refused trickle wait for the request timeout.
 */
export function refuseAfterDrain(req: IncomingMessage, err: unknown, maxMs?: number): Promise<never> {
  return new Promise((_resolve, reject) => {
    if (req.complete || req.destroyed) return reject(err);
    const done = () => {
      clearTimeout(timer);
      req.off('end', done).off('close', done);
      reject(err);
    };
    const timer = maxMs === undefined ? undefined : setTimeout(done, maxMs);
    req.on('end', done).on('close', done);
    req.resume();
  });
}

/** Decodes a body's chunks; a shared decoder is safe because decoding is synchronous. */
const decoder = new StringDecoder('utf8');
function decode(chunks: Buffer[]): string {
  if (chunks.length <= 1) return chunks.length === 1 ? chunks[0]!.toString('utf8') : '';
  // Decoded piece by piece rather than joined first: a joined copy is a fresh ArrayBuffer per request
  // (32 KB for a 32 KB prompt), and V8 answers that external-memory churn with major GCs.
  let text = '';
  for (const c of chunks) text += decoder.write(c);
  return text + decoder.end();
}

/** A body read under a budget: `release()` gives its bytes back (idempotent). */
export interface BodyText {
  text: string;
  bytes: number;
  release(): void;
}

const NO_RELEASE = () => {};

/**
 * Reads the whole body as UTF-8 text, refusing it once it passes maxBytes. Plain 'data'/'end'
 * listeners: an async iterator costs a promise per chunk plus the stream's iterator machinery, on every request.
 * With a `budget`, the body's bytes are reserved as they arrive — a declared length reserves nothing
 * until its bytes come (SPEC §13) — and held until `release()`; a failed read releases them itself.
 * A body not complete within the budget's `timeoutMs` is refused with 408 `request_timeout` and its
 * connection closed: a client trickling one byte a second holds nothing for longer than that.
 */
export function readBody(req: IncomingMessage, maxBytes: number, budget?: BodyBudget): Promise<BodyText> {
  const declared = Number(req.headers['content-length']);
  if (declared > maxBytes) return refuseAfterDrain(req, tooLarge(maxBytes), budget?.timeoutMs);
  let reserved = 0;
  const giveBack = () => {
    budget?.release(reserved);
    reserved = 0;
  };
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    // Only a body still arriving after this turn of the event loop pays for a timer: a small one ends in
    // the socket read that brought it. (Node keeps a timer list per duration and drops it when it empties;
    // a timer set and cleared per request made and dropped that list each time, in V8's runtime.) Armed
    // one turn late, the bound is one turn longer: what matters is that a trickling body has one.
    const timeoutMs = budget?.timeoutMs;
    let settled = false;
    let timer: NodeJS.Timeout | undefined;
    if (timeoutMs !== undefined && !req.complete) {
      setImmediate(() => {
        if (!settled) timer = setTimeout(() => timedOut(timeoutMs), timeoutMs);
      });
    }
    const fail = (e: unknown) => {
      cleanup();
      giveBack();
      refuseAfterDrain(req, e, budget?.timeoutMs).catch(reject);
    };
    const timedOut = (ms: number) => {
      cleanup();
      giveBack();
      // Not drained: the client is the slow one. `connection: close` ends the socket once the 408 is out.
      reject(
        new GatewayError('request_timeout', `The request body was not received within ${ms} ms.`, { headers: { connection: 'close' } }),
      );
    };
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size > maxBytes) return fail(tooLarge(maxBytes));
      if (budget) {
        try {
          budget.reserve(chunk.length);
          reserved = size;
        } catch (e) {
          return fail(e);
        }
      }
      chunks.push(chunk);
    };
    const onEnd = () => {
      cleanup();
      resolve({ text: decode(chunks), bytes: size, release: budget ? giveBack : NO_RELEASE });
    };
    const onError = (err: Error) => {
      cleanup();
      giveBack();
      reject(err);
    };
    // A client gone before its body ended: 'close' without 'end'.
    const onClose = () => {
      if (!req.complete) onError(new Error('request body aborted'));
    };
    const cleanup = () => {
      settled = true;
      if (timer) clearTimeout(timer);
      req.off('data', onData).off('end', onEnd).off('error', onError).off('close', onClose);
    };
    req.on('data', onData).on('end', onEnd).on('error', onError).on('close', onClose);
  });
}

const rawJSON = (JSON as unknown as { rawJSON(text: string): unknown }).rawJSON;
const TWO_53 = 2 ** 53;

/** Keeps integers beyond 2^53 as their source text, so a re-serialised body passes them on digit for digit. */
function keepBigIntegers(_key: string, value: unknown, context?: { source?: string }): unknown {
  return typeof value === 'number' && !Number.isSafeInteger(value) && context?.source && /^-?\d+$/.test(context.source)
    ? rawJSON(context.source)
    : value;
}

/**
 * True when a parsed value holds a number at or beyond ±2^53, the only ones a plain parse may have
 * rounded (an int64 `seed`). Walks the parsed values, not the text: a regex for a 16-digit run over the
 * text cost more than the parse itself on a 32 KB prompt (7.8 against 6 µs), and a chat body has few
 * values beside its long strings. Iterative: a body may nest deeper than the call stack.
 */
function mayHoldRoundedInteger(root: unknown): boolean {
  const stack: unknown[] = [root];
  while (stack.length > 0) {
    const v = stack.pop();
    if (typeof v === 'number') {
      if (v >= TWO_53 || v <= -TWO_53) return true;
    } else if (Array.isArray(v)) {
      for (let i = 0; i < v.length; i++) stack.push(v[i]);
    } else if (typeof v === 'object' && v !== null) {
      for (const k in v) stack.push((v as Record<string, unknown>)[k]);
    }
  }
  return false;
}

/** limits.max_json_depth's default (SPEC §13). */
export const DEFAULT_MAX_JSON_DEPTH = 64;

/**
 * Parses JSON; a syntax error, or nesting deeper than `maxDepth` (found by a linear scan before the
 * parse: http/json-depth.ts), is a 422 `json_invalid` as FastAPI reports it.
 */
export function parseJson(text: string, maxDepth = DEFAULT_MAX_JSON_DEPTH): unknown {
  const at = findTooDeep(text, maxDepth);
  if (at >= 0) {
    throw invalid(['body'], 'json_invalid', 'JSON decode error', null, {
      error: `nesting too deep: more than ${maxDepth} levels of arrays and objects (at position ${at})`,
    });
  }
  try {
    const value: unknown = JSON.parse(text);
    // The reviver (Node's JSON source-text access) costs a call per value, so only bodies that need it pay.
    return mayHoldRoundedInteger(value) ? JSON.parse(text, keepBigIntegers as (k: string, v: unknown) => unknown) : value;
  } catch (e) {
    throw invalid(['body'], 'json_invalid', 'JSON decode error', null, { error: (e as Error).message });
  }
}

/** 415/413/408/422 checks, then the parsed JSON value, the body's size in bytes and its budget release. */
export async function readJson(
  req: IncomingMessage,
  maxBytes: number,
  budget?: BodyBudget,
  maxDepth = DEFAULT_MAX_JSON_DEPTH,
): Promise<{ value: unknown; bytes: number; release(): void }> {
  requireJson(req);
  const { text, bytes, release } = await readBody(req, maxBytes, budget);
  try {
    return { value: parseJson(text, maxDepth), bytes, release };
  } catch (e) {
    release();
    throw e;
  }
}

/**
 * readJson for a handler that keeps only the parsed value (the admin API's small bodies): the body's
 * bytes are given back to `budget` as soon as it is parsed.
 */
export async function readJsonValue(req: IncomingMessage, maxBytes: number, budget: BodyBudget): Promise<unknown> {
  const { value, release } = await readJson(req, maxBytes, budget);
  release();
  return value;
}
