import t from 'tap';
import { PassThrough } from 'node:stream';
import type { IncomingMessage } from 'node:http';
import { parseJson, readBody, readJson, requireJson } from '../../src/http/body.ts';
import { GatewayError, ValidationError } from '../../src/http/errors.ts';

/** A stand-in for IncomingMessage: a readable stream with headers. */
function fakeReq(headers: Record<string, string>, chunks: (string | Buffer)[] = []): IncomingMessage {
  const s = new PassThrough() as PassThrough & { headers: Record<string, string> };
  s.headers = headers;
  for (const c of chunks) s.write(c);
  s.end();
  return s as unknown as IncomingMessage;
}

function rejectionSync(f: () => unknown): unknown {
  try {
    f();
  } catch (e) {
    return e;
  }
  throw new Error('expected a throw');
}

async function rejection(p: Promise<unknown>): Promise<unknown> {
  try {
    await p;
  } catch (e) {
    return e;
  }
  throw new Error('expected a rejection');
}

t.test('requireJson accepts application/json with parameters and any case', async (t) => {
  for (const ct of [
    'application/json',
    'application/json; charset=utf-8',
    'application/json;charset=UTF-8',
    'Application/JSON',
    ' application/json ',
  ]) {
    t.doesNotThrow(() => requireJson(fakeReq({ 'content-type': ct })), ct);
  }
});

t.test('requireJson refuses every other media type with 415 unsupported_media_type', async (t) => {
  for (const ct of [
    'text/plain',
    'application/x-www-form-urlencoded',
    'multipart/form-data; boundary=x',
    'application/jsonx',
    'application/json-patch+json',
    'json',
    '',
  ]) {
    let err: unknown;
    try {
      requireJson(fakeReq({ 'content-type': ct }));
    } catch (e) {
      err = e;
    }
    t.type(err, GatewayError, ct);
    t.equal((err as GatewayError).code, 'unsupported_media_type', ct);
    t.equal((err as GatewayError).status, 415, ct);
  }
  const none = (() => {
    try {
      requireJson(fakeReq({}));
    } catch (e) {
      return e as GatewayError;
    }
  })();
  t.equal(none?.code, 'unsupported_media_type', 'missing Content-Type is refused');
});

t.test('the 415 message quotes a bounded slice of the header', async (t) => {
  const long = 'text/' + 'x'.repeat(5000);
  try {
    requireJson(fakeReq({ 'content-type': long }));
    t.fail('should throw');
  } catch (e) {
    t.ok((e as Error).message.length < 300, 'message stays short');
  }
});

t.test('readBody returns the text and byte count of a body within the limit', async (t) => {
  t.match(await readBody(fakeReq({}, ['{"a":', Buffer.from('1}')]), 100), { text: '{"a":1}', bytes: 7 });
  t.equal((await readBody(fakeReq({}, [Buffer.alloc(100, 'x')]), 100)).bytes, 100, 'exactly the limit is accepted');
  t.match(await readBody(fakeReq({}), 100), { text: '', bytes: 0 }, 'empty body');
});

t.test('readBody decodes a character split across chunks, and counts bytes, not characters', async (t) => {
  const euro = Buffer.from('"€😀"'); // 3 + 4 bytes inside quotes
  const r = await readBody(fakeReq({}, [euro.subarray(0, 2), euro.subarray(2, 6), euro.subarray(6)]), 100);
  t.equal(r.text, '"€😀"');
  t.equal(r.bytes, 9);
  const cut = [Buffer.from([0x22, 0xe2]), Buffer.from([0x82])]; // a body ending inside a character
  const bad = await readBody(fakeReq({}, cut), 100);
  t.equal(bad.text, Buffer.concat(cut).toString('utf8'), 'invalid UTF-8 decodes as Buffer#toString does');
  const next = await readBody(fakeReq({}, [Buffer.from('"a'), Buffer.from('b"')]), 100);
  t.equal(next.text, '"ab"', 'the shared decoder carries nothing over to the next body');
});

t.test('readBody refuses a declared content-length over the limit before reading', async (t) => {
  const e = await rejection(readBody(fakeReq({ 'content-length': '101' }), 100));
  t.type(e, GatewayError);
  t.equal((e as GatewayError).code, 'request_too_large');
  t.equal((e as GatewayError).status, 413);
});

t.test('readBody refuses an undeclared (chunked) body once it passes the limit', async (t) => {
  const e = await rejection(readBody(fakeReq({}, [Buffer.alloc(60), Buffer.alloc(60)]), 100));
  t.equal((e as GatewayError).code, 'request_too_large');
});

t.test('parseJson: valid JSON parses, a syntax error is a 422 json_invalid', async (t) => {
  t.same(parseJson('{"x":[1,2]}'), { x: [1, 2] });
  t.equal(parseJson('null'), null);
  for (const bad of ['', '{', '{"a":1,}', 'nope', '{"a":1}x']) {
    let e: unknown;
    try {
      parseJson(bad);
    } catch (err) {
      e = err;
    }
    t.type(e, ValidationError, JSON.stringify(bad));
    const d = (e as ValidationError).detail;
    t.equal(d.length, 1);
    t.same(Object.keys(d[0]!).sort(), ['ctx', 'input', 'loc', 'msg', 'type']);
    t.equal(d[0]!.type, 'json_invalid');
    t.equal(d[0]!.msg, 'JSON decode error');
    t.equal(d[0]!.loc[0], 'body');
  }
});

t.test(
  'parseJson keeps integers beyond 2^53 digit for digit, anywhere in the body; other numbers read as JSON.parse reads them',
  async (t) => {
    const text = '{"seed":9007199254740993,"a":[1,{"b":-18446744073709551615}],"f":0.5,"e":1e3,"s":"12345678901234567890"}';
    t.equal(
      JSON.stringify(parseJson(text)),
      '{"seed":9007199254740993,"a":[1,{"b":-18446744073709551615}],"f":0.5,"e":1000,"s":"12345678901234567890"}',
    );
    const safe = parseJson('{"n":9007199254740991,"m":1234567890123456}') as Record<string, unknown>;
    t.same(safe, { n: 9007199254740991, m: 1234567890123456 }, 'safe 16-digit integers stay plain numbers');
    t.equal(typeof safe['n'], 'number');
    t.equal(
      JSON.stringify(parseJson('[9007199254740992.5]')),
      '[9007199254740992]',
      'a non-integer literal is a float, as JSON.parse reads it',
    );
  },
);

t.test('parseJson survives nesting deeper than the call stack', async (t) => {
  const deep = '{"x":' + '['.repeat(100_000) + ']'.repeat(100_000) + '}';
  t.type(parseJson(deep, Infinity), 'object', 'with no depth limit');
  // Source-text access (the reviver) recurses: a big integer that deep is refused as invalid JSON, not a crash.
  t.throws(() => parseJson('[' + '['.repeat(100_000) + '9007199254740993' + ']'.repeat(100_001), Infinity), ValidationError);
});

t.test('parseJson refuses nesting past max depth before parsing: 422 json_invalid, nesting too deep', async (t) => {
  t.same(parseJson('{"a":' + '['.repeat(63) + ']'.repeat(63) + '}'), { a: JSON.parse('['.repeat(63) + ']'.repeat(63)) }, '64 levels pass');
  const e = rejectionSync(() => parseJson('{"a":' + '['.repeat(64) + ']'.repeat(64) + '}'));
  t.type(e, ValidationError);
  const d = (e as ValidationError).detail[0]!;
  t.same([d.loc, d.type, d.msg, d.input], [['body'], 'json_invalid', 'JSON decode error', null]);
  t.match(d.ctx.error, /nesting too deep/);
  t.throws(() => parseJson('[[[1]]]', 2), ValidationError, 'the limit is a parameter');
  t.same(parseJson('[[1]]', 2), [[1]]);
  // A million deep: refused by the scan in milliseconds, where JSON.parse + stringify took seconds.
  const million = '['.repeat(1_000_000) + ']'.repeat(1_000_000);
  const t0 = performance.now();
  t.throws(() => parseJson(million), ValidationError);
  // Bound loose for a loaded machine: what it guards against is the seconds a parse of it took.
  t.ok(performance.now() - t0 < 1000, 'refused at the 65th bracket, without reading the rest');
});

t.test('readJson checks media type first, then size, then syntax', async (t) => {
  t.equal(
    ((await rejection(readJson(fakeReq({ 'content-type': 'text/plain', 'content-length': '999999' }, ['{']), 10))) as GatewayError).code,
    'unsupported_media_type',
  );
  t.equal(
    ((await rejection(readJson(fakeReq({ 'content-type': 'application/json' }, ['{'.repeat(20)]), 10))) as GatewayError).code,
    'request_too_large',
  );
  t.type(await rejection(readJson(fakeReq({ 'content-type': 'application/json' }, ['{']), 10)), ValidationError);
  const ok = await readJson(fakeReq({ 'content-type': 'application/json' }, ['{"k":"v"}']), 100);
  t.same(ok.value, { k: 'v' });
  t.equal(ok.bytes, 9);
});

t.test('under a budget: reserved as read, refused past it (503 overloaded) without buffering, released once', async (t) => {
  const { createBodyBudget } = await import('../../src/limits/body-budget.ts');
  const budget = createBodyBudget(1000);
  const a = await readBody(fakeReq({}, [Buffer.alloc(300, 'a'), Buffer.alloc(300, 'b')]), 10_000, budget);
  t.equal(budget.used, 600, 'held while the request needs it');
  await t.rejects(
    readBody(fakeReq({ 'content-length': '500' }, [Buffer.alloc(500)]), 10_000, budget),
    { code: 'overloaded', status: 503 },
    'a body that cannot fit: refused as its bytes arrive',
  );
  t.equal(budget.used, 600, 'the refused body gave back what it had');
  await t.rejects(
    readBody(fakeReq({}, [Buffer.alloc(300), Buffer.alloc(300)]), 10_000, budget),
    { code: 'overloaded' },
    'an undeclared body: refused once it passes',
  );
  t.equal(budget.used, 600, 'and gave back what it had reserved');
  a.release();
  a.release();
  t.equal(budget.used, 0, 'release is idempotent');
  await t.rejects(readBody(fakeReq({}, [Buffer.alloc(600)]), 500, budget), { code: 'request_too_large' });
  t.equal(budget.used, 0, 'a 413 gives its bytes back too');
});

t.test('a refused body still arriving is read and dropped first: the uploading client gets the 413, not a reset', async (t) => {
  const { createServer, request } = await import('node:http');
  const { sendError } = await import('../../src/http/respond.ts');
  const server = createServer((req, res) => {
    readBody(req, 1024).then(
      () => res.end('read'),
      (e: unknown) => sendError(res, e),
    );
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.teardown(() => server.close());
  const { port } = server.address() as { port: number };
  const size = 8 * 1024 * 1024;
  // The outcome once the client has both sent everything and read the answer (or failed at either).
  const outcome = await new Promise<string>((resolve) => {
    let status = 'no response';
    let errored = '';
    let pending = 2;
    const settle = () => --pending === 0 && resolve(errored || status);
    const req = request({ port, host: '127.0.0.1', method: 'POST', agent: false, headers: { 'content-length': size } }, (res) => {
      res.resume();
      res.on('end', () => {
        status = `status ${res.statusCode}`;
        settle();
      });
    });
    req.on('error', (e) => {
      errored ||= `error ${(e as NodeJS.ErrnoException).code ?? e.message}`;
      pending = 1;
      settle();
    });
    req.on('finish', settle);
    // Sent in pieces, as a client on a real network would: most of it after the refusal was decided.
    let sent = 0;
    const piece = Buffer.alloc(64 * 1024, 'x');
    const more = () => {
      if (sent >= size) return req.end();
      sent += piece.length;
      if (req.write(piece)) setTimeout(more, 1);
      else req.once('drain', more);
    };
    more();
  });
  t.equal(outcome, 'status 413');
});

t.test('a declared content-length reserves nothing until its bytes arrive (SPEC §13)', async (t) => {
  const { createBodyBudget } = await import('../../src/limits/body-budget.ts');
  const budget = createBodyBudget(1000, undefined, { timeoutMs: 10_000 });
  const req = new PassThrough() as PassThrough & { headers: Record<string, string> };
  req.headers = { 'content-length': '900' };
  const read = readBody(req as unknown as IncomingMessage, 10_000, budget);
  req.write(Buffer.alloc(10));
  await new Promise((r) => setImmediate(r));
  t.equal(budget.used, 10, 'only the 10 bytes that came');
  const other = await readBody(fakeReq({ 'content-length': '800' }, [Buffer.alloc(800)]), 10_000, budget);
  t.equal(budget.used, 810, 'a second body fits beside a promise of 900');
  other.release();
  req.end(Buffer.alloc(890));
  const r = await read;
  t.equal(r.bytes, 900);
  r.release();
  t.equal(budget.used, 0);
});

t.test('a body not complete within the budget timeout: 408 request_timeout, connection closed, bytes given back', async (t) => {
  const { createBodyBudget } = await import('../../src/limits/body-budget.ts');
  const budget = createBodyBudget(1000, undefined, { timeoutMs: 150 });
  const req = new PassThrough() as PassThrough & { headers: Record<string, string>; complete: boolean };
  req.headers = { 'content-length': '100' };
  req.complete = false;
  const read = readBody(req as unknown as IncomingMessage, 10_000, budget);
  req.write(Buffer.alloc(5));
  const t0 = performance.now();
  const e = (await rejection(read)) as GatewayError;
  t.equal(e.code, 'request_timeout');
  t.equal(e.status, 408);
  t.equal(e.headers?.connection, 'close');
  t.ok(performance.now() - t0 < 1000, 'refused at the timeout, not after a drain');
  t.equal(budget.used, 0);
});

t.test('per-key body cap: one key past it gets 429 concurrency_limit_exceeded, another key is served', async (t) => {
  const { createBodyBudget } = await import('../../src/limits/body-budget.ts');
  const budget = createBodyBudget(10_000, undefined, { perKey: 1000 });
  const a1 = await readBody(fakeReq({}, [Buffer.alloc(600)]), 10_000, budget.forKey('a'));
  const e = (await rejection(readBody(fakeReq({}, [Buffer.alloc(300), Buffer.alloc(300)]), 10_000, budget.forKey('a')))) as GatewayError;
  t.equal(e.code, 'concurrency_limit_exceeded');
  t.equal(e.status, 429);
  t.equal(e.headers?.['x-ratelimit-scope'], 'key');
  t.equal(budget.usedBy('a'), 600, 'the refused body gave its 300 back');
  const b = await readBody(fakeReq({}, [Buffer.alloc(900)]), 10_000, budget.forKey('b'));
  t.equal(budget.used, 1500, 'process total');
  a1.release();
  b.release();
  t.equal(budget.used, 0);
  t.equal(budget.usedBy('a'), 0);
});
