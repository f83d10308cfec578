import { startStack } from './stack.ts';
import { measure } from './measure.ts';
import { SCENARIOS } from './scenarios.ts';
import { Redis } from 'ioredis';
const workers = Number(process.argv[2] ?? 4);
const c = Number(process.argv[3] ?? 64);
const st = await startStack({ reference: false, workers, ...(process.argv[4] && { ref: process.argv[4] }) });
try {
  const t = st.targets.find((x) => x.name === `tollgate/live-w${workers}`)!;
  const base = SCENARIOS.find((s) => s.id === 'nonstream')!;
  const s = { ...base, spec: (tt: typeof t, q: boolean) => ({ ...base.spec(tt, q), connections: c, warmupS: 1, durationS: 3 }) };
  await measure(s, t, 0, false, st.pids);
  const r = new Redis(t.redisUrl!);
  await r.config('RESETSTAT');
  const m = await measure(s, t, 0, false, st.pids, st.redisScriptCommands);
  const info = await r.info('commandstats');
  console.log(info.split('\n').filter((l) => /evalsha|eval:|xadd|hsetnx|hmget/.test(l)).join('\n'));
  console.log('requests', m.result.requests, 'rps', m.result.rps.toFixed(0), 'redis cmd us/req', m.redisCmdUsPerReq?.toFixed(1), 'proc', m.redisUsPerReq?.toFixed(1));
  r.disconnect();
} finally {
  await st.stop();
}
