// `workers: auto` follows the cgroup CPU quota (issue 27: a 2-CPU pod on a 64-core node forked 64 workers).
import t from 'tap';
import { autoWorkers, cgroupCpuQuota } from '../../src/config/cpus.ts';
import { compileConfig } from '../../src/config/schema.ts';

const files = (m: Record<string, string>) => (path: string) => m[path];

t.test('cgroup v2 cpu.max: a quota in CPUs, "max" for none', async (t) => {
  t.equal(cgroupCpuQuota(files({ '/sys/fs/cgroup/cpu.max': '200000 100000\n' })), 2);
  t.equal(cgroupCpuQuota(files({ '/sys/fs/cgroup/cpu.max': '150000 100000\n' })), 1.5);
  t.equal(cgroupCpuQuota(files({ '/sys/fs/cgroup/cpu.max': 'max 100000\n' })), undefined);
});

t.test('cgroup v1 cfs quota and period, -1 for none; either mount point', async (t) => {
  t.equal(
    cgroupCpuQuota(files({ '/sys/fs/cgroup/cpu/cpu.cfs_quota_us': '400000\n', '/sys/fs/cgroup/cpu/cpu.cfs_period_us': '100000\n' })),
    4,
  );
  t.equal(
    cgroupCpuQuota(
      files({ '/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us': '50000', '/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us': '100000' }),
    ),
    0.5,
  );
  t.equal(
    cgroupCpuQuota(files({ '/sys/fs/cgroup/cpu/cpu.cfs_quota_us': '-1', '/sys/fs/cgroup/cpu/cpu.cfs_period_us': '100000' })),
    undefined,
  );
  t.equal(cgroupCpuQuota(files({})), undefined, 'no cgroup files (macOS, a sandbox): no quota');
});

t.test('auto workers: whole CPUs of the quota, at least 1, at most the cores', async (t) => {
  const v2 = (q: string) => files({ '/sys/fs/cgroup/cpu.max': q });
  t.equal(autoWorkers(v2('200000 100000'), 64), 2, 'a 2-CPU limit on a 64-core node: 2 workers, not 64');
  t.equal(autoWorkers(v2('150000 100000'), 64), 1, '1.5 CPUs: 1 worker');
  t.equal(autoWorkers(v2('50000 100000'), 64), 1, 'half a CPU: still 1');
  t.equal(autoWorkers(v2('1600000 100000'), 4), 4, 'a quota above the cores: the cores');
  t.equal(autoWorkers(v2('max 100000'), 8), 8, 'no quota: the cores');
  t.equal(autoWorkers(files({}), 3), 3);
});

t.test('the config compiles workers: auto to the same count on this machine', async (t) => {
  const doc = { server: { workers: 'auto' }, models: [{ name: 'm', price: { input: 1, output: 1 }, upstreams: [{ url: 'http://x/v1' }] }] };
  t.equal(compileConfig(doc, { REDIS_URL: 'redis://127.0.0.1:6379' }).server.workers, autoWorkers());
});
