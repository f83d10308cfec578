/**
 * The primary of `server.workers > 1` (SPEC §11): forks the workers, replaces one that dies (logged),
 * answers their questions about the whole cluster (summed metrics, readiness), and on SIGTERM/SIGINT
 * passes the signal to every worker, which drains its streams and settles its holds, then exits 0
 * once all have. It serves no HTTP itself: every worker listens on both ports and node:cluster
 * shares the sockets.
 */
import cluster, { type Worker } from 'node:cluster';
import { AggregatorRegistry } from 'prom-client';
import type { Logger } from '../obs/logger.ts';
import { isOurs, type Reply, type ToPrimary } from './messages.ts';

export interface PrimaryOptions {
  workers: number;
  logger: Logger;
  /** Exit code when every worker has stopped after a signal; a test seam (default process.exit). */
  exit?: (code: number) => void;
}

/** Runs the primary until a signal stops every worker. */
export function runPrimary(o: PrimaryOptions): { stop(signal: NodeJS.Signals): Promise<void> } {
  // Its constructor installs prom-client's IPC handling; clusterMetrics() then asks every worker.
  const agg = new AggregatorRegistry();
  const listening = new Set<number>();
  let stopping = false;
  // Workers that died before ever listening, in a row: a bad port or config would otherwise restart forever.
  let failedBoots = 0;

  const fork = () => {
    const w = cluster.fork();
    w.on('message', (m: unknown) => void answer(w, m));
    return w;
  };

  async function answer(w: Worker, m: unknown): Promise<void> {
    if (!isOurs(m)) return;
    const msg = m as ToPrimary;
    if (msg.type === 'tollgate:listening') {
      listening.add(w.id);
      failedBoots = 0;
      o.logger.info({ worker: w.id, pid: w.process.pid, listening: listening.size, of: o.workers }, 'worker listening');
      return;
    }
    const reply: Reply = { type: 'tollgate:reply', id: msg.id };
    try {
      if (msg.type === 'tollgate:metrics') reply.metrics = await agg.clusterMetrics();
      else
        reply.ready =
          !stopping && listening.size >= o.workers && Object.values(cluster.workers ?? {}).every((x) => x && listening.has(x.id));
    } catch (e) {
      reply.error = (e as Error).message;
    }
    if (w.isConnected()) w.send(reply);
  }

  cluster.on('exit', (w, code, signal) => {
    const booted = listening.delete(w.id);
    if (stopping) return;
    if (!booted && ++failedBoots >= 3) {
      o.logger.fatal({ worker: w.id, code, signal }, 'three workers in a row died before listening; stopping');
      void stop('SIGTERM', 1);
      return;
    }
    o.logger.error({ worker: w.id, pid: w.process.pid, code, signal }, 'worker died; starting a replacement');
    fork();
  });

  for (let i = 0; i < o.workers; i++) fork();
  o.logger.info({ workers: o.workers }, 'primary started');

  async function stop(signal: NodeJS.Signals, code = 0): Promise<void> {
    if (stopping) return;
    stopping = true;
    o.logger.info({ signal }, 'stopping every worker (each drains and settles)');
    const alive = Object.values(cluster.workers ?? {}).filter((w): w is Worker => !!w && !w.isDead());
    await Promise.all(
      alive.map(
        (w) =>
          new Promise<void>((resolve) => {
            w.once('exit', () => resolve());
            w.process.kill(signal);
          }),
      ),
    );
    o.logger.info('all workers stopped');
    o.logger.flush();
    (o.exit ?? process.exit)(code);
  }
  process.once('SIGTERM', () => void stop('SIGTERM'));
  process.once('SIGINT', () => void stop('SIGINT'));
  return { stop: (signal) => stop(signal) };
}
