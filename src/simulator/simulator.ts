/**
 * A deterministic OpenAI-compatible model server for tests, the demo and benchmarks: it stands in for
 * vLLM/SGLang on /v1/chat/completions, /v1/completions, /v1/responses and /v1/embeddings. Output is `tok0 tok1 …`, usage follows simPromptTokens, and each request can be steered
 * into delays, errors and broken streams (see steer.ts). Every request is recorded so tests can assert
 * what the gateway forwarded and when it let go.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { CHAT_API, respondGenerate, type SimApi } from './chat.ts';
import { COMPLETIONS_API, respondEmbeddings } from './completions.ts';
import { responsesApi, SimResponseStore } from './responses.ts';
import { createExchange } from './exchange.ts';
import { errorBody, JSON_HEADERS } from './output.ts';
import { encodeWhole } from './encode.ts';
import { preciseNow, Recorder, type RecordedRequest } from './record.ts';
import { readSimOptions, SimSteerError } from './steer.ts';

export type { RecordedRequest } from './record.ts';
export type { SimOptions } from './steer.ts';
export { simCompletionText, simCompletionTokens, simPromptTokens, simTokenText, type SimUsage } from './output.ts';

/** Options of startSimulator. */
export interface SimulatorOptions {
  /** Default 127.0.0.1. */
  host?: string;
  /** Default 0 (a free port). */
  port?: number;
  /** Ids listed by GET /v1/models (default ['sim-model']); chat accepts any model and echoes it. */
  modelIds?: string[];
  /** Keep request records (default true); benchmarks pass false. waitFor still sees live requests. */
  record?: boolean;
  /** Records kept before the oldest are dropped (default 10,000). */
  maxRecords?: number;
}

/** A running simulator. */
export interface Simulator {
  /** Base URL including `/v1`, e.g. `http://127.0.0.1:41234/v1`. */
  url: string;
  port: number;
  /** Recorded requests, oldest first (the same array for the simulator's life). */
  requests: RecordedRequest[];
  /** TCP connections accepted so far: a client that reconnects per request shows here (tests). */
  readonly connections: number;
  /** Forgets all records. */
  clear(): void;
  /** Stops listening and closes every connection, including streams in flight. */
  close(): Promise<void>;
  /** The first request, recorded or future, that satisfies `pred` (re-checked whenever a request changes). */
  waitFor(pred: (r: RecordedRequest) => boolean, timeoutMs?: number): Promise<RecordedRequest>;
}

// Bodies above this are refused with 413: far beyond any test, and it bounds memory under abuse.
const MAX_BODY_BYTES = 32 * 1024 * 1024;

/** Starts a simulator on host:port (default 127.0.0.1, a free port). */
export async function startSimulator(opts: SimulatorOptions = {}): Promise<Simulator> {
  const host = opts.host ?? '127.0.0.1';
  const recorder = new Recorder(opts.record === false ? 0 : (opts.maxRecords ?? 10_000));
  const modelsBody = modelsList(opts.modelIds ?? ['sim-model']);
  let nextId = 1;
  const stored = new SimResponseStore();
  /** The generating endpoints and their wire shapes; /v1/embeddings is answered apart (no generation). */
  const GENERATE = new Map<string, SimApi>([
    ['/v1/chat/completions', CHAT_API],
    ['/v1/completions', COMPLETIONS_API],
    ['/v1/responses', responsesApi(stored)],
  ]);

  const server = createServer((req, res) => {
    const rec: RecordedRequest = {
      id: nextId++,
      method: req.method ?? 'GET',
      path: req.url ?? '/',
      headers: req.headers,
      body: undefined,
      aborted: false,
      finished: false,
      chunksSent: 0,
      completionTokensSent: 0,
      startedAt: preciseNow(),
    };
    handle(req, res, rec).catch((err: unknown) => {
      // A bug in the simulator must not look like a steered fault: answer 500 with the message.
      if (!res.headersSent) sendJson(res, 500, errorBody(500, `simulator bug: ${String(err)}`));
      else res.destroy();
    });
  });

  async function handle(req: IncomingMessage, res: ServerResponse, rec: RecordedRequest): Promise<void> {
    const x = createExchange(req, res, rec, recorder);
    const q = rec.path.indexOf('?');
    const path = q === -1 ? rec.path : rec.path.slice(0, q);
    const raw = req.method === 'GET' || req.method === 'HEAD' ? undefined : await readBody(req);
    if (raw === 'too-large') {
      recorder.push(rec);
      return sendJson(res, 413, errorBody(413, 'request body too large for the simulator'));
    }
    if (raw !== undefined && raw.length > 0) rec.body = parseJson(raw);
    recorder.push(rec);
    if (x.done) return;

    if (path === '/v1/models') {
      if (req.method !== 'GET') return sendJson(res, 405, errorBody(405, 'method not allowed'));
      return sendJson(res, 200, modelsBody);
    }
    if (path.startsWith('/v1/responses/')) {
      if (req.method !== 'GET') return sendJson(res, 405, errorBody(405, 'method not allowed'));
      const id = decodeURIComponent(path.slice('/v1/responses/'.length));
      const found = stored.get(id);
      if (found === undefined) return sendJson(res, 404, errorBody(404, `Response with id '${id}' not found.`));
      return sendJson(res, 200, found, stored.encodingOf(id));
    }
    const api = GENERATE.get(path);
    if (api === undefined && path !== '/v1/embeddings') return sendJson(res, 404, errorBody(404, `no route ${req.method} ${path}`));
    if (req.method !== 'POST') return sendJson(res, 405, errorBody(405, 'method not allowed'));
    if (typeof rec.body !== 'object' || rec.body === null || Array.isArray(rec.body)) {
      return sendJson(res, 400, errorBody(400, 'body must be a JSON object'));
    }
    let steer;
    try {
      steer = readSimOptions(req.headers, rec.body);
    } catch (err) {
      if (err instanceof SimSteerError) return sendJson(res, 400, errorBody(400, err.message));
      throw err;
    }
    if (path === '/v1/responses') {
      const unseen = stored.unseen(rec.body);
      if (typeof unseen === 'string') return sendJson(res, 404, errorBody(404, unseen));
    }
    if (api === undefined) await respondEmbeddings(x, rec.body, steer);
    else await respondGenerate(x, rec.body, steer, api);
  }

  // Longer than any client pool's idle timeout (undici: 4 s; NOTES suggests 30 s), so the client,
  // not the server, closes idle sockets and a reused socket is never closed under a new request.
  server.keepAliveTimeout = 65_000;
  let connections = 0;
  server.on('connection', () => connections++);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port ?? 0, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const port = (server.address() as AddressInfo).port;
  const urlHost = host.includes(':') ? `[${host}]` : host;

  return {
    url: `http://${urlHost}:${port}/v1`,
    port,
    requests: recorder.requests,
    get connections() {
      return connections;
    },
    clear: () => recorder.clear(),
    waitFor: (pred, timeoutMs) => recorder.waitFor(pred, timeoutMs),
    close: () =>
      new Promise<void>((resolve, reject) => {
        server.close((err) => (err ? reject(err) : resolve()));
        server.closeAllConnections();
      }),
  };
}

function readBody(req: IncomingMessage): Promise<string | 'too-large' | undefined> {
  return new Promise((resolve) => {
    const parts: Buffer[] = [];
    let size = 0;
    req.on('data', (b: Buffer) => {
      size += b.length;
      if (size <= MAX_BODY_BYTES) parts.push(b);
    });
    req.once('end', () => resolve(size > MAX_BODY_BYTES ? 'too-large' : Buffer.concat(parts, size).toString('utf8')));
    // The client went away before its body was complete: nothing to parse; the exchange records the abort.
    req.once('error', () => resolve(undefined));
    req.once('close', () => {
      if (!req.complete) resolve(undefined);
    });
  });
}

function parseJson(raw: string): unknown {
  try {
    return JSON.parse(raw);
  } catch {
    return raw;
  }
}

function sendJson(res: ServerResponse, status: number, payload: string, encoding?: string): void {
  if (encoding === undefined) {
    res.writeHead(status, { ...JSON_HEADERS, 'content-length': Buffer.byteLength(payload) });
    return void res.end(payload);
  }
  const body = encodeWhole(encoding, payload);
  res.writeHead(status, { ...JSON_HEADERS, 'content-encoding': encoding, 'content-length': body.length });
  res.end(body);
}

function modelsList(ids: string[]): string {
  // A fixed `created` keeps the listing byte-identical across runs (2024-01-01T00:00:00Z).
  const data = ids.map((id) => ({ id, object: 'model', created: 1_704_067_200, owned_by: 'tollgate-simulator' }));
  return JSON.stringify({ object: 'list', data });
}
