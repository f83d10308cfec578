/**
 * The edge: turns a node:http request into a RequestContext, runs the matched handler, and maps any
 * thrown error to a body in exactly one place (respond.ts). Writes the request's single log line and
 * its metrics once the response has closed and the handler has returned. Also owns server timeouts
 * and draining on shutdown.
 */
import { STATUS_CODES, createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { randomBase58 } from './base58.ts';
import { GatewayError, ValidationError, type ErrorCode } from './errors.ts';
import { errorBody, sendError } from './respond.ts';
import type { RequestContext } from './context.ts';
import type { Router } from './router.ts';
import { openGate, type Gate } from './gate.ts';
import { createLineWriter, type Logger } from '../obs/logger.ts';
import { bound, type Metrics } from '../obs/metrics.ts';

export interface EdgeDeps {
  router: Router;
  logger: Logger;
  metrics: Metrics;
  /** Which listener, for logs. */
  listener: 'public' | 'admin' | 'metrics';
  /** Runs each route behind the credentials and limits it declares; default: routes that declare none. */
  gate?: Gate;
  /** Headers set on every response of this edge, errors included (the console's security headers). */
  headers?: Readonly<Record<string, string>>;
  /** Runs before routing; a throw is answered like a handler's (the console's CSRF check, SPEC §9). */
  before?: (req: IncomingMessage, path: string) => void;
  /** Writes an error response instead of the JSON envelope (the console answers HTML). */
  sendError?: (res: ServerResponse, err: unknown) => void;
}

/**
 * Tollgate always assigns its own request id: it is the ledger's `request_id`, so a client-chosen
 * value could make two requests indistinguishable. A client's `x-request-id` is logged beside it.
 */
export function newRequestId(): string {
  return `req_${randomBase58(22)}`;
}

const SANE_CLIENT_ID = /^[\w.:-]{1,128}$/;
const NS_PER_S = 1e9;

/** The request listener for one server. */
export function createEdge(d: EdgeDeps): (req: IncomingMessage, res: ServerResponse) => void {
  const m = edgeMetrics(d.metrics);
  const requestLine = createLineWriter(d.logger, 'request');
  const gate = d.gate ?? openGate;
  return (req, res) => {
    const requestId = newRequestId();
    const ctx: RequestContext = {
      req,
      res,
      requestId,
      start: process.hrtime.bigint(),
      route: 'unmatched',
      params: {},
      key: undefined,
      // The request's log line itself, its leading fields in place (finish() fills them in; routes append
      // theirs): written as it is, never copied into another object per request.
      log: { listener: d.listener, request_id: requestId, method: req.method, route: 'unmatched', status: 0, duration_ms: 0 },
      overheadNs: undefined,
      extraHeaders: undefined,
      admit: undefined,
    };
    if (d.headers) for (const h in d.headers) res.setHeader(h, d.headers[h]!);
    d.metrics.inFlight.inc();
    // The line is written once both the response has closed and the handler has returned: a client that
    // leaves mid-stream closes the response before the handler has billed what was produced, and the
    // line must carry those tokens. Its duration is the response's (arrival → close).
    let closedNs = 0n;
    let open = 2;
    const done = () => {
      if (--open === 0) finish(d, m, requestLine, ctx, closedNs);
    };
    res.once('close', () => {
      closedNs = process.hrtime.bigint();
      done();
    });
    const failed = (e: unknown) => {
      try {
        fail(ctx, e, d.sendError ?? sendError);
      } finally {
        done();
      }
    };
    const q = req.url!.indexOf('?');
    const path = q < 0 ? req.url! : req.url!.slice(0, q);
    let match;
    try {
      d.before?.(req, path);
      match = d.router.match(req.method!, path);
    } catch (e) {
      return failed(e);
    }
    // A metered route writes the request id with its response's other headers (routes/metered.ts): a header
    // set before writeHead(status, headers) turns Node's header handling into its slow, merging path, per
    // request. Every other route has it from here; an error response gets it in fail().
    if (!match.route.meteredAdmit) res.setHeader('x-request-id', requestId);
    ctx.route = match.pattern;
    ctx.params = match.params;
    gate(match.route, ctx).then(done, failed);
  };
}

function fail(ctx: RequestContext, err: unknown, send: (res: ServerResponse, err: unknown) => void): void {
  if (!(err instanceof GatewayError) && !(err instanceof ValidationError)) ctx.log.err = err;
  else if (err instanceof GatewayError) ctx.log.error_code = err.code;
  if (!ctx.res.headersSent) {
    ctx.res.setHeader('x-request-id', ctx.requestId);
    if (ctx.extraHeaders) for (const h in ctx.extraHeaders) ctx.res.setHeader(h, ctx.extraHeaders[h]!);
  }
  send(ctx.res, err);
}

/** The edge's metric children, bound once per listener. */
function edgeMetrics(metrics: Metrics) {
  return { requests: bound(metrics.requests), duration: bound(metrics.duration), overhead: bound(metrics.overhead) };
}
type EdgeMetrics = ReturnType<typeof edgeMetrics>;

function finish(
  d: EdgeDeps,
  m: EdgeMetrics,
  requestLine: (fields: Record<string, unknown>) => void,
  ctx: RequestContext,
  closedNs: bigint,
): void {
  d.metrics.inFlight.dec();
  const totalNs = closedNs - ctx.start;
  const status = ctx.res.headersSent ? ctx.res.statusCode : 499;
  const model = typeof ctx.log.model === 'string' ? ctx.log.model : '';
  // Label order as declared in metrics.ts.
  m.requests(ctx.route, model, status, ctx.key?.env ?? '').inc();
  m.duration(ctx.route).observe(Number(totalNs) / NS_PER_S);
  if (ctx.overheadNs !== undefined) {
    m.overhead(ctx.route).observe(Number(ctx.overheadNs) / NS_PER_S);
    ctx.log.overhead_us = Number(ctx.overheadNs / 1000n);
  }
  const clientId = ctx.req.headers['x-request-id'];
  const line = ctx.log;
  line.route = ctx.route;
  line.status = status;
  line.duration_ms = Number(totalNs / 1000n) / 1000;
  if (typeof clientId === 'string' && SANE_CLIENT_ID.test(clientId)) line.client_request_id = clientId;
  if (ctx.key) {
    line.key_id = ctx.key.id;
    line.account = ctx.key.account;
  }
  if (!ctx.res.writableFinished) line.aborted = true;
  if (status >= 500 && line.err) d.logger.error(line, 'request failed');
  else requestLine(line);
}

export interface ListenOptions {
  host: string;
  port: number;
  headersTimeoutMs: number;
  requestTimeoutMs: number;
  /** server.write_timeout_ms: how long a response may wait on a client that takes none of its bytes (default 30 s). */
  writeTimeoutMs?: number;
}

/**
 * `server.write_timeout_ms`: a response whose client takes none of its waiting bytes for that long has its
 * connection destroyed; the response closes, and the request ends as "client gone" (its upstream aborted,
 * billed for what was produced, its body budget and concurrency slot released). A response with nothing
 * waiting is quiet, not stalled (an upstream between two events, a body still arriving under its own
 * timeout): kept. One sweep per server, every quarter of the timeout, looks at its open connections
 * (between requests nothing waits): no timer, listener or clock read per request or per write (Node's
 * socket timeout, `server.timeout`, re-armed a timer per request and refreshed it on every read and write:
 * bench/ab.ts put the branch with it at 1.11x a non-streaming request's CPU, 0.94x with it turned off).
 * Progress is what the kernel took (`bytesWritten` counts the queued bytes too, `writableLength` is what
 * is queued) or, within one large write, libuv's queue shrinking (`writeQueueSize`, what Node's own socket
 * timeout checks).
 */
function watchStalledWrites(server: Server, timeoutMs: number): void {
  // Connections, not responses: a Set of every response until the next sweep kept each one (and its
  // request) alive past a scavenge, 5x the bytes promoted per request (bench/instructions.ts --gc).
  const sockets = new Set<Socket>();
  const seen = new Map<Socket, { taken: number; queued: number; since: number }>();
  server.on('connection', (socket: Socket) => {
    sockets.add(socket);
    socket.once('close', () => {
      sockets.delete(socket);
      seen.delete(socket);
    });
  });
  const sweep = () => {
    const now = performance.now();
    for (const socket of sockets) {
      if (socket.writableLength === 0) {
        seen.delete(socket);
        continue;
      }
      const taken = socket.bytesWritten - socket.writableLength;
      const queued = (socket as unknown as { _handle?: { writeQueueSize?: number } })._handle?.writeQueueSize ?? 0;
      const s = seen.get(socket);
      if (!s || s.taken !== taken || s.queued !== queued) seen.set(socket, { taken, queued, since: now });
      else if (now - s.since >= timeoutMs) {
        seen.delete(socket);
        socket.destroy();
      }
    }
  };
  const timer = setInterval(sweep, Math.max(25, Math.floor(timeoutMs / 4))).unref();
  server.once('close', () => clearInterval(timer));
}

/** Starts a server with timeouts against slow clients; resolves once listening. */
export async function listen(handler: (req: IncomingMessage, res: ServerResponse) => void, o: ListenOptions): Promise<Server> {
  const server = createServer(
    {
      headersTimeout: o.headersTimeoutMs,
      requestTimeout: o.requestTimeoutMs,
      keepAliveTimeout: 5_000,
      // Node checks those timeouts only this often (default 30 s): without it a slow client holds its socket ~30 s.
      connectionsCheckingInterval: Math.max(50, Math.min(1_000, Math.floor(Math.min(o.headersTimeoutMs, o.requestTimeoutMs) / 2))),
    },
    handler,
  );
  watchStalledWrites(server, o.writeTimeoutMs ?? 30_000);
  server.on('clientError', answerClientError);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(o.port, o.host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  return server;
}

const CLIENT_ERRORS: Record<string, [ErrorCode, string]> = {
  HPE_HEADER_OVERFLOW: ['headers_too_large', 'Request headers are too large.'],
  ERR_HTTP_REQUEST_TIMEOUT: ['request_timeout', 'The request was not received in time.'],
};

/**
 * Node's own answers to unparsable or too-slow requests (400/408/431) as JSON with an x-request-id, like
 * every other response (SPEC §2a). Written raw: there is no ServerResponse for a request that never parsed.
 */
function answerClientError(err: Error & { code?: string }, socket: import('node:stream').Duplex): void {
  if (!socket.writable || err.code === 'ECONNRESET') {
    socket.destroy();
    return;
  }
  const [code, message] = CLIENT_ERRORS[err.code ?? ''] ?? ['invalid_request', 'The request could not be parsed.'];
  const e = new GatewayError(code, message);
  const body = JSON.stringify(errorBody(e));
  socket.end(
    `HTTP/1.1 ${e.status} ${STATUS_CODES[e.status]}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nx-request-id: ${newRequestId()}\r\nconnection: close\r\n\r\n${body}`,
  );
}

/** The port a listening server got (port 0 → a free one). */
export function portOf(server: Server): number {
  return (server.address() as AddressInfo).port;
}

/**
 * Stops accepting, lets in-flight requests finish until the deadline, then cuts what is left
 * (their `finally` still settles). Resolves when every connection is closed.
 */
export async function drain(server: Server, deadlineMs: number): Promise<void> {
  const closed = new Promise<void>((resolve) => server.close(() => resolve()));
  server.closeIdleConnections();
  const timer = setTimeout(() => server.closeAllConnections(), deadlineMs);
  const idle = setInterval(() => server.closeIdleConnections(), 100);
  try {
    await closed;
  } finally {
    clearTimeout(timer);
    clearInterval(idle);
  }
}
