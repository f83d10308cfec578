// The request line's writer (createLineWriter): byte for byte pino's line, and pino itself for what it must shape.
import t from 'tap';
import { Writable } from 'node:stream';
import { createLineWriter, createLogger } from '../../src/obs/logger.ts';

function capture() {
  const lines: string[] = [];
  const sink = new Writable({
    write(c, _e, cb) {
      for (const l of String(c).split('\n').filter(Boolean)) lines.push(l);
      cb();
    },
  });
  return { sink, lines };
}

/** The line without its time, which differs between two calls. */
const timeless = (l: string) => l.replace(/"time":"[^"]+"/, '"time":"T"');

const REQUEST = {
  listener: 'public',
  request_id: 'req_4mJ9sQfW2xYbT7kP1nRcZe',
  method: 'POST',
  route: '/v1/chat/completions',
  status: 200,
  duration_ms: 12.345,
  model: 'm "quoted" \\ \n\u0001 é',
  hold_micros: 1660,
  missing: undefined,
  nan: NaN,
  aborted: true,
  key_id: 'key_8Jk2mN4pQ6rS8tU1',
  account: 'acme',
};

t.test('a flat line is exactly what pino writes, child bindings included', async (t) => {
  for (const child of [false, true]) {
    const a = capture();
    const b = capture();
    const viaPino = child ? createLogger('info', a.sink).child({ worker: 2 }) : createLogger('info', a.sink);
    const fast = child ? createLogger('info', b.sink).child({ worker: 2 }) : createLogger('info', b.sink);
    viaPino.info(REQUEST, 'request');
    createLineWriter(fast, 'request')(REQUEST);
    await new Promise((r) => setImmediate(r));
    t.equal(b.lines.length, 1);
    t.equal(timeless(b.lines[0]!), timeless(a.lines[0]!));
    const parsed = JSON.parse(b.lines[0]!) as Record<string, unknown>;
    t.match(parsed.time, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    t.equal(parsed.worker, child ? 2 : undefined);
  }
});

t.test('an object field or a redacted name goes through pino: err serialised, key censored', async (t) => {
  const { sink, lines } = capture();
  const write = createLineWriter(createLogger('info', sink), 'request');
  write({ route: '/x', err: new Error('boom') });
  write({ route: '/y', key: 'svc-live-secret' });
  await new Promise((r) => setImmediate(r));
  const [withErr, withKey] = lines.map((l) => JSON.parse(l) as Record<string, unknown>);
  t.match(withErr, { route: '/x', msg: 'request', err: { type: 'Error', message: 'boom' } });
  t.match((withErr!.err as { stack: string }).stack, /boom/);
  t.equal(withKey!.key, '[REDACTED]');
  t.notOk(lines.join('\n').includes('svc-live-secret'));
});

t.test('the logger level is honoured, also when it changes after the writer was made', async (t) => {
  const { sink, lines } = capture();
  const logger = createLogger('warn', sink);
  const write = createLineWriter(logger, 'request');
  write({ n: 1 });
  logger.level = 'info';
  write({ n: 2 });
  await new Promise((r) => setImmediate(r));
  t.same(
    lines.map((l) => (JSON.parse(l) as { n: number }).n),
    [2],
  );
});
