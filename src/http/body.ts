/**
 * Bounded request body reading (SPEC §1.2): `Content-Type` must be JSON (415), the body at most
 * `maxBytes` (413, refused from `content-length` before reading when declared), JSON errors → 422
 * `json_invalid`. Nothing is buffered past the limit.
 */
import type { IncomingMessage } from 'node:http';
import { GatewayError, invalid } from './errors.ts';

/** Throws 415 unless the request declares a JSON body (`application/json`, parameters allowed). */
export function requireJson(req: IncomingMessage): void {
  const ct = req.headers['content-type'];
  const base = ct?.split(';', 1)[0]!.trim().toLowerCase();
  if (base !== 'application/json') {
    throw new GatewayError('unsupported_media_type', `Content-Type must be application/json, got ${ct ? JSON.stringify(ct.slice(0, 100)) : 'none'}.`);
  }
}

function tooLarge(maxBytes: number): GatewayError {
  return new GatewayError('request_too_large', `Request body exceeds the limit of ${maxBytes} bytes.`);
}

/** Reads the whole body, refusing it once it passes maxBytes. */
export async function readBody(req: IncomingMessage, maxBytes: number): Promise<Buffer> {
  const declared = Number(req.headers['content-length']);
  if (declared > maxBytes) {
    req.resume(); // let the socket drain so the 413 reaches the client
    throw tooLarge(maxBytes);
  }
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > maxBytes) {
      req.resume();
      throw tooLarge(maxBytes);
    }
    chunks.push(chunk);
  }
  return chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size);
}

/** Parses JSON; a syntax error is a 422 `json_invalid` as FastAPI reports it. */
export function parseJson(buf: Buffer): unknown {
  try {
    return JSON.parse(buf.toString('utf8'));
  } catch (e) {
    throw invalid(['body'], 'json_invalid', 'JSON decode error', null, { error: (e as Error).message });
  }
}

/** 415/413/422 checks, then the parsed JSON value and its raw bytes. */
export async function readJson(req: IncomingMessage, maxBytes: number): Promise<{ value: unknown; raw: Buffer }> {
  requireJson(req);
  const raw = await readBody(req, maxBytes);
  return { value: parseJson(raw), raw };
}
