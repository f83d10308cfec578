// The image, built and run (issue 27): scripts/container-smoke.sh builds the project's Dockerfile with
// podman, runs it on a real Redis and the simulator, and prints one TAP line per check (HEALTHCHECK,
// non-root, the CLI inside the image, a chat debited exactly, SIGTERM → exit 0). Spawned as a subtest,
// so tap counts every check in the suite's `N passed, N failed`. Without podman the script skips, except
// under CI=true, where it fails: .ci/run sets podman up (../shared/tools/container-setup.sh).
import t from 'tap';

const root = new URL('../../', import.meta.url).pathname;
// A build (~20-40 s; the npm ci layer is cached while package-lock.json is unchanged) plus the run.
t.setTimeout(600_000);
t.spawn('bash', [`${root}scripts/container-smoke.sh`], { cwd: root, timeout: 600_000 }, 'container smoke test');
