// Shared by fault-redis-outage and fault-usage-restarts (issue 25, SPEC §14): a redis-server that keeps its data across a
// stop and a start (AOF, fsynced before every reply), so a test can count what an outage left in the
// ledger and the usage aggregates once Redis is back.
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { freePort } from '../helpers/ports.ts';
import { waitFor } from '../helpers/wait.ts';

interface Teardown {
  teardown(fn: () => unknown): void;
}

/** A redis-server on a fixed port whose data survives stop() / start(). */
export interface DurableRedis {
  readonly url: string;
  /** SIGKILL (a crash) or SIGTERM; resolves once it exited. */
  stop(signal?: NodeJS.Signals): Promise<void>;
  /** Starts it again on the same port and AOF; resolves once it accepts connections. */
  start(): Promise<void>;
}

async function spawnAof(port: number, dir: string): Promise<ChildProcess> {
  for (let attempt = 1; ; attempt++) {
    const child = spawn(
      'redis-server',
      ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--save', '', '--appendonly', 'yes', '--appendfsync', 'always'],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let log = '';
    child.stderr!.on('data', (b: Buffer) => (log = (log + b).slice(-8192)));
    child.stdout!.on('data', (b: Buffer) => (log = (log + b).slice(-8192)));
    await waitFor(() => log.includes('Ready to accept connections') || child.exitCode !== null, 10_000, 'redis-server to be ready', 10);
    if (child.exitCode === null) return child;
    // The old socket may linger a moment after a kill.
    if (!log.includes('Address already in use') || attempt >= 5) throw new Error(`redis-server exited: ${log}`);
    await sleep(100);
  }
}

/** Starts a durable redis-server for the test; killed and its directory removed at teardown. */
export async function startDurableRedis(t: Teardown): Promise<DurableRedis> {
  const dir = await mkdtemp(join(tmpdir(), 'tollgate-fault-'));
  const port = await freePort();
  let child: ChildProcess | undefined = await spawnAof(port, dir);
  t.teardown(async () => {
    await stop('SIGKILL');
    await rm(dir, { recursive: true, force: true });
  });
  async function stop(signal: NodeJS.Signals = 'SIGKILL'): Promise<void> {
    const c = child;
    child = undefined;
    if (!c || c.exitCode !== null || c.signalCode !== null) return;
    const exited = once(c, 'exit');
    c.kill(signal);
    await exited;
  }
  return {
    url: `redis://127.0.0.1:${port}`,
    stop,
    async start() {
      if (!child) child = await spawnAof(port, dir);
    },
  };
}
