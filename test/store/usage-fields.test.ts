// A day's usage hash read back into cells (src/store/usage-fields.ts): from ioredis' object (the embedded
// store) and from HGETALL's flat reply (Redis), a slice of counters per turn of the event loop.
import t from 'tap';
import { parseUsageHash, parseUsagePairs, USAGE_FIELDS_PER_TURN } from '../../src/store/usage-fields.ts';

const hash: Record<string, string> = {
  'key_b|m|r': '2',
  'key_a|m|r': '1',
  'key_a|m|$': '30',
  'key_a|vendor|model|2|p': '7', // a model name may hold '|'
  'key_a|vendor|model|2|k': '3',
  'key_a|m|constructor': '9', // not a counter: ignored, never written onto a cell
  'key_a|m|': '9',
  nobars: '1',
};

t.test('the flat reply reads as the object does', async (t) => {
  const fromPairs = await parseUsagePairs('2026-12-03', Object.entries(hash).flat());
  t.same(fromPairs, parseUsageHash('2026-12-03', hash));
  t.same(
    fromPairs.map((c) => [c.key_id, c.model, c.requests, c.prompt_tokens, c.cost_micros, c.cached_tokens]),
    [
      ['key_a', 'm', 1, 0, 30, 0],
      ['key_a', 'vendor|model|2', 0, 7, 0, 3],
      ['key_b', 'm', 2, 0, 0, 0],
    ],
  );
  for (const c of fromPairs) t.equal(Object.keys(c).length, 8, `${c.key_id} ${c.model}: a field that names no counter writes nothing`);
});

t.test('a large day is parsed a slice at a time, the event loop turning between slices', async (t) => {
  const cells = 2 * USAGE_FIELDS_PER_TURN; // five counters each: five slices
  const pairs: string[] = [];
  for (let i = 0; i < cells; i++) for (const c of ['r', 'p', 'c', '$', 'k']) pairs.push(`key_${i}|m|${c}`, String(i));
  let ran = false;
  setImmediate(() => (ran = true));
  const parsed = parseUsagePairs('d', pairs);
  const out = await parsed;
  t.ok(ran, 'an immediate queued before the parse ran during it');
  t.equal(out.length, cells);
  t.equal(
    out.reduce((s, c) => s + c.cost_micros, 0),
    (cells * (cells - 1)) / 2,
    'every counter read',
  );
});
