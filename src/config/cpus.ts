/**
 * `server.workers: auto` (issue 27): one worker per CPU this process may actually use. Node's
 * availableParallelism() counts the cores the scheduler allows (the node's, in a Kubernetes pod without
 * a cpuset), not the CFS quota a CPU limit sets, so a pod limited to 2 CPUs on a 64-core node forked 64
 * workers of ~150 MB each and was OOM-killed. The quota comes from cgroup v2 `cpu.max` ("200000 100000",
 * or "max 100000" for none), else cgroup v1 `cpu.cfs_quota_us` / `cpu.cfs_period_us` (-1 for none).
 * Read once at boot (sync reads of a few bytes of sysfs, never on a request).
 */
import { readFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';

/** Reads a cgroup file's text, undefined when it does not exist or cannot be read. */
export type ReadFile = (path: string) => string | undefined;

const readSys: ReadFile = (path) => {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return undefined;
  }
};

/** cgroup v2 first (one unified hierarchy), then the v1 `cpu` controller's usual mount points. */
const V2 = '/sys/fs/cgroup/cpu.max';
const V1_DIRS = ['/sys/fs/cgroup/cpu', '/sys/fs/cgroup/cpu,cpuacct'];

/** The CPU quota in CPUs (1.5 for a 1500m limit), or undefined when no quota applies. */
export function cgroupCpuQuota(read: ReadFile = readSys): number | undefined {
  const v2 = read(V2)?.trim().split(/\s+/);
  if (v2) {
    if (v2[0] === 'max') return undefined;
    const quota = Number(v2[0]);
    const period = Number(v2[1] ?? 100_000);
    return quota > 0 && period > 0 ? quota / period : undefined;
  }
  for (const dir of V1_DIRS) {
    const quotaText = read(`${dir}/cpu.cfs_quota_us`);
    if (quotaText === undefined) continue;
    const quota = Number(quotaText.trim());
    const period = Number(read(`${dir}/cpu.cfs_period_us`)?.trim());
    return quota > 0 && period > 0 ? quota / period : undefined;
  }
  return undefined;
}

/**
 * Workers for `auto`: the whole CPUs of the quota (at least 1; 1.5 CPUs → 1, since a second worker
 * would be throttled half the time), never more than the cores the scheduler allows.
 */
export function autoWorkers(read: ReadFile = readSys, cores: number = availableParallelism()): number {
  const quota = cgroupCpuQuota(read);
  return quota === undefined ? cores : Math.max(1, Math.min(cores, Math.floor(quota)));
}
