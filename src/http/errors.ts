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

/** A 422 with a Pydantic-style `detail` list (SPEC §3.1). Not a GatewayError: its body has another shape. */
export class ValidationError extends Error {
  readonly status = 422;
  readonly detail: ValidationIssue[];
  constructor(detail: ValidationIssue[]) {
    super(detail.map((d) => `${d.loc.join('.')}: ${d.msg}`).join('; '));
    this.name = 'ValidationError';
    this.detail = detail;
  }
}

/** Shorthand for a single-issue 422. */
export function invalid(loc: string[], type: string, msg: string, input: unknown, ctx: Record<string, unknown> = {}): ValidationError {
  return new ValidationError([{ loc, msg, type, input: input === undefined ? null : input, ctx }]);
}
