/**
 * A real Redis Cluster for tests: 3 masters + 3 replicas of the Debian redis-server on free loopback
 * ports (NOTES §14), each node in its own temp dir, joined by `redis-cli --cluster create`, ready when
 * CLUSTER INFO says cluster_state:ok. Every node is killed at teardown and at process exit. Without
 * redis-server the caller gets null (a loud skip), except under CI=true, where that fails.
 */
import { spawn, execFile, type ChildProcess } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { freePort } from './ports.ts';
import { waitFor } from './wait.ts';

const run = promisify(execFile);

interface Teardown {
  teardown(fn: () => unknown): void;
  comment?(...m: unknown[]): void;
  fail?(m: string): void;
}

export interface ClusterNode {
  port: number;
  child: ChildProcess;
}

export interface RedisCluster {
  nodes: ClusterNode[];
  /** `host:port` of every node, for REDIS_CLUSTER_NODES / store.cluster_nodes. */
  addresses: string[];
  /** `redis-cli -p <port> <args…>` on any live node; stdout. */
  cli(port: number, ...args: string[]): Promise<string>;
  /** The port of the master that owns `key`'s slot. */
  masterOf(key: string): Promise<number>;
  /** Waits until every slot is served (cluster_state:ok, seen from `port`). */
  waitOk(port: number, timeoutMs?: number): Promise<void>;
  /**
   * SIGKILLs the master on `port` once its replica holds every write it acknowledged: writes paused
   * (`CLIENT PAUSE WRITE`: commands sent meanwhile wait unanswered and die with it), then its replica's
   * offset awaited. A failover test then measures the gateway, not Redis' asynchronous replication,
   * which loses what was acknowledged and not yet sent (docs/operations.md, "Durability").
   */
  killMasterReplicated(port: number): Promise<void>;
  /** Saves every node's data, then SIGKILLs all six nodes (a whole-cluster outage). */
  stopAll(): Promise<void>;
  /** Restarts every node on its port and dir (same cluster, data saved by stopAll); resolves at cluster_state:ok. */
  restartAll(): Promise<void>;
}

async function hasRedis(): Promise<boolean> {
  return run('redis-server', ['--version']).then(
    () => true,
    () => false,
  );
}

/**
 * Starts the cluster; null when redis-server is missing (outside CI). `o.ports`: the six ports to use (a
 * gateway already pointed at them, e.g.), else free ones. `o.password`: every node requires it
 * (`--requirepass`, and `--masterauth` for the replicas).
 */
export async function startRedisCluster(
  t: Teardown,
  o: { ports?: readonly number[]; password?: string } = {},
): Promise<RedisCluster | null> {
  if (!(await hasRedis())) {
    if (process.env.CI === 'true') throw new Error('redis-server is not installed (apt-get install -y redis-server)');
    t.comment?.('SKIP: redis-server not on PATH; the cluster tests need it');
    return null;
  }
  const dir = await mkdtemp(join(tmpdir(), 'tollgate-cluster-'));
  const nodes: ClusterNode[] = [];
  const killAll = () => {
    for (const n of nodes) if (n.child.exitCode === null) n.child.kill('SIGKILL');
  };
  process.once('exit', killAll);
  t.teardown(async () => {
    killAll();
    await Promise.all(
      nodes.map((n) =>
        n.child.exitCode === null && n.child.signalCode === null ? new Promise((r) => n.child.once('exit', r)) : undefined,
      ),
    );
    await rm(dir, { recursive: true, force: true });
  });
  const spawnNode = async (port: number): Promise<ChildProcess> => {
    const nodeDir = join(dir, String(port));
    await run('mkdir', ['-p', nodeDir]);
    const child = spawn(
      'redis-server',
      [
        '--port',
        String(port),
        '--bind',
        '127.0.0.1',
        '--cluster-enabled',
        'yes',
        '--cluster-config-file',
        'nodes.conf',
        '--cluster-node-timeout',
        '2000',
        '--save',
        '',
        '--appendonly',
        'no',
        // Redis 7 waits 5 s for more replicas before a diskless full sync: a master killed inside that
        // window has no synced replica, and its replica then refuses to fail over ("disconnected from
        // master for longer than allowed"). Sync at once.
        '--repl-diskless-sync-delay',
        '0',
        '--dir',
        nodeDir,
        ...(o.password === undefined ? [] : ['--requirepass', o.password, '--masterauth', o.password]),
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let out = '';
    child.stdout!.on('data', (b: Buffer) => (out += b.toString()));
    await waitFor(() => out.includes('Ready to accept connections') || child.exitCode !== null, 10_000, `cluster node ${port}`);
    if (child.exitCode !== null) throw new Error(`redis-server --port ${port} exited:\n${out}`);
    return child;
  };
  for (let i = 0; i < 6; i++) {
    const port = o.ports?.[i] ?? (await freePort());
    nodes.push({ port, child: await spawnNode(port) });
  }
  const addresses = nodes.map((n) => `127.0.0.1:${n.port}`);
  const auth = o.password === undefined ? [] : ['-a', o.password, '--no-auth-warning'];
  await run('redis-cli', [...auth, '--cluster', 'create', ...addresses, '--cluster-replicas', '1', '--cluster-yes']);
  const cli = async (port: number, ...args: string[]) => (await run('redis-cli', [...auth, '-p', String(port), ...args])).stdout;
  const waitOk = async (port: number, timeoutMs = 30_000) => {
    let info = '';
    await waitFor(
      async () => (info = await cli(port, 'cluster', 'info').catch(() => '')).includes('cluster_state:ok'),
      timeoutMs,
      `cluster_state:ok on ${port}`,
      100,
    );
  };
  for (const n of nodes) await waitOk(n.port);
  // Every replica synced with its master, or a failover test could kill a master whose replica has no data.
  for (const n of nodes) {
    await waitFor(
      async () => {
        const info = await cli(n.port, 'info', 'replication');
        return info.includes('role:master') || info.includes('master_link_status:up');
      },
      30_000,
      `replica ${n.port} in sync`,
      100,
    );
  }
  const masterOf = async (key: string) => {
    const slot = Number((await cli(nodes.find((n) => n.child.exitCode === null)!.port, 'cluster', 'keyslot', key)).trim());
    const live = nodes.find((n) => n.child.exitCode === null)!;
    for (const line of (await cli(live.port, 'cluster', 'nodes')).split('\n')) {
      const f = line.split(' ');
      if (!f[2]?.includes('master') || f[2].includes('fail')) continue;
      for (const range of f.slice(8)) {
        const [a, b] = range.split('-').map(Number);
        if (slot >= a! && slot <= (b ?? a)!) return Number(f[1]!.split(':')[1]!.split('@')[0]);
      }
    }
    throw new Error(`no master serves slot ${slot}`);
  };
  const killMasterReplicated = async (port: number) => {
    const node = nodes.find((n) => n.port === port)!;
    await cli(port, 'client', 'pause', '60000', 'WRITE');
    const info = await cli(port, 'info', 'replication');
    const offset = Number(/master_repl_offset:(\d+)/.exec(info)![1]);
    const replica = Number(/slave0:[^\r\n]*port=(\d+)/.exec(info)![1]);
    await waitFor(
      async () => Number(/slave_repl_offset:(\d+)/.exec(await cli(replica, 'info', 'replication'))?.[1] ?? -1) >= offset,
      10_000,
      `replica ${replica} at offset ${offset}`,
      10,
    );
    node.child.kill('SIGKILL');
  };
  const stopAll = async () => {
    // SAVE first: the nodes run without persistence, and a restarted cluster must still hold the keys.
    for (const n of nodes) await cli(n.port, 'save');
    for (const n of nodes) n.child.kill('SIGKILL');
    await Promise.all(
      nodes.map((n) =>
        n.child.exitCode === null && n.child.signalCode === null ? new Promise((r) => n.child.once('exit', r)) : undefined,
      ),
    );
  };
  const restartAll = async () => {
    // nodes.conf and dump.rdb are in each node's dir: the nodes rejoin as the same cluster with their data.
    for (const n of nodes) n.child = await spawnNode(n.port);
    for (const n of nodes) await waitOk(n.port);
  };
  return { nodes, addresses, cli, masterOf, waitOk, killMasterReplicated, stopAll, restartAll };
}
