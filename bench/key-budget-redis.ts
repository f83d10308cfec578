/**
 * Redis CPU of hold.lua + settle.lua per request (INFO commandstats, `usec_per_call` of EVALSHA), with
 * and without a key budget (docs/keys.md), and optionally against another version of the two scripts
 * (`--base-dir` holding hold.lua and settle.lua, e.g. from `git show <ref>:src/store/lua/hold.lua`).
 * Redis-side time is what a budget adds; it is far steadier than the gateway's CPU on a busy machine.
 *   node bench/key-budget-redis.ts [--n 20000] [--rounds 5] [--base-dir /tmp/base]
 * Needs redis-server on PATH.
 */
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { Redis } from 'ioredis';
import { freePort } from '../test/helpers/ports.ts';
import * as K from '../src/store/redis-keys.ts';
import { debitEntryData } from '../src/store/debit-layout.ts';

const { values } = parseArgs({
  options: { n: { type: 'string', default: '20000' }, rounds: { type: 'string', default: '5' }, 'base-dir': { type: 'string' } },
});
const n = Number(values.n);
const rounds = Number(values.rounds);
const lua = (dir: URL | string, f: string) => readFileSync(typeof dir === 'string' ? `${dir}/${f}` : new URL(f, dir), 'utf8');
const here = new URL('../src/store/lua/', import.meta.url);

const port = await freePort();
const server = spawn('redis-server', ['--port', String(port), '--save', '', '--appendonly', 'no'], { stdio: 'ignore' });
try {
  // Wait for the server, then connect once.
  for (let i = 0; ; i++) {
    const probe = new Redis({ port, lazyConnect: true, retryStrategy: () => null, maxRetriesPerRequest: 0 });
    probe.on('error', () => {});
    const ok = await probe.connect().then(
      () => true,
      () => false,
    );
    probe.disconnect();
    if (ok) break;
    if (i > 50) throw new Error('redis-server did not start');
    await sleep(100);
  }
  const redis = new Redis({ port });
  const shas = async (dir: URL | string) => ({
    hold: (await redis.script('LOAD', lua(dir, 'hold.lua'))) as string,
    settle: (await redis.script('LOAD', lua(dir, 'settle.lua'))) as string,
  });
  const variants: { name: string; s: { hold: string; settle: string }; budget: boolean; base?: boolean }[] = [
    ...(values['base-dir'] ? [{ name: 'base scripts, no budget', s: await shas(values['base-dir']), budget: false, base: true }] : []),
    { name: 'no budget', s: await shas(here), budget: false },
    { name: 'budget', s: await shas(here), budget: true },
  ];
  const entry = (requestId: string) =>
    debitEntryData({
      costMicros: 200,
      ts: '2026-11-25T00:00:00.000Z',
      requestId,
      keyId: 'key_bench',
      model: 'm',
      promptTokens: 10,
      completionTokens: 20,
      usageSource: 'upstream',
    });
  const acct = 'bench';
  await redis.hset(K.balance(acct), 'balance', '1000000000000000');
  const due = Date.now() + 600_000;
  const bucket = K.holdBucket(acct, due);
  const kb = K.keyBudget(acct, 'key_bench', 'm2026-11');
  let req = 0;
  const results = new Map<string, number[]>();
  for (let r = 0; r < rounds; r++) {
    for (const v of variants) {
      await redis.config('RESETSTAT');
      for (let i = 0; i < n; i += 100) {
        const batch: Promise<unknown>[] = [];
        for (let j = 0; j < 100; j++) {
          const id = `r${req++}`;
          const hk = v.budget ? [K.balance(acct), bucket, kb] : [K.balance(acct), bucket];
          const ha = v.budget ? [id, 500, due, 1e15, ''] : [id, 500, due];
          batch.push(redis.evalsha(v.s.hold, hk.length, ...hk, ...ha));
          const sk = v.budget ? [K.balance(acct), bucket, K.ledger(acct), kb] : [K.balance(acct), bucket, K.ledger(acct)];
          // settle.lua's arguments: the field-by-field entry of --base-dir's (older) scripts, or the entry's data.
          const sa = v.base
            ? [id, '-200', '2026-11-25T00:00:00.000Z', 'key_bench', 'm', 10, 20, 'upstream', ...(v.budget ? ['0', due, ''] : [])]
            : [id, '-200', entry(id), ...(v.budget ? ['0', due, ''] : [])];
          batch.push(redis.evalsha(v.s.settle, sk.length, ...sk, ...sa));
        }
        await Promise.all(batch);
      }
      const info = await redis.info('commandstats');
      const m = /cmdstat_evalsha:calls=(\d+),usec=(\d+)/.exec(info)!;
      const perRequest = (Number(m[2]) / Number(m[1])) * 2; // one hold + one settle
      results.set(v.name, [...(results.get(v.name) ?? []), perRequest]);
      await redis.del(bucket, K.ledger(acct));
    }
  }
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1]!;
  for (const [name, xs] of results)
    process.stdout.write(`${name}: Redis µs per hold+settle median ${median(xs).toFixed(2)} [${xs.map((x) => x.toFixed(2)).join(' ')}]\n`);
  redis.disconnect();
} finally {
  server.kill();
}
