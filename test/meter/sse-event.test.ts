import t from 'tap';
import { dataRange, eventData, isDone } from '../../src/meter/sse-event.ts';

function data(s: string): string | null {
  const d = dataRange();
  const buf = Buffer.from(s);
  return eventData(buf, 0, buf.length, d) ? d.buf.toString('utf8', d.start, d.end) : null;
}

t.test('eventData follows the SSE field rules', async (t) => {
  t.equal(data('data: {"a":1}\n\n'), '{"a":1}', 'one optional space stripped');
  t.equal(data('data:{"a":1}\r\n\r\n'), '{"a":1}', 'no space, CRLF');
  t.equal(data('data:  x\n\n'), ' x', 'only one space stripped');
  t.equal(data('data: a\ndata: b\n\n'), 'a\nb', 'lines joined by LF');
  t.equal(data('data\n\n'), '', 'field without colon has an empty value');
  t.equal(data(': comment\nevent: x\nid: 1\n\n'), null, 'no data field');
  t.equal(data('database: x\n\n'), null, 'a field that only starts with "data" is not data');
  t.equal(data('data: tail-without-eol'), 'tail-without-eol', 'unterminated tail (end of stream)');
  t.equal(data('data: tail\r'), 'tail');
  t.equal(data('\n'), null);
});

t.test('eventData stays inside [start, end) and reads in place', async (t) => {
  const buf = Buffer.from('data: one\n\ndata: two\n\n');
  const d = dataRange();
  t.equal(eventData(buf, 11, buf.length, d), true);
  t.equal(d.buf, buf, 'no copy for a single data line');
  t.equal(d.buf.toString('utf8', d.start, d.end), 'two');
  t.equal(eventData(buf, 0, 11, d), true);
  t.equal(d.buf.toString('utf8', d.start, d.end), 'one', 'does not run into the next event');
});

t.test('isDone', async (t) => {
  const done = (s: string): boolean => {
    const buf = Buffer.from(`x${s}y`);
    return isDone({ buf, start: 1, end: buf.length - 1 });
  };
  t.equal(done('[DONE]'), true);
  t.equal(done('[DONE] '), false);
  t.equal(done('"[DONE]"'), false);
  t.equal(done('[DONX]'), false);
});
