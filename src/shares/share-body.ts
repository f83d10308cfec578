/**
 * Reading a `POST /v1/shares` or `POST /admin/shares` body (SPEC §1.4): 415 unless JSON, 413 past the
 * body bound or when the snapshot itself is larger than `shares.max_snapshot_bytes`, 422 for JSON
 * errors and every validation issue (validate.ts), collected Pydantic-style.
 *
 * The snapshot is measured and stored as its own text in the body (snapshot-text.ts), so the limit
 * counts exactly the bytes a read returns, whitespace included.
 */
import type { IncomingMessage } from 'node:http';
import type { BodyBudget } from '../limits/body-budget.ts';
import { GatewayError, ValidationError, invalid, type ValidationIssue } from '../http/errors.ts';
import { parseJson, readBody, requireJson } from '../http/body.ts';
import { Issues, isObj } from '../http/validate.ts';
import { accountField } from '../admin/keys.ts';
import { memberText } from './snapshot-text.ts';
import { validateShareBody, type ShareFileInput } from './validate.ts';

/** Room for everything around the snapshot: `files` entries are counted per file below. */
const ENVELOPE_BYTES = 64 * 1024;
/**
 * One `files` entry written as verbosely as JSON allows: a 255-character name fully `\uXXXX`-escaped is
 * 1,530 bytes, a 255-character content type 255, plus keys, size and spacing: 4 KiB is ample.
 */
const FILE_ENTRY_BYTES = 4 * 1024;

export interface ShareBodyLimits {
  maxSnapshotBytes: number;
  maxFiles: number;
  /** False when no S3 is configured: declaring files is then a 422. */
  filesEnabled: boolean;
}

/** A validated share body: the snapshot as published (JSON text) and the declared files. */
export interface ShareBody {
  account: string | undefined;
  snapshotText: string;
  files: ShareFileInput[];
}

/** The bound on the whole body: the snapshot limit plus room for the envelope and `maxFiles` entries. */
export function maxShareBodyBytes(l: Pick<ShareBodyLimits, 'maxSnapshotBytes' | 'maxFiles'>): number {
  return l.maxSnapshotBytes + ENVELOPE_BYTES + l.maxFiles * FILE_ENTRY_BYTES;
}

/** Checks an already-read body; `requireAccount` for the admin variant (account validated as in /admin/keys). */
export function parseShareBody(text: string, l: ShareBodyLimits, requireAccount: boolean): ShareBody {
  const value = parseJson(text);
  let snapshotText: string | undefined;
  if (isObj(value) && 'snapshot' in value) {
    snapshotText = memberText(text, 'snapshot');
    const bytes = snapshotText === undefined ? 0 : Buffer.byteLength(snapshotText);
    if (bytes > l.maxSnapshotBytes) {
      throw new GatewayError('request_too_large', `The snapshot is ${bytes} bytes of JSON; the limit is ${l.maxSnapshotBytes} bytes.`, {
        param: 'snapshot',
      });
    }
  }
  const issues: ValidationIssue[] = [];
  let files: ShareFileInput[] = [];
  try {
    files = validateShareBody(value, { maxFiles: l.maxFiles }).files;
  } catch (e) {
    if (!(e instanceof ValidationError)) throw e;
    issues.push(...e.detail);
  }
  let account: string | undefined;
  if (requireAccount && isObj(value)) {
    const more = new Issues();
    account = accountField(value, 'account', ['body'], more);
    issues.push(...more.list);
  }
  if (issues.length > 0) throw new ValidationError(issues);
  if (files.length > 0 && !l.filesEnabled) {
    const reason = 'file uploads are not configured on this gateway (shares.s3)';
    throw invalid(['body', 'files'], 'value_error', `Value error, ${reason}`, (value as { files: unknown }).files, { error: reason });
  }
  // validateShareBody accepted an object snapshot, so memberText found it.
  return { account, snapshotText: snapshotText!, files };
}

/** 415 / 413 / 422 checks, then the validated body; under `budget` its bytes are held only while parsing. */
export async function readShareBody(
  req: IncomingMessage,
  l: ShareBodyLimits,
  requireAccount: boolean,
  budget?: BodyBudget,
): Promise<ShareBody> {
  requireJson(req);
  const { text, release } = await readBody(req, maxShareBodyBytes(l), budget);
  try {
    return parseShareBody(text, l, requireAccount);
  } finally {
    release();
  }
}
