/**
 * The "bare proxy" target: the least a Node reverse proxy must do, so Tollgate's ratios separate the
 * cost of one Node proxy hop from the cost of Tollgate's own work. One undici Pool per upstream and
 * `pool.stream()` into the ServerResponse (NOTES §3: the cheapest variant measured there next to
 * dispatch()), hop-by-hop headers stripped, the upstream aborted when the client leaves. No auth, no
 * body parsing, no metering, no logging.
 *
 * With `--redis <url>` it is the "bare+redis" reference target (`npm run bench -- --reference`): the
 * same passthrough plus the two autopipelined Redis round trips of issue 6's reference point, one
 * INCRBY awaited before the upstream call and one sent when the response has ended. It tells how much
 * of a gap to the bare proxy two round trips alone explain on this machine.
 *   node bench/bare-proxy.ts --port 8081 --upstream http://127.0.0.1:8000 [--redis redis://127.0.0.1:6379]
 * Prints its base URL once listening; exits on SIGTERM/SIGINT.
 */
import { createServer, type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http';
import { parseArgs } from 'node:util';
import { Pool, type Dispatcher } from 'undici';
import { Redis } from 'ioredis';

const { values } = parseArgs({
  options: { port: { type: 'string', default: '0' }, upstream: { type: 'string' }, redis: { type: 'string' } },
});
if (!values.upstream) {
  process.stderr.write('bare-proxy: --upstream http://host:port is required\n');
  process.exit(2);
}

const HOP = new Set(['connection', 'keep-alive', 'transfer-encoding', 'te', 'trailer', 'upgrade', 'proxy-connection', 'host', 'expect']);

function strip(h: IncomingHttpHeaders): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  for (const k in h) {
    const v = h[k];
    if (v !== undefined && !HOP.has(k)) out[k] = v;
  }
  return out;
}

// Unlimited connections (undici's default), like a proxy sized for 1,000+ open streams.
const pool = new Pool(new URL(values.upstream).origin, {
  keepAliveTimeout: 30_000,
  headersTimeout: 120_000,
  bodyTimeout: 60_000,
  allowH2: false,
});

const redis = values.redis ? new Redis(values.redis, { enableAutoPipelining: true, maxRetriesPerRequest: 1 }) : undefined;
const COUNTER = 'bench:bare-redis';

const server = createServer({ keepAliveTimeout: 5_000 }, (req, res) => {
  if (!redis) return proxy(req, res);
  redis.incrby(COUNTER, 1).then(
    () => proxy(req, res),
    () => fail(res, 503),
  );
});

function fail(res: ServerResponse, status: number): void {
  if (!res.headersSent) {
    res.writeHead(status);
    res.end();
  } else res.destroy();
}

function proxy(req: IncomingMessage, res: ServerResponse): void {
  const ac = new AbortController();
  res.on('close', () => {
    if (!res.writableFinished) ac.abort(new Error('client gone'));
  });
  const hasBody = req.method !== 'GET' && req.method !== 'HEAD';
  pool
    .stream(
      {
        path: req.url!,
        method: req.method as Dispatcher.HttpMethod,
        headers: strip(req.headers),
        body: hasBody ? req : null,
        signal: ac.signal,
        opaque: res,
      },
      ({ statusCode, headers, opaque }) => {
        const out = opaque as ServerResponse;
        out.writeHead(statusCode, strip(headers));
        out.flushHeaders();
        return out;
      },
    )
    .then(
      () => void redis?.incrby(COUNTER, -1).catch(() => {}),
      (err: { code?: string }) => fail(res, err.code === 'UND_ERR_HEADERS_TIMEOUT' ? 504 : 502),
    );
}

server.listen(Number(values.port), '127.0.0.1', () => {
  const { port } = server.address() as { port: number };
  process.stdout.write(`http://127.0.0.1:${port}\n`);
});

const stop = (): void => {
  server.close();
  server.closeAllConnections();
  redis?.disconnect();
  void pool.close().finally(() => process.exit(0));
};
process.once('SIGTERM', stop);
process.once('SIGINT', stop);
