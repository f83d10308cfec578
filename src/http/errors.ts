/**
 * The one error type. Every public failure is a GatewayError with a stable `code` from SPEC §3;
 * only the edge (respond.ts) turns it into a body. Foreign errors are translated where the library
 * is called, never here.
 */

/** Every public error code, with its HTTP status and OpenAI `type`. The table in docs/reference.md is kept in sync by a test. */
export const ERROR_CODES = {
  missing_api_key: { status: 401, type: 'authentication_error' },
  invalid_api_key: { status: 401, type: 'authentication_error' },
  invalid_admin_token: { status: 401, type: 'authentication_error' },
  invalid_request: { status: 400, type: 'invalid_request_error' },
  insufficient_credit: { status: 402, type: 'insufficient_credit' },
  key_budget_exceeded: { status: 402, type: 'insufficient_credit' },
  permission_denied: { status: 403, type: 'permission_error' },
  not_found: { status: 404, type: 'invalid_request_error' },
  model_not_found: { status: 404, type: 'invalid_request_error' },
  share_not_found: { status: 404, type: 'invalid_request_error' },
  method_not_allowed: { status: 405, type: 'invalid_request_error' },
  request_timeout: { status: 408, type: 'invalid_request_error' },
  key_not_rollable: { status: 409, type: 'invalid_request_error' },
  share_revoked: { status: 410, type: 'invalid_request_error' },
  request_too_large: { status: 413, type: 'invalid_request_error' },
  unsupported_media_type: { status: 415, type: 'invalid_request_error' },
  rate_limit_exceeded: { status: 429, type: 'rate_limit_error' },
  concurrency_limit_exceeded: { status: 429, type: 'rate_limit_error' },
  share_quota_exceeded: { status: 429, type: 'rate_limit_error' },
  key_limit_exceeded: { status: 429, type: 'rate_limit_error' },
  headers_too_large: { status: 431, type: 'invalid_request_error' },
  internal_error: { status: 500, type: 'server_error' },
  upstream_error: { status: 502, type: 'upstream_error' },
  upstream_unavailable: { status: 503, type: 'upstream_error' },
  store_unavailable: { status: 503, type: 'server_error' },
  overloaded: { status: 503, type: 'server_error' },
  shutting_down: { status: 503, type: 'server_error' },
  upstream_timeout: { status: 504, type: 'upstream_error' },
} as const satisfies Record<string, { status: number; type: string }>;

export type ErrorCode = keyof typeof ERROR_CODES;

/** One entry of a 422 body (SPEC §3.1), Pydantic v2 shaped. */
export interface ValidationIssue {
  loc: string[];
  msg: string;
  type: string;
  input: unknown;
  ctx: Record<string, unknown>;
}

export interface GatewayErrorOptions {
  param?: string | null;
  /** Extra response headers (Allow, retry-after, x-ratelimit-*). */
  headers?: Record<string, string>;
  cause?: unknown;
}

/** A public failure with a stable code; status and type come from ERROR_CODES. */
export class GatewayError extends Error {
  readonly code: ErrorCode;
  readonly status: number;
  readonly type: string;
  readonly param: string | null;
  readonly headers: Record<string, string> | undefined;

  constructor(code: ErrorCode, message: string, opts: GatewayErrorOptions = {}) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = 'GatewayError';
    this.code = code;
    this.status = ERROR_CODES[code].status;
    this.type = ERROR_CODES[code].type;
    this.param = opts.param ?? null;
    this.headers = opts.headers;
  }
}

/**
 * A 422 lists at most this many issues, the first found in field order (docs/behaviour.md, "Validation
 * errors"). Validators stop looking once they have them (http/validate.ts `Issues.full`), so neither the
 * time to build a 422 nor its size grows with the number of bad elements in a body.
 */
export const MAX_ISSUES = 10;
/** Characters of `input` (and of `ctx`) echoed per issue, roughly as JSON counts them; the rest is cut. */
export const MAX_ECHO_CHARS = 1024;
/** Characters of one `loc` element (a key of the body may be any length) and of `msg`. */
export const MAX_LOC_CHARS = 128;
export const MAX_MSG_CHARS = 1024;

/** Marks where an echoed string, list or object was cut. */
export const CUT = '…';

/** `s` cut to at most `n` characters plus CUT; never ends in half a surrogate pair. */
export function clipString(s: string, n: number): string {
  if (s.length <= n) return s;
  let end = Math.max(0, n);
  const last = s.charCodeAt(end - 1);
  if (last >= 0xd800 && last <= 0xdbff) end--;
  return s.slice(0, end) + CUT;
}

/**
 * Whether `v` serialises to roughly at most `budget` characters. Walks at most ~`budget` values (each
 * costs at least one), so it is O(budget) whatever the size of `v`. Returns the budget left, or -1.
 */
function fits(v: unknown, budget: number, depth = 0): number {
  if (budget < 0) return -1;
  if (typeof v === 'string') return budget - v.length - 2;
  if (v === null || typeof v !== 'object') return budget - String(v).length;
  if (depth > 64) return -1;
  budget -= 2;
  if (Array.isArray(v)) {
    for (const x of v) {
      budget = fits(x, budget - 1, depth + 1);
      if (budget < 0) return -1;
    }
    return budget;
  }
  for (const k in v) {
    if (!Object.hasOwn(v, k)) continue;
    budget = fits((v as Record<string, unknown>)[k], budget - k.length - 4, depth + 1);
    if (budget < 0) return -1;
  }
  return budget;
}

/**
 * `v` itself when it is small, else a copy cut to about `budget` characters: long strings end in CUT, a
 * list keeps its first items and ends with a CUT string, an object keeps its first members and gets a
 * CUT member. O(budget), not O(size of `v`).
 */
export function clipValue(v: unknown, budget = MAX_ECHO_CHARS): unknown {
  if (fits(v, budget) >= 0) return v;
  return cut(v, { left: budget }, 0);
}

function cut(v: unknown, b: { left: number }, depth: number): unknown {
  if (typeof v === 'string') {
    const s = clipString(v, Math.max(16, b.left - 2));
    b.left -= s.length + 2;
    return s;
  }
  if (v === null || typeof v !== 'object') {
    b.left -= String(v).length;
    return v;
  }
  if (depth >= 8) {
    b.left -= 1;
    return CUT;
  }
  b.left -= 2;
  if (Array.isArray(v)) {
    const out: unknown[] = [];
    for (const x of v) {
      if (b.left <= 0) {
        out.push(CUT);
        break;
      }
      b.left -= 1;
      out.push(cut(x, b, depth + 1));
    }
    return out;
  }
  const out: Record<string, unknown> = {};
  for (const k in v) {
    if (!Object.hasOwn(v, k)) continue;
    if (b.left <= 0) {
      out[CUT] = CUT;
      break;
    }
    const key = clipString(k, MAX_LOC_CHARS);
    b.left -= key.length + 4;
    out[key] = cut((v as Record<string, unknown>)[k], b, depth + 1);
  }
  return out;
}

/**
 * One issue with every part a client chose bounded: loc elements, msg, input and ctx. The `input` of a
 * path, query or header issue is echoed whole: the request head is bounded already (Node's 16 KiB), and
 * SPEC §1.4 pins a slug's `input` to the segment as received.
 */
function boundIssue(d: ValidationIssue): ValidationIssue {
  const head = d.loc[0] === 'path' || d.loc[0] === 'query' || d.loc[0] === 'header';
  return {
    loc: d.loc.map((l) => clipString(l, MAX_LOC_CHARS)),
    msg: clipString(d.msg, MAX_MSG_CHARS),
    type: d.type,
    input: head ? d.input : clipValue(d.input),
    ctx: clipValue(d.ctx) as Record<string, unknown>,
  };
}

/**
 * A 422 with a Pydantic-style `detail` list (SPEC §3.1). Not a GatewayError: its body has another shape.
 * Holds the first MAX_ISSUES issues, each bounded (boundIssue), so its message and body are small
 * whatever the request held.
 */
export class ValidationError extends Error {
  readonly status = 422;
  readonly detail: ValidationIssue[];
  constructor(detail: ValidationIssue[]) {
    const bounded = detail.slice(0, MAX_ISSUES).map(boundIssue);
    super(bounded.map((d) => `${d.loc.join('.')}: ${d.msg}`).join('; '));
    this.name = 'ValidationError';
    this.detail = bounded;
  }
}

/** Shorthand for a single-issue 422. */
export function invalid(loc: string[], type: string, msg: string, input: unknown, ctx: Record<string, unknown> = {}): ValidationError {
  return new ValidationError([{ loc, msg, type, input: input === undefined ? null : input, ctx }]);
}
