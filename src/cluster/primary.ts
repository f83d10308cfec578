/**
 * The primary of `server.workers > 1` (SPEC §11): forks the workers, replaces one that dies (logged,
 * after a back-off that grows while replacements keep dying young), answers their questions about the
 * whole cluster (summed metrics, readiness), and on SIGTERM/SIGINT passes the signal to every worker,
 * which drains its streams and settles its holds, then exits 0 once all have (1 if one did not stop
 * cleanly or had to be killed at drain + 5 s, SPEC §14). It serves no HTTP itself but the metrics port
 * (`server.metrics_port`, primary-metrics.ts: a scrape handed to a stalled worker hung): every worker
 * listens on the public and admin ports and node:cluster shares the sockets.
 */
import cluster, { type Worker } from 'node:cluster';
import type { Logger } from '../obs/logger.ts';
import { createCollector } from './collect-metrics.ts';
import type { PrimaryMetricsListener } from './primary-metrics.ts';
import { isOurs, type Ping, type Reply, type ToPrimary } from './messages.ts';

export interface PrimaryOptions {
  workers: number;
  logger: Logger;
  /** `server.drain_seconds`: a worker still running at drain + 5 s is killed (SPEC §14). */
  drainSeconds: number;
  /** How long a worker may answer no ping before it is killed and replaced (default WORKER_STALL_MS). */
  stallMs?: number;
  /** The metrics port's listener, already bound (`server.metrics_port`): answered from the collector. */
  metricsListener?: PrimaryMetricsListener;
  /** Exit code when every worker has stopped after a signal; a test seam (default process.exit). */
  exit?: (code: number) => void;
}

/** Runs the primary until a signal stops every worker. */
export function runPrimary(o: PrimaryOptions): { stop(signal: NodeJS.Signals): Promise<void> } {
  const listening = new Set<number>();
  // Until every worker has listened once (the start), a worker still booting is not missing from a scrape:
  // a scrape in those first seconds would otherwise raise TollgateWorkersMissing for its whole window.
  let started = false;
  const collector = createCollector({
    expected: () => (started ? o.workers : listening.size),
    logger: o.logger,
    ...(o.metricsListener && { own: o.metricsListener.own }),
  });
  // The workers asked for their parts: those that listen and whose channel is open.
  const collect = () =>
    collector.collect(Object.values(cluster.workers ?? {}).filter((x): x is Worker => !!x && listening.has(x.id) && x.isConnected()));
  o.metricsListener?.serve(collect);
  let stopping = false;
  // Workers that died before ever listening, in a row: a bad port or config would otherwise restart forever.
  let failedBoots = 0;
  // The primary's exit code after a stop: 1 when a worker that served did not stop cleanly.
  let exitCode = 0;

  const fork = () => {
    const w = cluster.fork();
    w.on('message', (m: unknown) => void answer(w, m));
    return w;
  };

  async function answer(w: Worker, m: unknown): Promise<void> {
    if (!isOurs(m)) return;
    const msg = m as ToPrimary;
    if (msg.type === 'tollgate:pong') {
      lastPong.set(w.id, Date.now());
      return;
    }
    if (msg.type === 'tollgate:part') {
      collector.received(w, msg);
      return;
    }
    if (msg.type === 'tollgate:listening') {
      listening.add(w.id);
      if (listening.size >= o.workers) started = true;
      lastPong.set(w.id, Date.now());
      failedBoots = 0;
      o.logger.info({ worker: w.id, pid: w.process.pid, listening: listening.size, of: o.workers }, 'worker listening');
      return;
    }
    const reply: Reply = { type: 'tollgate:reply', id: msg.id };
    try {
      if (msg.type === 'tollgate:metrics') reply.metrics = await collect();
      else
        reply.ready =
          !stopping &&
          listening.size >= o.workers &&
          Object.values(cluster.workers ?? {}).every(
            (x) => x && listening.has(x.id) && Date.now() - (lastPong.get(x.id) ?? 0) < READY_PONG_MS,
          );
    } catch (e) {
      reply.error = (e as Error).message;
    }
    if (w.isConnected()) w.send(reply);
  }

  // Replacements of workers that die young wait longer each time (a worker that crashes on every boot or on
  // every request otherwise costs a core re-importing the gateway, ~1 s of CPU a fork, taken from the
  // workers still serving); a worker that lived RESTART_RESET_MS resets the back-off.
  let youngDeaths = 0;
  const restarts = new Set<NodeJS.Timeout>();
  const bornAt = new Map<number, number>();

  cluster.on('fork', (w) => bornAt.set(w.id, Date.now()));

  // A worker whose event loop is blocked (an endless loop, sync work that never ends) or whose process is
  // stopped serves nothing: the connections node:cluster hands it hang (/healthz among them), /metrics
  // answers after 3 s without its part (collect-metrics.ts), and at SIGTERM it never drains. It answers no
  // ping: /readyz says not ready after READY_PONG_MS, and after o.stallMs it is killed and replaced
  // (what it held is released by the reaper, as after a crash).
  const lastPong = new Map<number, number>();
  const watchdog = setInterval(() => {
    for (const w of Object.values(cluster.workers ?? {})) {
      if (!w || !listening.has(w.id) || w.isDead()) continue;
      const silent = Date.now() - (lastPong.get(w.id) ?? Date.now());
      if (silent >= (o.stallMs ?? WORKER_STALL_MS)) {
        o.logger.error({ worker: w.id, pid: w.process.pid, silent_ms: silent }, 'worker not answering: killing it');
        w.process.kill('SIGKILL');
      } else if (w.isConnected()) w.send({ type: 'tollgate:ping' } satisfies Ping);
    }
  }, PING_EVERY_MS);
  cluster.on('exit', (w, code, signal) => {
    const booted = listening.delete(w.id);
    const lived = Date.now() - (bornAt.get(w.id) ?? 0);
    bornAt.delete(w.id);
    lastPong.delete(w.id);
    if (stopping) {
      // A worker still booting has nothing to drain: the signal's default action ending it is no failure.
      if (booted && (code !== 0 || signal)) exitCode = 1;
      return;
    }
    if (!booted && ++failedBoots >= 3) {
      o.logger.fatal({ worker: w.id, code, signal }, 'three workers in a row died before listening; stopping');
      void stop('SIGTERM', 1);
      return;
    }
    youngDeaths = lived >= RESTART_RESET_MS ? 0 : youngDeaths + 1;
    const delay = restartDelayMs(youngDeaths);
    o.logger.error(
      { worker: w.id, pid: w.process.pid, code, signal, lived_ms: lived, restart_in_ms: delay },
      'worker died; starting a replacement',
    );
    const timer = setTimeout(() => {
      restarts.delete(timer);
      fork();
    }, delay);
    restarts.add(timer);
  });

  for (let i = 0; i < o.workers; i++) fork();
  o.logger.info({ workers: o.workers }, 'primary started');

  async function stop(signal: NodeJS.Signals, code = 0): Promise<void> {
    if (stopping) {
      o.logger.info({ signal }, 'already stopping: the workers go on draining');
      return;
    }
    stopping = true;
    exitCode = code;
    clearInterval(watchdog);
    for (const timer of restarts) clearTimeout(timer);
    // Stops accepting scrapes, as a worker's listeners do; one in progress is answered.
    o.metricsListener?.close(o.drainSeconds * 1000);
    o.logger.info({ signal }, 'stopping every worker (each drains and settles)');
    const alive = Object.values(cluster.workers ?? {}).filter((w): w is Worker => !!w && !w.isDead());
    const exited = alive.map((w) => new Promise<void>((resolve) => w.once('exit', () => resolve())));
    for (const w of alive) w.process.kill(signal);
    // SPEC §14: gone within drain + 5 s. A worker stops itself at drain + 4.8 s; one whose event loop is
    // blocked (or stopped) never runs its handler, and waiting for it kept the primary up for good.
    const deadline = setTimeout(
      () => {
        const late = alive.filter((w) => !w.isDead());
        o.logger.error({ workers: late.map((w) => w.process.pid) }, 'workers still running at drain + 5 s: killing them');
        exitCode = 1;
        for (const w of late) w.process.kill('SIGKILL');
      },
      o.drainSeconds * 1000 + 4_900,
    );
    await Promise.all(exited);
    clearTimeout(deadline);
    o.logger.info({ exit_code: exitCode }, 'all workers stopped');
    o.logger.flush();
    (o.exit ?? process.exit)(exitCode);
  }
  // `on`, not `once`: a second signal (systemd signals the whole control group, a terminal's Ctrl-C the
  // whole process group, and an operator may press it twice) would otherwise kill the primary at once,
  // and node:cluster workers exit the moment their primary's channel closes, mid-drain, unsettled.
  process.on('SIGTERM', () => void stop('SIGTERM'));
  process.on('SIGINT', () => void stop('SIGINT'));
  return { stop: (signal) => stop(signal) };
}

/** A worker that lived this long before dying resets the replacement back-off. */
const RESTART_RESET_MS = 30_000;

/** The wait before replacing a worker, by how many died young in a row: 0, 0.5 s, 1 s, 2 s … 16 s. */
export function restartDelayMs(youngDeaths: number): number {
  return youngDeaths <= 1 ? 0 : Math.min(16_000, 500 * 2 ** (youngDeaths - 2));
}

/** How often the primary pings each worker. */
const PING_EVERY_MS = 1_000;
/** A worker silent this long makes /readyz not ready (three pings missed); collect-metrics.ts waits as long. */
const READY_PONG_MS = 3_000;
/**
 * A worker silent this long is killed. Nothing on a worker's event loop is meant to run more than a few
 * ms (SPEC §12; a tokenizer count is capped at 2 s), so 10 s is a stall, not work.
 */
const WORKER_STALL_MS = 10_000;
