// Ledger pages over packed entries (docs/ledger.md "Packed passes", redis-records.ts ledgerAfter /
// ledgerBefore) on a real Redis stream: a page of `limit` debits reads about `limit` debits from Redis,
// whether the entries are plain or packed, and never more than PACKED_DEBITS_MAX times that however they
// are mixed (a read sized in rows alone fetched up to 128 debits per row it needed).
import t from 'tap';
import { PACKED_DEBITS_MAX } from '../../src/store/debit-layout.ts';
import { ledgerAfter, ledgerBefore } from '../../src/store/redis-records.ts';
import { startRedis } from '../helpers/redis.ts';

const redis = await startRedis(t);
if (redis) {
  const r = redis.client;
  const d = (i: number) => JSON.stringify([-1, '2026-12-03T00:00:00.000Z', `req_${i}`, 'key_1', 'm', 1, 1, 'upstream']);
  let seq = 0;
  /** `n` plain compact debits, or `n` packed entries of PACKED_DEBITS_MAX debits. */
  const plain = async (stream: string, n: number) => {
    for (let i = 0; i < n; i++) await r.xadd(stream, '*', 'd', d(seq++), 'h', '0');
  };
  const packed = async (stream: string, n: number) => {
    for (let i = 0; i < n; i++) {
      const ds = Array.from({ length: PACKED_DEBITS_MAX }, () => d(seq++));
      await r.xadd(stream, '*', 'p', `[${ds.join(',')}]`, 'h', `[${ds.map(() => 0).join(',')}]`);
    }
  };
  /** Every page of `limit` through the stream, with the debits Redis sent for them. */
  const pages = async (stream: string, limit: number, reverse = false) => {
    let fetched = 0;
    let calls = 0;
    const count = async (rows: [string, string[]][]) => {
      calls++;
      for (const [, f] of rows) fetched += f[0] === 'p' ? (JSON.parse(f[1]!) as unknown[]).length : 1;
      return rows;
    };
    const xrange = async (start: string, n: number) => count((await r.xrange(stream, start, '+', 'COUNT', n)) as [string, string[]][]);
    const xrevrange = async (end: string, n: number) => count((await r.xrevrange(stream, end, '-', 'COUNT', n)) as [string, string[]][]);
    const ids: string[] = [];
    let maxFetched = 0;
    for (let cursor: string | undefined; ;) {
      const before = fetched;
      const page = reverse ? await ledgerBefore(xrevrange, cursor, limit) : await ledgerAfter(xrange, cursor, limit);
      maxFetched = Math.max(maxFetched, fetched - before);
      ids.push(...page.map((e) => e.id));
      if (page.length < limit) break;
      cursor = page.at(-1)!.id;
    }
    return { ids, fetched, calls, maxFetched };
  };

  t.test('packed entries: a page reads about its own debits', async (t) => {
    await packed('s-packed', 40); // 640 debits
    for (const reverse of [false, true]) {
      const p = await pages('s-packed', 100, reverse);
      t.equal(p.ids.length, 640);
      t.equal(new Set(p.ids).size, 640, 'each debit once');
      t.ok(
        p.maxFetched <= 100 + 2 * PACKED_DEBITS_MAX,
        `${reverse ? 'newest' : 'oldest'} first: at most ${p.maxFetched} debits fetched for a page of 100`,
      );
    }
  });

  t.test('plain entries: two calls a page at most', async (t) => {
    await plain('s-plain', 250);
    const p = await pages('s-plain', 100);
    t.equal(p.ids.length, 250);
    t.ok(p.calls <= 2 * 3 + 1, `${p.calls} calls for 3 pages`);
    t.ok(p.maxFetched <= 101, `at most ${p.maxFetched} debits fetched for a page of 100`);
  });

  t.test('plain and packed entries mixed: every debit once, in order, both ways, a page bounded', async (t) => {
    await plain('s-mixed', 90);
    await packed('s-mixed', 30);
    await plain('s-mixed', 5);
    await packed('s-mixed', 3);
    // What the pages must give: every row expanded, in stream order.
    const rows = (await r.xrange('s-mixed', '-', '+')) as [string, string[]][];
    const all = rows.flatMap(([id, f]) => (f[0] === 'p' ? (JSON.parse(f[1]!) as unknown[]).map((_, k) => `${id}.${k + 1}`) : [id]));
    t.equal(all.length, 95 + 33 * PACKED_DEBITS_MAX);
    for (const limit of [1, 7, 16, 100]) {
      const forward = await pages('s-mixed', limit);
      t.strictSame(forward.ids, all, `oldest first, pages of ${limit}`);
      const back = await pages('s-mixed', limit, true);
      t.strictSame(back.ids, [...all].reverse(), `newest first, pages of ${limit}`);
      t.ok(
        forward.maxFetched <= PACKED_DEBITS_MAX * limit + PACKED_DEBITS_MAX,
        `pages of ${limit}: at most ${forward.maxFetched} debits fetched for one`,
      );
    }
  });
}
