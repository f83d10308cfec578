/**
 * Where a batched settle's Redis time goes (issue 29): `settle-many.lua` on batches of 64 settles of one
 * account against variants of itself made here — without the `XADD` (a constant entry id instead) and
 * without the reply (a count instead) — so the differences are the ledger append (its arguments
 * through Lua's bridge included) and the per-request reply. `hold-many.lua` is measured beside them.
 * Each call's time is redis-server's own (`INFO commandstats`), per request, medians of alternating rounds.
 *   node bench/credit-script-parts.ts [--batch 64] [--calls 100] [--rounds 8]
 */
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { Redis } from 'ioredis';
import { freePort, start } from './procs.ts';
import { commandStats } from './redis-stats.ts';
import { debitEntryData } from '../src/store/debit-layout.ts';

const { values } = parseArgs({
  options: {
    batch: { type: 'string', default: '64' },
    calls: { type: 'string', default: '100' },
    rounds: { type: 'string', default: '8' },
  },
});
const N = Number(values.batch);
const CALLS = Number(values.calls);
const ROUNDS = Number(values.rounds);
const lua = (name: string) => readFileSync(new URL(`../src/store/lua/${name}.lua`, import.meta.url), 'utf8');
const settleMany = lua('settle-many');
const noXadd = settleMany.replace(/redis\.call\('XADD'[^\n]*/g, "'1-1'");
if (noXadd === settleMany || noXadd.includes("'XADD'")) throw new Error('settle-many.lua changed: the no-XADD variant could not be made');
const noReply = settleMany.replace(/\nreturn out\n?$/, '\nreturn #out\n');
if (noReply === settleMany) throw new Error('settle-many.lua changed: the no-reply variant could not be made');
const variants = { 'settle-many.lua': settleMany, 'without XADD': noXadd, 'without the reply': noReply, 'hold-many.lua': lua('hold-many') };

const entry = (requestId: string) =>
  debitEntryData({
    costMicros: 123,
    ts: '2026-11-27T10:00:00.000Z',
    requestId,
    keyId: 'key_1111111111111111',
    model: 'bench-model',
    promptTokens: 12,
    completionTokens: 34,
    usageSource: 'upstream',
  });

const port = await freePort();
const server = await start('redis', 'redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], {
  ready: (l) => l.some((x) => x.includes('Ready to accept connections')),
});
const r = new Redis(port);
try {
  const shas: Record<string, string> = {};
  for (const [name, src] of Object.entries(variants)) shas[name] = (await r.script('LOAD', src)) as string;
  let seq = 0;
  const acct = '{acct:bench}';
  const results: Record<string, number[]> = Object.fromEntries(Object.keys(variants).map((n) => [n, []]));
  for (let round = 0; round < ROUNDS; round++) {
    const names = Object.keys(variants);
    for (const name of round % 2 ? names.reverse() : names) {
      const hold = name === 'hold-many.lua';
      let usec = 0;
      for (let c = 0; c < CALLS; c++) {
        const keys: string[] = [];
        const args: (string | number)[] = [];
        const ids: string[] = [];
        for (let i = 0; i < N; i++) {
          const id = `req-${seq++}`;
          ids.push(id);
          if (hold) {
            keys.push(`${acct}:bal`, `${acct}:hb:1000`);
            args.push(2, id, 500, 1000);
          } else {
            keys.push(`${acct}:bal`, `${acct}:hb:1000`, `${acct}:ledger`);
            args.push(3, id, '-123', entry(id), 1000);
          }
        }
        if (hold) await r.hset(`${acct}:bal`, 'balance', 1e15);
        else await r.hset(`${acct}:hb:1000`, ...ids.flatMap((id) => [id, 'o500']));
        await r.config('RESETSTAT');
        await r.evalsha(shas[name]!, keys.length, ...keys, ...args);
        usec += commandStats(await r.info('commandstats')).get('evalsha')?.usec ?? NaN;
      }
      results[name]!.push(usec / (CALLS * N));
      await r.del(`${acct}:ledger`, `${acct}:hb:1000`, `${acct}:bal`);
    }
  }
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1]!;
  const m = Object.fromEntries(Object.entries(results).map(([n, xs]) => [n, median(xs)]));
  process.stdout.write(`Redis µs per request, batches of ${N} on one account, median of ${ROUNDS} rounds of ${CALLS} calls:\n`);
  for (const [n, v] of Object.entries(m)) process.stdout.write(`  ${n.padEnd(20)} ${v.toFixed(2)}\n`);
  process.stdout.write(
    `  → the ledger append (XADD and its arguments): ${(m['settle-many.lua']! - m['without XADD']!).toFixed(2)} µs; ` +
      `the reply: ${(m['settle-many.lua']! - m['without the reply']!).toFixed(2)} µs\n`,
  );
} finally {
  r.disconnect();
  await server.stop();
}
