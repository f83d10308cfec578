import t from 'tap';
import type { Test } from 'tap';
import { connect } from 'node:net';
import type { Server } from 'node:http';
import { createEdge, drain, listen, newRequestId, portOf } from '../../src/http/server.ts';
import { createRouter } from '../../src/http/router.ts';
import { GatewayError } from '../../src/http/errors.ts';
import { sendJson } from '../../src/http/respond.ts';
import { readJson } from '../../src/http/body.ts';
import { createLogger } from '../../src/obs/logger.ts';
import { createMetrics } from '../../src/obs/metrics.ts';
import type { Handler } from '../../src/http/context.ts';
import { waitFor } from '../helpers/wait.ts';
import { captureLogs } from '../helpers/logs.ts';

const REQ_ID = /^req_[1-9A-HJ-NP-Za-km-z]{22}$/;

/** An edge on a real loopback server with the given routes; log lines are captured. */
async function serve(
  t: Test,
  routes: { method: string; pattern: string; handler: Handler }[],
  timeouts: { headersTimeoutMs: number; requestTimeoutMs: number; writeTimeoutMs?: number } = {
    headersTimeoutMs: 10_000,
    requestTimeoutMs: 30_000,
  },
) {
  const { logger, lines: logs } = captureLogs();
  const handler = createEdge({
    router: createRouter(routes),
    logger,
    metrics: createMetrics({ defaults: false }),
    listener: 'public',
  });
  const server = await listen(handler, { host: '127.0.0.1', port: 0, ...timeouts });
  t.teardown(() => drain(server, 100));
  return { server, url: `http://127.0.0.1:${portOf(server)}`, logs };
}

t.test('request ids are req_ + 22 base58 and unique', async (t) => {
  const ids = new Set<string>();
  for (let i = 0; i < 1000; i++) {
    const id = newRequestId();
    t.match(id, REQ_ID);
    ids.add(id);
  }
  t.equal(ids.size, 1000);
});

t.test('a foreign error becomes a 500 internal_error whose message is not shown; the log keeps it', async (t) => {
  const { url, logs } = await serve(t, [
    {
      method: 'GET',
      pattern: '/boom',
      handler: async () => {
        throw new Error('db password is hunter2');
      },
    },
    {
      method: 'GET',
      pattern: '/teapot',
      handler: async () => {
        throw new GatewayError('share_revoked', 'gone');
      },
    },
  ]);
  const res = await fetch(`${url}/boom`);
  t.equal(res.status, 500);
  t.match(res.headers.get('x-request-id'), REQ_ID);
  const text = await res.text();
  t.same(JSON.parse(text), { error: { message: 'Internal server error.', type: 'server_error', code: 'internal_error', param: null } });
  t.notOk(text.includes('hunter2'));
  const gone = await fetch(`${url}/teapot`);
  t.equal(gone.status, 410);
  t.same(await gone.json(), { error: { message: 'gone', type: 'invalid_request_error', code: 'share_revoked', param: null } });
  // The line follows the response's close: wait for it rather than guess how long that takes.
  await waitFor(() => logs.some((l) => l.msg === 'request failed') && logs.some((l) => l.status === 410), 3000);
  const failed = logs.find((l) => l.msg === 'request failed');
  t.ok(failed, 'the 500 is logged at error level');
  t.equal(failed?.status, 500);
  t.match(JSON.stringify(failed), 'hunter2', 'with the original error for the operator');
  t.equal(logs.find((l) => l.status === 410)?.error_code, 'share_revoked');
});

t.test('the line waits for the handler: fields set after the client left are logged; unmatched routes are logged too', async (t) => {
  let release!: () => void;
  const released = new Promise<void>((r) => (release = r));
  const { url, logs } = await serve(t, [
    {
      method: 'GET',
      pattern: '/late',
      handler: async (ctx) => {
        ctx.res.writeHead(200);
        ctx.res.write('x');
        await released; // still working (billing) after the client is gone
        ctx.log.completion_tokens = 7;
      },
    },
  ]);
  const ac = new AbortController();
  const res = await fetch(`${url}/late`, { signal: ac.signal });
  const id = res.headers.get('x-request-id');
  ac.abort();
  await new Promise((r) => setTimeout(r, 50));
  t.equal(logs.filter((l) => l.request_id === id).length, 0, 'no line while the handler runs, though the response closed');
  release();
  await waitFor(() => logs.some((l) => l.request_id === id), 3000);
  t.match(
    logs.find((l) => l.request_id === id),
    { status: 200, aborted: true, completion_tokens: 7 },
  );
  const missing = await fetch(`${url}/nowhere`);
  t.equal(missing.status, 404);
  await waitFor(() => logs.some((l) => l.request_id === missing.headers.get('x-request-id')), 3000);
  t.match(
    logs.find((l) => l.request_id === missing.headers.get('x-request-id')),
    { status: 404, route: 'unmatched' },
  );
});

t.test('an error after the headers were sent cuts the connection instead of writing a second response', async (t) => {
  const { url } = await serve(t, [
    {
      method: 'GET',
      pattern: '/half',
      handler: async (ctx) => {
        ctx.res.writeHead(200, { 'content-type': 'text/plain' });
        ctx.res.write('partial');
        await new Promise((r) => setTimeout(r, 20));
        throw new Error('broke mid-body');
      },
    },
  ]);
  const res = await fetch(`${url}/half`);
  t.equal(res.status, 200);
  await t.rejects(res.text(), 'the body ends with a network error, not silently');
});

t.test('drain lets an in-flight request finish and closes idle connections', async (t) => {
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  const handler = createEdge({
    router: createRouter([
      {
        method: 'GET',
        pattern: '/slow',
        handler: async (ctx) => {
          await gate;
          sendJson(ctx.res, 200, { ok: true });
        },
      },
      { method: 'GET', pattern: '/fast', handler: async (ctx) => sendJson(ctx.res, 200, { ok: true }) },
    ]),
    logger: createLogger('silent'),
    metrics: createMetrics({ defaults: false }),
    listener: 'public',
  });
  const server: Server = await listen(handler, { host: '127.0.0.1', port: 0, headersTimeoutMs: 10_000, requestTimeoutMs: 30_000 });
  const url = `http://127.0.0.1:${portOf(server)}`;
  t.equal((await fetch(`${url}/fast`)).status, 200, 'leaves an idle keep-alive connection behind');
  const slow = fetch(`${url}/slow`);
  await new Promise((r) => setTimeout(r, 50));
  let drained = false;
  const draining = drain(server, 10_000).then(() => (drained = true));
  await new Promise((r) => setTimeout(r, 200));
  t.notOk(drained, 'waits for the in-flight request');
  release();
  const res = await slow;
  t.equal(res.status, 200);
  t.same(await res.json(), { ok: true });
  await draining;
  t.ok(drained);
});

t.test('drain cuts what is left at the deadline', async (t) => {
  const handler = createEdge({
    router: createRouter([{ method: 'GET', pattern: '/never', handler: () => new Promise(() => {}) }]),
    logger: createLogger('silent'),
    metrics: createMetrics({ defaults: false }),
    listener: 'public',
  });
  const server = await listen(handler, { host: '127.0.0.1', port: 0, headersTimeoutMs: 10_000, requestTimeoutMs: 30_000 });
  const stuck = fetch(`http://127.0.0.1:${portOf(server)}/never`).then(
    () => 'answered',
    () => 'cut',
  );
  await new Promise((r) => setTimeout(r, 50));
  const start = Date.now();
  await drain(server, 300);
  t.ok(Date.now() - start < 5_000, 'drain returned after the deadline');
  t.equal(await stuck, 'cut');
});

/** Sends `text` on a raw socket and resolves with what came back and when the server closed it (or null after waitMs). */
function rawStall(port: number, text: string, waitMs: number): Promise<{ closedAfterMs: number | null; data: string }> {
  return new Promise((resolve) => {
    const s = connect(port, '127.0.0.1');
    const start = Date.now();
    let data = '';
    const timer = setTimeout(() => {
      s.destroy();
      resolve({ closedAfterMs: null, data });
    }, waitMs);
    s.on('data', (d) => (data += d));
    s.on('error', () => {});
    s.on('close', () => {
      clearTimeout(timer);
      resolve({ closedAfterMs: Date.now() - start, data });
    });
    s.write(text);
  });
}

t.test('slow clients are cut off near the configured timeouts (SPEC §8)', async (t) => {
  const { server } = await serve(
    t,
    [
      { method: 'GET', pattern: '/x', handler: async (ctx) => sendJson(ctx.res, 200, {}) },
      { method: 'POST', pattern: '/y', handler: async (ctx) => sendJson(ctx.res, 200, (await readJson(ctx.req, 1000)).value) },
    ],
    { headersTimeoutMs: 300, requestTimeoutMs: 600 },
  );
  const port = portOf(server);
  // Generous bound: 10× the configured timeout. Node checks these timeouts on a timer
  // (connectionsCheckingInterval, 30 s by default), which must be set to honour sub-30 s timeouts.
  const [headers, body] = await Promise.all([
    rawStall(port, 'GET /x HTTP/1.1\r\nHost: x\r\n', 3_000),
    rawStall(port, 'POST /y HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"a"', 6_000),
  ]);
  t.ok(headers.closedAfterMs !== null, `half-sent headers are cut (closed after ${headers.closedAfterMs} ms, want < 3000)`);
  t.ok(body.closedAfterMs !== null, `a stalled body is cut (closed after ${body.closedAfterMs} ms, want < 6000)`);
});

t.test('server.write_timeout_ms: a response its client stopped reading is cut; a quiet one and keep-alive are not', async (t) => {
  const closed: string[] = [];
  const { server, logs } = await serve(
    t,
    [
      {
        method: 'GET',
        pattern: '/big',
        // 32 MiB: more than any socket buffer on loopback takes.
        handler: async (ctx) => {
          ctx.res.once('close', () => closed.push(`big finished=${ctx.res.writableFinished}`));
          ctx.res.writeHead(200, { 'content-type': 'application/octet-stream' });
          ctx.res.end(Buffer.alloc(32 * 1024 * 1024, 'x'));
        },
      },
      {
        method: 'GET',
        pattern: '/quiet',
        // Two parts 3 × the write timeout apart (an upstream slow between events): nothing waits for the client.
        handler: async (ctx) => {
          ctx.res.writeHead(200, { 'content-type': 'text/plain' });
          ctx.res.write('a');
          await new Promise((r) => setTimeout(r, 900));
          ctx.res.end('b');
        },
      },
      { method: 'GET', pattern: '/small', handler: async (ctx) => sendJson(ctx.res, 200, {}) },
    ],
    { headersTimeoutMs: 10_000, requestTimeoutMs: 30_000, writeTimeoutMs: 300 },
  );
  const port = portOf(server);

  // The stalled reader: reads the first bytes, then nothing; its socket stays open on our side.
  const stalled = connect(port, '127.0.0.1');
  stalled.on('error', () => {});
  stalled.once('data', () => stalled.pause());
  stalled.write('GET /big HTTP/1.1\r\nHost: x\r\n\r\n');
  await waitFor(async () => closed.length > 0, 5000, 'the stalled response to close', 20);
  t.same(closed, ['big finished=false'], 'the response closed unfinished: the gateway destroyed the connection');
  await waitFor(async () => logs.some((l) => l.route === '/big'), 2000, 'its request line', 20);
  t.match(
    logs.find((l) => l.route === '/big'),
    { status: 200, aborted: true },
    'logged as a request its client left',
  );
  stalled.destroy();

  const quiet = await fetch(`http://127.0.0.1:${port}/quiet`);
  t.equal(await quiet.text(), 'ab', 'a response quiet for 3 × write_timeout_ms with nothing waiting completes');

  // Keep-alive between requests is still Node's: an idle connection closes after keepAliveTimeout (5 s), not never.
  const started = Date.now();
  const idle = await new Promise<number>((resolve) => {
    const s = connect(port, '127.0.0.1');
    s.on('error', () => {});
    s.on('data', () => {});
    s.on('close', () => resolve(Date.now() - started));
    s.write('GET /small HTTP/1.1\r\nHost: x\r\n\r\n');
    setTimeout(() => s.destroy(), 9000);
  });
  t.ok(idle < 8000, `an idle keep-alive connection is closed by the server (${idle} ms)`);
});
