// An exported object is made and read without holding the event loop (SPEC §13: an operator's export must
// not stall every tenant's requests): a full batch of 10,000 entries took ~45 ms in one turn (JSON, then
// gzipSync). Now the lines are made 1,000 a turn and gzip runs on libuv's pool; the body is unchanged
// (NDJSON, one entry a line, `account` added).
import { gunzipSync } from 'node:zlib';
import t from 'tap';
import { decodeObject, encodeObject } from '../../src/ledger/entries.ts';
import type { LedgerEntry } from '../../src/store/types.ts';

const entries: LedgerEntry[] = Array.from(
  { length: 10_000 },
  (_, i) =>
    ({
      id: `1764670000000-${i}`,
      kind: 'debit',
      amount_micros: -1234 - i,
      ts: '2026-12-02T11:00:00.000Z',
      request_id: `req_${i.toString(36)}`,
      key_id: `key_${i % 50}`,
      model: `model,"${i % 5}"\n`,
      prompt_tokens: 100,
      completion_tokens: 20,
      usage_source: 'upstream',
      hold_micros: 5000,
    }) as LedgerEntry,
);

/** How many event-loop turns other work got while `p` ran. */
async function turnsDuring<T>(p: () => Promise<T> | T): Promise<{ value: T; turns: number }> {
  let turns = 0;
  let on = true;
  const tick = () => {
    if (!on) return;
    turns++;
    setImmediate(tick);
  };
  setImmediate(tick);
  const value = await p();
  on = false;
  return { value, turns };
}

t.test('a 10,000-entry object is encoded and decoded over many turns, its body NDJSON as before', async (t) => {
  const enc = await turnsDuring(() => encodeObject('acme', entries));
  t.ok(enc.turns >= 5, `other work ran during the encode (${enc.turns} turns)`);
  const lines = gunzipSync(enc.value).toString('utf8').split('\n');
  t.equal(lines.pop(), '', 'every line ends with a newline');
  t.equal(lines.length, entries.length, 'one line per entry');
  t.same(JSON.parse(lines[7]!), { ...entries[7], account: 'acme' }, 'a line is the entry plus account');
  const dec = await turnsDuring(() => decodeObject(enc.value));
  t.ok(dec.turns >= 5, `other work ran during the decode (${dec.turns} turns)`);
  t.same(
    dec.value,
    entries.map((e) => ({ ...e, account: 'acme' })),
    'decode gives back every entry, in order',
  );
});
