// One upstream attempt: how undici errors are classified for retries and the final status (SPEC §2a),
// and the dispatch handler's lifecycle — headers resolve `started`, early bytes are kept until a sink is
// attached, a full sink pauses the upstream, an abort before the request started still lands (in a real
// pool, without costing the connection it is given) — and an
// encoded answer's: decoded for the sink, refused when undecodable, broken when its coding breaks.
import t from 'tap';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Pool, type Dispatcher } from 'undici';
import { brotliCompressSync, constants, gzipSync } from 'node:zlib';
import { UpstreamCall, classify } from '../../src/upstream/call.ts';
import type { Upstream } from '../../src/upstream/pool.ts';
import { waitFor } from '../helpers/wait.ts';
import { gzipBomb } from '../helpers/gzip-bomb.ts';

t.test('classify: connect failures are unavailable, pre-header and idle timeouts are timeouts, the rest errors', async (t) => {
  const table: [unknown, { kind: string; reason: string }][] = [
    [{ code: 'UND_ERR_HEADERS_TIMEOUT' }, { kind: 'timeout', reason: 'headers_timeout' }],
    [{ code: 'UND_ERR_BODY_TIMEOUT' }, { kind: 'timeout', reason: 'idle_timeout' }],
    [{ code: 'UND_ERR_CONNECT_TIMEOUT' }, { kind: 'unavailable', reason: 'connect_timeout' }],
    [{ code: 'ECONNREFUSED' }, { kind: 'unavailable', reason: 'econnrefused' }],
    [{ code: 'ENOTFOUND' }, { kind: 'unavailable', reason: 'enotfound' }],
    [{ code: 'EHOSTUNREACH' }, { kind: 'unavailable', reason: 'ehostunreach' }],
    [{ code: 'ECONNRESET' }, { kind: 'unavailable', reason: 'econnreset' }],
    [{ code: 'EAI_AGAIN' }, { kind: 'unavailable', reason: 'eai_again' }],
    [{ code: 'UND_ERR_SOCKET' }, { kind: 'unavailable', reason: 'socket' }],
    [{ code: 'UND_ERR_RESPONSE_STATUS_CODE' }, { kind: 'error', reason: 'und_err_response_status_code' }],
    [{ code: 'UND_ERR_ABORTED' }, { kind: 'error', reason: 'und_err_aborted' }],
    [new Error('plain'), { kind: 'error', reason: 'error' }],
    [{}, { kind: 'error', reason: 'error' }],
  ];
  for (const [err, want] of table)
    t.same(classify(err), want, JSON.stringify(err) === '{}' ? 'no code' : String((err as { code?: string }).code ?? 'Error'));
});

/** A controller that records what the handler asked of it. */
function fakeController() {
  const log: string[] = [];
  const c = {
    aborted: false,
    paused: false,
    reason: null as Error | null,
    abort(reason: Error) {
      log.push(`abort:${reason.message}`);
      c.aborted = true;
    },
    pause() {
      log.push('pause');
      c.paused = true;
    },
    resume() {
      log.push('resume');
      c.paused = false;
    },
  };
  return { c: c as unknown as Dispatcher.DispatchController, log };
}

const UP = { label: 'h:1' } as Upstream;

t.test('headers resolve started; bytes before attach are delivered first, in order', async (t) => {
  const call = new UpstreamCall(UP);
  const { c } = fakeController();
  call.onRequestStart(c);
  call.onResponseStart(c, 200, { 'content-type': 'text/event-stream' });
  t.same(await call.started, { status: 200, headers: { 'content-type': 'text/event-stream' } });
  call.onResponseData(c, Buffer.from('a'));
  call.onResponseData(c, Buffer.from('b'));
  const got: string[] = [];
  call.attach({ data: (b) => (got.push(b.toString()), true) });
  t.same(got, ['a', 'b'], 'early chunks replayed on attach');
  call.onResponseData(c, Buffer.from('c'));
  t.same(got, ['a', 'b', 'c']);
  call.onResponseEnd();
  await call.done;
  t.pass('done resolves at the end');
});

t.test("the sink's end() runs in the tick of the upstream's end, before done resolves", async (t) => {
  const call = new UpstreamCall(UP);
  const { c } = fakeController();
  call.onRequestStart(c);
  call.onResponseStart(c, 200, {});
  const log: string[] = [];
  call.attach({ data: (b) => (log.push(`data ${b}`), true), end: () => log.push('end') });
  void call.done.then(() => log.push('done'));
  call.onResponseData(c, Buffer.from('x'));
  call.onResponseEnd();
  t.same(log, ['data x', 'end'], 'synchronously, right after the last data');
  await call.done;
  t.same(log, ['data x', 'end', 'done']);

  const early = new UpstreamCall(UP);
  early.onRequestStart(c);
  early.onResponseStart(c, 200, {});
  early.onResponseData(c, Buffer.from('y'));
  early.onResponseEnd();
  let ended = false;
  early.attach({ data: () => true, end: () => (ended = true) });
  await early.done;
  t.notOk(ended, 'a body that ended before attach does not call end(): the relay ends it after done');
});

t.test('a full sink pauses the upstream; its resume callback resumes it', async (t) => {
  const call = new UpstreamCall(UP);
  const { c, log } = fakeController();
  call.onRequestStart(c);
  call.onResponseStart(c, 200, {});
  let resume: (() => void) | undefined;
  call.attach({ data: (_b, r) => ((resume = r), false) });
  call.onResponseData(c, Buffer.from('x'));
  t.same(log, ['pause']);
  resume!();
  t.same(log, ['pause', 'resume']);
});

t.test('a full sink during the early-chunk replay pauses too', async (t) => {
  const call = new UpstreamCall(UP);
  const { c, log } = fakeController();
  call.onRequestStart(c);
  call.onResponseStart(c, 200, {});
  call.onResponseData(c, Buffer.from('x'));
  call.attach({ data: () => false });
  t.same(log, ['pause']);
});

t.test(
  'an abort before the request started refuses it when it starts, connection untouched; abort after goes straight through',
  async (t) => {
    const early = new UpstreamCall(UP);
    early.abort(new Error('client gone'));
    await t.rejects(early.started, { message: 'client gone' }, 'the attempt ends at once');
    const { c, log } = fakeController();
    t.throws(() => early.onRequestStart(c), { message: 'client gone' }, 'undici errors a request whose onRequestStart throws');
    t.same(log, [], 'not controller.abort(): that destroys the connection');
    early.onResponseError(c, new Error('client gone'));
    await early.unqueued;
    t.pass('unqueued once undici let go of it');

    const late = new UpstreamCall(UP);
    const f = fakeController();
    late.onRequestStart(f.c);
    late.abort(new Error('retry'));
    late.abort(new Error('second'));
    t.same(f.log, ['abort:retry', 'abort:second']);
  },
);

t.test('calls abandoned in a real pool queue are dropped there: the connection serves the request behind them', async (t) => {
  let connections = 0;
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => setTimeout(() => res.end('ok'), req.url === '/long' ? 100 : 0));
  });
  server.on('connection', () => connections++);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.teardown(() => new Promise<void>((r) => (server.closeAllConnections(), server.close(() => r()))));
  const pool = new Pool(`http://127.0.0.1:${(server.address() as AddressInfo).port}`, { connections: 1 });
  t.teardown(() => pool.destroy());
  const send = (path: string) => {
    const call = new UpstreamCall(UP);
    pool.dispatch({ path, method: 'POST', body: Buffer.from('{}') }, call);
    return call;
  };
  const long = send('/long');
  const abandoned = Array.from({ length: 20 }, () => send('/x'));
  for (const c of abandoned) c.abort(new Error('client gone'));
  const behind = send('/x');
  behind.attach({ data: () => true });
  long.attach({ data: () => true });
  t.equal((await behind.started).status, 200);
  await behind.done;
  await Promise.all(abandoned.map((c) => c.unqueued));
  t.equal(connections, 1, 'one connection: none destroyed for an abandoned call (undici aborting them opened 21)');
});

t.test('an error before headers rejects started and done; after headers only done', async (t) => {
  const before = new UpstreamCall(UP);
  const { c } = fakeController();
  before.onRequestStart(c);
  before.onResponseError(c, Object.assign(new Error('refused'), { code: 'ECONNREFUSED' }));
  await t.rejects(before.started, { code: 'ECONNREFUSED' });
  await t.rejects(before.done, { code: 'ECONNREFUSED' });

  const after = new UpstreamCall(UP);
  after.onRequestStart(c);
  after.onResponseStart(c, 200, {});
  after.onResponseError(c, new Error('cut'));
  t.same(await after.started, { status: 200, headers: {} }, 'started stays resolved');
  await t.rejects(after.done, { message: 'cut' });
});

/** Feeds an encoded body to `call` in `size`-byte chunks and ends it. */
function send(call: UpstreamCall, c: Dispatcher.DispatchController, body: Buffer, size = 50): void {
  for (let at = 0; at < body.length; at += size) call.onResponseData(c, body.subarray(at, at + size));
  call.onResponseEnd();
}

const TEXT = 'data: {"id":"resp_1","choices":[]}\n\n'.repeat(200);

t.test('an encoded answer reaches the sink decoded, its end before done; head() is decoded text', async (t) => {
  for (const [coding, body] of [
    ['gzip', gzipSync(TEXT)],
    ['br', brotliCompressSync(TEXT)],
  ] as const) {
    const call = new UpstreamCall(UP);
    const { c } = fakeController();
    call.onRequestStart(c);
    call.onResponseStart(c, 200, { 'content-encoding': coding === 'gzip' ? 'x-gzip' : coding });
    await call.started;
    t.equal(call.coding, coding);
    call.keepHead();
    send(call, c, body);
    t.notOk(call.hasEarlyData, 'nothing is decoded before the sink is there');
    const got: Buffer[] = [];
    const log: string[] = [];
    call.attach({ data: (b) => (got.push(b), true), end: () => log.push('end') });
    void call.done.then(() => log.push('done'));
    await call.done;
    t.equal(Buffer.concat(got).toString(), TEXT, `${coding}: the upstream's content`);
    t.same(log, ['end', 'done']);
    t.equal(call.head(), TEXT.slice(0, 4096), `${coding}: the answer's id is read from decoded bytes`);
  }
  const plain = new UpstreamCall(UP);
  plain.onResponseStart(fakeController().c, 200, { 'content-encoding': 'identity' });
  t.equal(plain.coding, undefined, 'identity is plain');
});

t.test('a coding that cannot be decoded rejects started and aborts the upstream', async (t) => {
  const call = new UpstreamCall(UP);
  const { c, log } = fakeController();
  call.onRequestStart(c);
  call.onResponseStart(c, 200, { 'content-encoding': 'compress' });
  await t.rejects(call.started, { code: 'UPSTREAM_CONTENT_CODING' });
  await t.rejects(call.done, { code: 'UPSTREAM_CONTENT_CODING' });
  t.match(log, [/^abort:upstream answered with content-encoding "compress"/]);
  t.same(
    classify(await call.started.catch((e: unknown) => e)),
    { kind: 'error', reason: 'upstream_content_coding' },
    'a bounded metric reason',
  );
});

t.test('a body whose coding breaks aborts the upstream and rejects done, after the bytes decoded before', async (t) => {
  const call = new UpstreamCall(UP);
  const { c, log } = fakeController();
  call.onRequestStart(c);
  call.onResponseStart(c, 200, { 'content-encoding': 'gzip' });
  const got: Buffer[] = [];
  call.attach({ data: (b) => (got.push(b), true) });
  // The content up to a flush point (whole bytes, no last block), then bytes no block starts with.
  call.onResponseData(c, gzipSync(TEXT, { finishFlush: constants.Z_SYNC_FLUSH }));
  await waitFor(() => got.length > 0, 2000, 'the content before the bad bytes');
  call.onResponseData(c, Buffer.alloc(32, 0xff));
  await t.rejects(call.done, { code: 'UPSTREAM_DECODING' });
  t.match(log, [/^abort:upstream gzip body could not be decoded/]);
  t.equal(Buffer.concat(got).toString(), TEXT, 'what was decoded before reached the sink');
});

t.test('an abort after the upstream ended, while the decoder still gives bytes, rejects done', async (t) => {
  const call = new UpstreamCall(UP);
  const { c } = fakeController();
  call.onRequestStart(c);
  call.onResponseStart(c, 200, { 'content-encoding': 'gzip' });
  send(call, c, gzipSync(TEXT.repeat(50)), 1 << 20);
  let taken = 0;
  call.attach({
    data: (b) => {
      taken += b.length;
      return false; // full: the rest waits
    },
  });
  await waitFor(() => taken > 0, 2000, 'a first decoded chunk');
  call.abort(new Error('client gone'));
  await t.rejects(call.done, { message: 'client gone' });
  t.ok(taken < TEXT.length * 50, 'the rest was never delivered');
});

t.test('a full sink pauses the decoder, whose full input pauses the upstream; resume gives every byte', async (t) => {
  const call = new UpstreamCall(UP);
  const { c, log } = fakeController();
  call.onRequestStart(c);
  call.onResponseStart(c, 200, { 'content-encoding': 'gzip' });
  let resume: (() => void) | undefined;
  let size = 0;
  let full = true;
  call.attach({
    data: (b, r) => {
      resume = r;
      size += b.length;
      return !full;
    },
  });
  // ~100 MiB from ~100 KiB: more than the decoder's 64 KiB input buffer.
  const bomb = gzipBomb('', 100, '');
  let at = 0;
  while (at < bomb.length && !log.includes('pause')) call.onResponseData(c, bomb.subarray(at, (at += 1024)));
  t.ok(log.includes('pause'), `the upstream paused after ${at} of ${bomb.length} bytes`);
  await waitFor(() => size > 0, 2000, 'a first decoded chunk');
  await new Promise((r) => setTimeout(r, 50));
  t.ok(size <= 64 * 1024, `the full sink got one chunk (${size} bytes), not the bomb`);
  full = false;
  resume!();
  // The upstream is fed whenever the decoder's drain resumed it, then ends.
  await waitFor(
    () => {
      while (at < bomb.length && !c.paused) call.onResponseData(c, bomb.subarray(at, (at += 1024)));
      return at >= bomb.length;
    },
    20_000,
    'the upstream to be read to its end',
    1,
  );
  t.ok(log.includes('resume'), "the decoder's drain resumed the upstream");
  call.onResponseEnd();
  await call.done;
  t.equal(size, 100 * 1024 * 1024, 'every decoded byte delivered');
});

t.test(
  'sent only once written to a connection; a call still queued in the pool for one is ended at once by abort, never sent',
  async (t) => {
    const { Pool } = await import('undici');
    const { startSimulator } = await import('../../src/simulator/simulator.ts');
    const sim = await startSimulator();
    t.teardown(() => sim.close());
    const pool = new Pool(`http://127.0.0.1:${sim.port}`, { connections: 1 });
    t.teardown(() => pool.destroy());
    const up = { label: 'sim', pool, basePath: '/v1' } as unknown as Upstream;
    // A non-streaming 8 s generation: it holds the only connection, so the second call waits in the pool.
    const body = Buffer.from(
      JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'x' }], sim: { tokens: 100, delay_ms: 80 } }),
    );
    const send = (call: UpstreamCall, payload = body) =>
      pool.dispatch({ path: '/v1/chat/completions', method: 'POST', headers: { 'content-type': 'application/json' }, body: payload }, call);
    const first = new UpstreamCall(up);
    const queued = new UpstreamCall(up);
    send(first);
    send(queued);
    await sim.waitFor(() => true, 2000);
    t.equal(first.sent, true, 'the first was written to the connection');
    t.equal(queued.sent, false, 'the second waits for a connection');
    // The route's total timeout (routes/metered.ts), or its client leaving, while the call waits: it ends now,
    // not when the first's generation frees the connection (undici applies an abort only on a connection).
    const started = Date.now();
    queued.abort(Object.assign(new Error('total upstream timeout'), { code: 'UND_ERR_HEADERS_TIMEOUT' }));
    await t.rejects(queued.started, { message: 'total upstream timeout' });
    await t.rejects(queued.done);
    t.ok(Date.now() - started < 2000, `ended at once (${Date.now() - started} ms), not after the 8 s generation`);
    t.equal(queued.sent, false, 'cut before it was sent');
    first.abort(new Error('retry'));
    await t.rejects(first.started, { message: 'retry' });
    await sim.waitFor((r) => r.aborted, 2000);
    // The queue moves on once the first's connection is gone: the aborted call is dropped, never written, and
    // a call queued after it is the next to reach the upstream (the queue is first in, first out).
    const third = new UpstreamCall(up);
    send(third, Buffer.from(JSON.stringify({ model: 'third', messages: [{ role: 'user', content: 'x' }] })));
    const next = await sim.waitFor((r) => r.id === 2, 2000);
    t.equal(next.body.model, 'third', "the upstream's next request is the third: the aborted one was dropped");
    t.equal(sim.requests.length, 2);
    t.equal(queued.sent, false);
    third.abort(new Error('done'));
  },
);
