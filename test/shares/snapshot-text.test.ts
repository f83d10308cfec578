import t from 'tap';
import { memberText } from '../../src/shares/snapshot-text.ts';

t.test('cuts out the member exactly as written', async (t) => {
  const snap = '{ "title" : "a \\"quoted\\" } ] title",\n  "n": 1.0, "big": 18446744073709551617, "2": "x", "1": [ {}, [] ] }';
  const body = `{"files": [{"name": "a}b"}], "snapshot" :\t${snap} , "tail": "{"}`;
  t.equal(memberText(body, 'snapshot'), snap);
  t.equal(memberText(body, 'files'), '[{"name": "a}b"}]');
  t.equal(memberText(body, 'tail'), '"{"');
  t.equal(memberText(body, 'missing'), undefined);
  // What a parse/stringify round trip would have changed:
  t.not(JSON.stringify(JSON.parse(snap)), snap);
});

t.test('primitives, escaped keys, duplicates, whitespace and empty objects', async (t) => {
  t.equal(memberText('{"snapshot":null}', 'snapshot'), 'null');
  t.equal(memberText('{"snapshot": -1.5e3 }', 'snapshot'), '-1.5e3');
  t.equal(memberText('{"snapshot":true,"x":false}', 'x'), 'false');
  t.equal(memberText('{"snap\\u0073hot": {"a":1}}', 'snapshot'), '{"a":1}');
  t.equal(memberText('{"snapshot": {"a":1}, "snapshot": {"b":2}}', 'snapshot'), '{"b":2}', 'the last one, as JSON.parse keeps');
  t.equal(memberText(' \r\n{ } ', 'snapshot'), undefined);
  t.equal(memberText('[{"snapshot":1}]', 'snapshot'), undefined, 'not an object');
  t.equal(memberText('"snapshot"', 'snapshot'), undefined);
  t.equal(memberText('{"a":"\\\\","snapshot":"\\\\\\""}', 'snapshot'), '"\\\\\\""', 'escaped backslashes before quotes');
  t.equal(memberText('{"snapshot":"\u2028\u2029é😀"}', 'snapshot'), '"\u2028\u2029é😀"');
});

t.test('agrees with JSON.parse on random documents', async (t) => {
  let seed = 42;
  const rnd = (n: number) => {
    seed = (seed * 1103515245 + 12345) & 0x7fffffff;
    return seed % n;
  };
  const ws = () => [' ', '', '\n', '\t ', '\r\n  '][rnd(5)]!;
  const strs = ['"x"', '"{[\\"]}"', '"\\\\"', '"\\u0041\\n"', '"é😀"', '""'];
  const value = (depth: number): string => {
    const k = depth > 3 ? rnd(3) : rnd(5);
    if (k === 0) return strs[rnd(strs.length)]!;
    if (k === 1) return ['0', '-1.25e-3', 'true', 'false', 'null', '12345678901234567890'][rnd(6)]!;
    if (k === 2) return ws() + strs[rnd(strs.length)]! + ws();
    if (k === 3) return `[${ws()}${Array.from({ length: rnd(4) }, () => value(depth + 1)).join(`${ws()},${ws()}`)}${ws()}]`;
    return `{${ws()}${Array.from({ length: rnd(4) }, () => `${strs[rnd(strs.length)]}${ws()}:${ws()}${value(depth + 1)}`).join(`${ws()},${ws()}`)}${ws()}}`;
  };
  for (let i = 0; i < 500; i++) {
    const members = Array.from(
      { length: 1 + rnd(4) },
      () => [['"snapshot"', '"files"', '"snap\\u0073hot"', '"x"'][rnd(4)]!, value(0)] as const,
    );
    const doc = `${ws()}{${ws()}${members.map(([k, v]) => `${k}${ws()}:${ws()}${v}`).join(`${ws()},${ws()}`)}${ws()}}${ws()}`;
    const parsed = JSON.parse(doc) as Record<string, unknown>;
    const text = memberText(doc, 'snapshot');
    if ('snapshot' in parsed) {
      if (text === undefined) t.fail(`missing in ${doc}`);
      else t.same(JSON.parse(text), parsed.snapshot, doc);
      t.equal(text, text?.trim(), 'no surrounding whitespace');
    } else t.equal(text, undefined, doc);
  }
});
