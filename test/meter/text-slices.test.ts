import t from 'tap';
import { TextCollector } from '../../src/meter/text-slices.ts';

const add = (c: TextCollector, raw: string): void => {
  const b = Buffer.from(raw);
  c.append(b, 0, b.length);
};

t.test('decodes the concatenated raw bodies once, caches, resets', async (t) => {
  const c = new TextCollector();
  add(c, 'a\\u00e9 \\"q\\" ');
  add(c, '\\ud83d');
  add(c, '\\ude00'); // a surrogate pair split across two pieces joins up
  t.equal(c.text(), 'aé "q" 😀');
  t.equal(c.text(), 'aé "q" 😀', 'cached');
  t.equal(c.byteLength, Buffer.byteLength('a\\u00e9 \\"q\\" \\ud83d\\ude00'));
  c.reset();
  t.equal(c.text(), '');
  t.equal(c.byteLength, 0);
  add(c, 'again');
  t.equal(c.text(), 'again');
});

t.test('raw control characters (invalid JSON) fall back to the raw text', async (t) => {
  const c = new TextCollector();
  add(c, 'tab\there');
  t.equal(c.text(), 'tab\there');
});

t.test('grows past its first allocation, small and large pieces', async (t) => {
  const c = new TextCollector();
  for (let i = 0; i < 2000; i++) add(c, 'ab');
  add(c, 'x'.repeat(10_000));
  t.equal(c.text().length, 14_000);
});

t.test('caps retained bytes and counts the overflow', async (t) => {
  const c = new TextCollector({ maxBytes: 10 });
  add(c, '12345678');
  add(c, 'abc');
  add(c, '9');
  t.equal(c.text(), '123456789');
  t.equal(c.overflowBytes, 3);
});
