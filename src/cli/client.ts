/**
 * A small HTTP client for the admin API and the public share read, over fetch. Every non-2xx answer
 * becomes an ApiError carrying the body's stable `code` (SPEC §3.2) or the 422 `detail` list (§3.1).
 */

/** A failed call: exit code 1, printed as `error: <code> (HTTP <status>): <message>`. */
export class ApiError extends Error {
  readonly status: number | undefined;
  readonly code: string;
  /** Extra lines: one per validation issue. */
  readonly details: string[];
  constructor(code: string, message: string, status?: number, details: string[] = []) {
    super(message);
    this.name = 'ApiError';
    this.code = code;
    this.status = status;
    this.details = details;
  }
}

export interface ApiResponse {
  status: number;
  body: unknown;
}

/** Per-call options. */
export interface CallOptions {
  /** Overrides the client's timeout, for a call whose work on the gateway takes longer (LONG_CALL_MS). */
  timeoutMs?: number;
}

export interface HttpClient {
  readonly baseUrl: string;
  /** Sends `body` as JSON; resolves on 2xx, throws ApiError otherwise. */
  call(method: string, path: string, body?: unknown, opts?: CallOptions): Promise<ApiResponse>;
  /** Like call, with a body already serialised (to keep a snapshot's bytes exactly as the user wrote them). */
  send(method: string, path: string, jsonText?: string, opts?: CallOptions): Promise<ApiResponse>;
}

/**
 * The timeout of calls that run a job on the gateway rather than one store operation: `usage rebuild`
 * first waits up to 30 s for an export holding the account's lease (then answers 503 `overloaded`) and
 * then reads up to usage.retention_days of ledger from Redis and S3; `ledger export --once` runs a whole
 * export pass. Under the default 30 s the CLI gave up exactly when the gateway was about to say
 * "retry in a minute", and cut a rebuild or export that was still working.
 */
export const LONG_CALL_MS = 15 * 60_000;

export interface HttpClientOptions {
  baseUrl: string;
  /** Sent as `Authorization: Bearer …` when given. */
  token?: string | undefined;
  fetch: typeof fetch;
  /** A hung gateway must not hang a script: 30 s is far above any admin call (they are single store ops). */
  timeoutMs?: number;
}

/** Builds a client for one base URL (`http://127.0.0.1:9090`). */
export function createHttpClient(o: HttpClientOptions): HttpClient {
  const baseUrl = o.baseUrl.replace(/\/+$/, '');
  const timeoutMs = o.timeoutMs ?? 30_000;
  const send: HttpClient['send'] = async (method, path, jsonText, callOpts) => {
    const ms = callOpts?.timeoutMs ?? timeoutMs;
    const headers: Record<string, string> = { accept: 'application/json' };
    if (o.token !== undefined) headers.authorization = `Bearer ${o.token}`;
    if (jsonText !== undefined) headers['content-type'] = 'application/json';
    let res: Response;
    let text: string;
    try {
      res = await o.fetch(`${baseUrl}${path}`, {
        method,
        headers,
        signal: AbortSignal.timeout(ms),
        ...(jsonText !== undefined && { body: jsonText }),
      });
      text = await res.text();
    } catch (e) {
      throw transportError(e, baseUrl, ms);
    }
    let parsed: unknown = null;
    if (text !== '') {
      try {
        parsed = JSON.parse(text);
      } catch {
        if (res.ok)
          throw new ApiError('invalid_response', `${method} ${path} answered ${res.status} with a body that is not JSON`, res.status);
        parsed = text;
      }
    }
    if (!res.ok) throw errorFromBody(res.status, parsed);
    return { status: res.status, body: parsed };
  };
  return {
    baseUrl,
    send,
    call: (method, path, body, callOpts) => send(method, path, body === undefined ? undefined : JSON.stringify(body), callOpts),
  };
}

/** Turns an error body into an ApiError: the OpenAI envelope, a 422 detail list, or anything else. */
export function errorFromBody(status: number, body: unknown): ApiError {
  if (isRecord(body) && isRecord(body.error)) {
    const e = body.error;
    const code = typeof e.code === 'string' ? e.code : typeof e.type === 'string' ? e.type : `http_${status}`;
    return new ApiError(code, typeof e.message === 'string' ? e.message : 'request failed', status);
  }
  if (isRecord(body) && Array.isArray(body.detail)) {
    const details = body.detail.map((d: unknown) => {
      if (!isRecord(d)) return JSON.stringify(d);
      const loc = Array.isArray(d.loc) ? d.loc.join('.') : '?';
      return `${loc}: ${String(d.msg)} [${String(d.type)}] (input: ${JSON.stringify(d.input)?.slice(0, 200)})`;
    });
    return new ApiError('validation_error', 'the gateway rejected the request', status, details);
  }
  const text = typeof body === 'string' ? body.slice(0, 200) : (JSON.stringify(body)?.slice(0, 200) ?? '');
  return new ApiError(`http_${status}`, text || 'request failed', status);
}

function transportError(e: unknown, baseUrl: string, timeoutMs: number): ApiError {
  const err = e as Error & { cause?: { code?: string; message?: string } };
  if (err.name === 'TimeoutError') return new ApiError('timeout', `no answer from ${baseUrl} within ${timeoutMs / 1000} s`);
  const reason = err.cause?.code ?? err.cause?.message ?? err.message;
  return new ApiError('connection_failed', `cannot reach ${baseUrl}: ${reason}`);
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}
