// bench/process-costs.ts, behind `bench/instructions.ts --syscalls` and `--alloc`: a process's CPU from
// /proc, strace's counts, and bytes allocated per function from a real sampling heap profile.
import t from 'tap';
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Session } from 'node:inspector/promises';
import { bytesByFunction, cpuTicks, straceCounts, type SamplingNode } from '../../bench/process-costs.ts';

t.test('cpuTicks reads this process: user time grows with work done here', async (t) => {
  const a = cpuTicks(process.pid);
  // Spin until this process has used 300 ms of CPU by its own count (wall time would depend on the load).
  const start = process.cpuUsage();
  let x = 0;
  while (process.cpuUsage(start).user < 300_000) for (let i = 0; i < 10_000; i++) x += Math.sqrt(x + 1);
  const b = cpuTicks(process.pid);
  t.ok(x > 0);
  // 300 ms of user time is ~30 ticks at 100 Hz; at least a third of it must show.
  t.ok(b.user - a.user >= 10, `user ticks grew by ${b.user - a.user}`);
});

const hasStrace = spawnSync('strace', ['-V']).status === 0;
t.test('straceCounts reads the calls of a real strace -c table', { skip: !hasStrace && 'strace is not installed' }, async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'strace-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  // n writes of one byte each to /dev/null, one syscall apiece; node's own writes cancel out between n = 0 and 400.
  const table = (n: number) => {
    const out = join(dir, `table-${n}.txt`);
    const script = `const fs=require('fs');const fd=fs.openSync('/dev/null','w');for(let i=0;i<${n};i++)fs.writeSync(fd,'x');`;
    execFileSync('strace', ['-c', '-f', '-q', '-o', out, process.execPath, '-e', script]);
    return straceCounts(readFileSync(out, 'utf8'));
  };
  const writes = (rows: { name: string; calls: number }[]) => rows.find((r) => r.name === 'write')?.calls ?? 0;
  const base = table(0);
  const rows = table(400);
  const added = writes(rows) - writes(base);
  t.ok(added >= 400 && added <= 410, `400 writes more counted as ${added}`);
  t.notOk(
    rows.some((r) => r.name === 'total'),
    'the total row is not a syscall',
  );
  t.same(
    rows.map((r) => r.calls),
    [...rows.map((r) => r.calls)].sort((a, b) => b - a),
    'most calls first',
  );
});

t.test('bytesByFunction names the function that allocated, freed objects included', async (t) => {
  const session = new Session();
  session.connect();
  t.teardown(() => session.disconnect());
  await session.post('HeapProfiler.enable');
  await session.post('HeapProfiler.startSampling', {
    samplingInterval: 256,
    includeObjectsCollectedByMajorGC: true,
    includeObjectsCollectedByMinorGC: true,
  });
  // ~8 MB in 64-byte-payload arrays, none kept: only a profile that counts freed objects sees them.
  function allocatesALot(): number {
    let n = 0;
    for (let i = 0; i < 100_000; i++) n += new Array(8).fill(i).length;
    return n;
  }
  t.equal(allocatesALot(), 800_000);
  const { profile } = (await session.post('HeapProfiler.stopSampling')) as unknown as { profile: { head: SamplingNode } };
  const rows = bytesByFunction(profile.head);
  const ours = rows.find((r) => r.fn.startsWith('allocatesALot '));
  t.ok(ours, 'the allocating function is named');
  t.match(ours!.fn, /test\/bench\/process-costs\.test\.ts:\d+$/, 'with its file and line, shortened');
  t.ok(ours!.bytes > 2_000_000, `${ours!.bytes} bytes sampled for it`);
  t.equal(rows[0]!.fn, ours!.fn, 'and it allocated the most');
});
