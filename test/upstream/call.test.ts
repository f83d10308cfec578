// One upstream attempt: how undici errors are classified for retries and the final status (SPEC §2a),
// and the dispatch handler's lifecycle — headers resolve `started`, early bytes are kept until a sink is
// attached, a full sink pauses the upstream, an abort before the request started still lands.
import t from 'tap';
import type { Dispatcher } from 'undici';
import { UpstreamCall, classify } from '../../src/upstream/call.ts';
import type { Upstream } from '../../src/upstream/pool.ts';

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

t.test('an abort before the request started is applied when it starts; abort after goes straight through', async (t) => {
  const early = new UpstreamCall(UP);
  early.abort(new Error('client gone'));
  const { c, log } = fakeController();
  early.onRequestStart(c);
  t.same(log, ['abort:client gone']);

  const late = new UpstreamCall(UP);
  const f = fakeController();
  late.onRequestStart(f.c);
  late.abort(new Error('retry'));
  late.abort(new Error('second'));
  t.same(f.log, ['abort:retry', 'abort:second']);
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
