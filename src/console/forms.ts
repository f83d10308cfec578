/** Reads a console form post: `application/x-www-form-urlencoded` (what browsers and htmx send), bounded. */
import type { IncomingMessage } from 'node:http';
import { readBody } from '../http/body.ts';
import { GatewayError } from '../http/errors.ts';
import type { BodyBudget } from '../limits/body-budget.ts';

/** Console forms are a few short fields; 16 KiB is far above any of them. */
export const MAX_FORM_BYTES = 16 * 1024;

/**
 * The posted fields; 415 for any other body type, 413 past the bound. Read under `budget` (the console's
 * form budget, per account: setup.ts): a form still arriving after server.body_timeout_ms is 408, and one
 * account's stalled forms hold a few, not every, form's bytes.
 */
export async function readForm(req: IncomingMessage, budget: BodyBudget): Promise<URLSearchParams> {
  const ct = req.headers['content-type']?.split(';', 1)[0]!.trim().toLowerCase();
  if (ct !== 'application/x-www-form-urlencoded') {
    req.resume();
    throw new GatewayError('unsupported_media_type', 'Console forms are posted as application/x-www-form-urlencoded.');
  }
  const { text, release } = await readBody(req, MAX_FORM_BYTES, budget);
  release();
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
