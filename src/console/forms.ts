/** Reads a console form post: `application/x-www-form-urlencoded` (what browsers and htmx send), bounded. */
import type { IncomingMessage } from 'node:http';
import { readBody } from '../http/body.ts';
import { GatewayError } from '../http/errors.ts';

/** Console forms are a few short fields; 16 KiB is far above any of them. */
const MAX_FORM_BYTES = 16 * 1024;

/** The posted fields; 415 for any other body type, 413 past the bound. */
export async function readForm(req: IncomingMessage): Promise<URLSearchParams> {
  const ct = req.headers['content-type']?.split(';', 1)[0]!.trim().toLowerCase();
  if (ct !== 'application/x-www-form-urlencoded') {
    req.resume();
    throw new GatewayError('unsupported_media_type', 'Console forms are posted as application/x-www-form-urlencoded.');
  }
  const { text } = await readBody(req, MAX_FORM_BYTES);
  return new URLSearchParams(text);
}

/** The fields as an object of first values, for the validators of http/validate.ts. */
export function fields(form: URLSearchParams, names: readonly string[]): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const n of names) {
    const v = form.get(n);
    if (v !== null) out[n] = v.trim();
  }
  return out;
}
