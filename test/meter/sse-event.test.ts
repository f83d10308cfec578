import t from 'tap';
import { eventData, isDone } from '../../src/meter/sse-event.ts';

const data = (s: string): string | null => eventData(Buffer.from(s))?.toString() ?? null;

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

t.test('isDone', async (t) => {
  t.equal(isDone(Buffer.from('[DONE]')), true);
  t.equal(isDone(Buffer.from('[DONE] ')), false);
  t.equal(isDone(Buffer.from('"[DONE]"')), false);
});
