/**
 * Input checks for the shares capability (SPEC §1.4, §3.1): the slug path segment and the
 * `POST /v1/shares` / `POST /admin/shares` body. Errors are Pydantic v2 shaped 422s; the body
 * validator collects issues before throwing, as Pydantic does, up to MAX_ISSUES (http/errors.ts).
 *
 * Decisions where Pydantic has no answer (also in the docs of each check below):
 * - Types are strict: no coercion of "5" or true to an integer (Pydantic's strict-mode messages).
 * - Objects that are models (body, snapshot, file entry) fail with `model_attributes_type`, as FastAPI
 *   reports them; free-form objects (metadata, each message) fail with `dict_type`.
 * - File names fail custom rules with `value_error`, msg "Value error, <reason>", ctx {error: reason}.
 * - When `files` is longer than allowed only `too_long` is reported; its items are not inspected.
 */
import { ValidationError, invalid } from '../http/errors.ts';
import { Issues as BaseIssues } from '../http/validate.ts';
import { SLUG_LENGTH } from './slug.ts';

/** The slug pattern exactly as SPEC §1.4 prints it in `string_pattern_mismatch`. */
export const SLUG_PATTERN = '^[1-9A-HJ-NP-Za-km-z]{22}$';
const SLUG_RE = new RegExp(SLUG_PATTERN);

/** S3's single-PUT limit (5 GiB): a presigned PUT cannot carry more, so larger files are refused up front. */
export const MAX_FILE_SIZE = 5 * 1024 ** 3;
/** File names: at most 255 characters and 255 UTF-8 bytes (NAME_MAX of common file systems). */
export const MAX_FILE_NAME = 255;
/** Content types: at most 255 characters (RFC 6838 caps type and subtype at 127 each). */
export const MAX_CONTENT_TYPE = 255;
/**
 * Printable ASCII words separated by single spaces. The uploader sends this value verbatim as a signed
 * header; SigV4 canonicalises header values by trimming and collapsing spaces, so a value already in
 * that form verifies on every S3 implementation (s3rver does not canonicalise), and CR/LF can't get in.
 */
export const CONTENT_TYPE_PATTERN = '^[!-~]+( [!-~]+)*$';
const CONTENT_TYPE_RE = new RegExp(CONTENT_TYPE_PATTERN);
// C0 controls, DEL and C1 controls: invisible in UIs and unsafe in Content-Disposition and logs.
const CONTROL_RE = /[\u0000-\u001f\u007f-\u009f]/;

/** One file announced in a share; its bytes go straight to S3 through a presigned PUT. */
export interface ShareFileInput {
  name: string;
  content_type: string;
  size: number;
}

/** A validated share body. `snapshot` is the caller's object itself, untouched, so it is stored as published. */
export interface ShareInput {
  account?: string;
  snapshot: Record<string, unknown>;
  files: ShareFileInput[];
}

/** Limits for validateShareBody: `maxFiles` from config. (The admin variant's `account` is checked by parseShareBody.) */
export interface ShareBodyOptions {
  maxFiles: number;
}

/** Number of characters as Pydantic counts them: code points, not UTF-16 units or bytes. */
function charLength(s: string): number {
  let n = 0;
  for (const _ of s) n++;
  return n;
}

const plural = (n: number, word: string): string => `${n} ${word}${n === 1 ? '' : 's'}`;

/**
 * The slug from a raw path segment, or a 422 at `["path","slug"]` (SPEC §1.4): length first, then
 * alphabet. The segment is percent-decoded (kept raw if the escapes are malformed) and the decoded text
 * is both what is checked and the error's `input`. Lengths count code points, as Pydantic does, so
 * "é" is one character, not two UTF-16 units or two UTF-8 bytes.
 */
export function validateSlug(rawPathSegment: string): string {
  let slug = rawPathSegment;
  try {
    slug = decodeURIComponent(rawPathSegment);
  } catch {
    // URIError on malformed escapes such as "%E0%A4%A": validate the segment as received.
  }
  const loc = ['path', 'slug'];
  const len = charLength(slug);
  if (len < SLUG_LENGTH) {
    throw invalid(loc, 'string_too_short', `String should have at least ${plural(SLUG_LENGTH, 'character')}`, slug, {
      min_length: SLUG_LENGTH,
    });
  }
  if (len > SLUG_LENGTH) {
    throw invalid(loc, 'string_too_long', `String should have at most ${plural(SLUG_LENGTH, 'character')}`, slug, {
      max_length: SLUG_LENGTH,
    });
  }
  if (!SLUG_RE.test(slug)) {
    throw invalid(loc, 'string_pattern_mismatch', `String should match pattern '${SLUG_PATTERN}'`, slug, { pattern: SLUG_PATTERN });
  }
  return slug;
}

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);

/** Collects issues in field order, the way a Pydantic model reports them, up to the cap (http/validate.ts). */
class Issues extends BaseIssues {
  missing(loc: string[], parent: Obj): void {
    this.add(loc, 'missing', 'Field required', parent);
  }
  notModel(loc: string[], v: unknown): void {
    this.add(loc, 'model_attributes_type', 'Input should be a valid dictionary or object to extract fields from', v);
  }
  valueError(loc: string[], reason: string, v: unknown): void {
    this.add(loc, 'value_error', `Value error, ${reason}`, v, { error: reason });
  }
  /** A required string with optional length bounds (in code points); the string, or undefined after an issue. */
  str(loc: string[], v: unknown, min = 0, max = Infinity): string | undefined {
    if (typeof v !== 'string') return void this.add(loc, 'string_type', 'Input should be a valid string', v);
    const len = charLength(v);
    if (len < min)
      return void this.add(loc, 'string_too_short', `String should have at least ${plural(min, 'character')}`, v, { min_length: min });
    if (len > max)
      return void this.add(loc, 'string_too_long', `String should have at most ${plural(max, 'character')}`, v, { max_length: max });
    return v;
  }
  /** A strict integer in [ge, le]; the number, or undefined after an issue. */
  int(loc: string[], v: unknown, ge: number, le: number): number | undefined {
    if (typeof v !== 'number' || !Number.isFinite(v)) return void this.add(loc, 'int_type', 'Input should be a valid integer', v);
    if (!Number.isInteger(v))
      return void this.add(loc, 'int_from_float', 'Input should be a valid integer, got a number with a fractional part', v);
    if (v < ge) return void this.add(loc, 'greater_than_equal', `Input should be greater than or equal to ${ge}`, v, { ge });
    if (v > le) return void this.add(loc, 'less_than_equal', `Input should be less than or equal to ${le}`, v, { le });
    return v;
  }
  /** A list with length bounds; the array, or undefined after an issue. */
  list_(loc: string[], v: unknown, min: number, max: number): unknown[] | undefined {
    if (!Array.isArray(v)) return void this.add(loc, 'list_type', 'Input should be a valid list', v);
    const n = v.length;
    if (n < min) {
      return void this.add(loc, 'too_short', `List should have at least ${plural(min, 'item')} after validation, not ${n}`, v, {
        field_type: 'List',
        min_length: min,
        actual_length: n,
      });
    }
    if (n > max) {
      return void this.add(loc, 'too_long', `List should have at most ${plural(max, 'item')} after validation, not ${n}`, v, {
        field_type: 'List',
        max_length: max,
        actual_length: n,
      });
    }
    return v;
  }
}

/**
 * Snapshot model: `title`, `model` (string or null), `messages` (non-empty list of objects: a share of
 * nothing is a mistake), `metadata` (object or null). Other keys are kept, since the snapshot is
 * returned exactly as published.
 */
function checkSnapshot(issues: Issues, loc: string[], s: Obj): void {
  for (const k of ['title', 'model'] as const) {
    if (s[k] !== undefined && s[k] !== null) issues.str([...loc, k], s[k]);
  }
  if (!('messages' in s)) issues.missing([...loc, 'messages'], s);
  else {
    const msgs = issues.list_([...loc, 'messages'], s.messages, 1, Infinity);
    // Stops at the issue cap: a snapshot of a million bad messages is refused as fast as one of ten.
    if (msgs)
      for (let i = 0; i < msgs.length && !issues.full; i++) {
        if (!isObj(msgs[i])) issues.add([...loc, 'messages', String(i)], 'dict_type', 'Input should be a valid dictionary', msgs[i]);
      }
  }
  if (s.metadata !== undefined && s.metadata !== null && !isObj(s.metadata)) {
    issues.add([...loc, 'metadata'], 'dict_type', 'Input should be a valid dictionary', s.metadata);
  }
}

/**
 * File name rules beyond length: valid Unicode (a lone surrogate cannot become a UTF-8 object key),
 * at most 255 UTF-8 bytes (so `shares/<slug>/<name>` stays far below S3's 1024-byte key limit), no
 * `/` or `\` (one file, not a path), no control characters, not "." or ".." (URL parsers resolve
 * those path segments away, so the presigned URL would point elsewhere).
 */
function fileNameProblem(name: string): string | null {
  if (!name.isWellFormed()) return 'file name must be valid Unicode';
  if (Buffer.byteLength(name, 'utf8') > MAX_FILE_NAME) return `file name must be at most ${MAX_FILE_NAME} bytes in UTF-8`;
  if (name.includes('/') || name.includes('\\')) return "file name must not contain '/' or '\\'";
  if (CONTROL_RE.test(name)) return 'file name must not contain control characters';
  if (name === '.' || name === '..') return "file name must not be '.' or '..'";
  // The share's own object (shares/<slug>/snapshot.json, snapshot-objects.ts): an upload must never overwrite it.
  if (name === 'snapshot.json') return "file name 'snapshot.json' is reserved";
  return null;
}

/** One file entry; the validated entry, or undefined when it had issues (which are recorded). */
function checkFile(issues: Issues, loc: string[], f: unknown): ShareFileInput | undefined {
  if (!isObj(f)) return void issues.notModel(loc, f);
  const before = issues.list.length;
  let name: string | undefined;
  if (!('name' in f)) issues.missing([...loc, 'name'], f);
  else {
    name = issues.str([...loc, 'name'], f.name, 1, MAX_FILE_NAME);
    const problem = name === undefined ? null : fileNameProblem(name);
    if (problem) issues.valueError([...loc, 'name'], problem, name);
  }
  let contentType: string | undefined;
  if (!('content_type' in f)) issues.missing([...loc, 'content_type'], f);
  else {
    contentType = issues.str([...loc, 'content_type'], f.content_type, 0, MAX_CONTENT_TYPE);
    if (contentType !== undefined && !CONTENT_TYPE_RE.test(contentType)) {
      issues.add(
        [...loc, 'content_type'],
        'string_pattern_mismatch',
        `String should match pattern '${CONTENT_TYPE_PATTERN}'`,
        contentType,
        { pattern: CONTENT_TYPE_PATTERN },
      );
    }
  }
  let size: number | undefined;
  if (!('size' in f)) issues.missing([...loc, 'size'], f);
  else size = issues.int([...loc, 'size'], f.size, 0, MAX_FILE_SIZE);
  if (issues.list.length !== before || name === undefined || contentType === undefined || size === undefined) return undefined;
  return { name, content_type: contentType, size };
}

/**
 * The share body `{snapshot, files?}`, or a ValidationError listing
 * its first issues (MAX_ISSUES). `files` defaults to [] and holds at most `maxFiles` entries with unique names (exact,
 * case-sensitive comparison, as S3 keys are; a repeat fails at its own `name` with "duplicate file
 * name"). Unknown top-level keys are ignored; unknown snapshot keys are kept.
 */
export function validateShareBody(body: unknown, opts: ShareBodyOptions): ShareInput {
  const issues = new Issues();
  if (!isObj(body)) {
    issues.notModel(['body'], body);
    throw new ValidationError(issues.list);
  }
  const snapshot = body.snapshot;
  if (!('snapshot' in body)) issues.missing(['body', 'snapshot'], body);
  else if (!isObj(snapshot)) issues.notModel(['body', 'snapshot'], snapshot);
  else checkSnapshot(issues, ['body', 'snapshot'], snapshot);

  const files: ShareFileInput[] = [];
  if ('files' in body) {
    const list = issues.list_(['body', 'files'], body.files, 0, opts.maxFiles);
    const seen = new Set<string>();
    if (list)
      for (let i = 0; i < list.length && !issues.full; i++) {
        const loc = ['body', 'files', String(i)];
        const file = checkFile(issues, loc, list[i]);
        if (!file) continue;
        if (seen.has(file.name)) issues.valueError([...loc, 'name'], 'duplicate file name', file.name);
        seen.add(file.name);
        files.push(file);
      }
  }

  if (issues.list.length > 0 || !isObj(snapshot)) throw new ValidationError(issues.list);
  return { snapshot, files };
}
