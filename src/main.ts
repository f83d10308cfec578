/**
 * Process entry: environment → config → store → gateway → listeners, and a graceful stop on
 * SIGTERM/SIGINT (stop accepting, drain in-flight streams until the deadline, settle every hold, close
 * the store, exit 0). The only module that reads process.env (with config loading).
 */
import './tick-anchor.ts'; // first: see the module
import cluster from 'node:cluster';
import { pathToFileURL } from 'node:url';
import { loadConfig } from './config/load.ts';
import { ConfigError } from './config/errors.ts';
import type { Config } from './config/schema.ts';
import { createLogger, prettyDestination } from './obs/logger.ts';
import type { Store } from './store/types.ts';
import { runPrimary } from './cluster/primary.ts';
import type { PrimaryMetricsListener } from './cluster/primary-metrics.ts';
import type { Logger } from './obs/logger.ts';
import {
  bootSummary,
  bootWarnings,
  keyModelWarnings,
  listenErrorMessage,
  storeAddress,
  storeUnreachableMessage,
} from './obs/boot-report.ts';

/** Opens the store SPEC §5 asks for: Redis when configured, else the embedded one (refused in production). */
export async function openStore(config: Config, env: NodeJS.ProcessEnv, logger: Logger): Promise<Store> {
  const { redisUrl, clusterNodes, commandTimeoutMs, debitEntries } = config.store;
  const [{ holdTtlMs, settledMarkerTtlSeconds }, { bucketMsFor }] = await Promise.all([
    import('./credit/credit.ts'),
    import('./store/hold-bucket.ts'),
  ]);
  if (redisUrl || clusterNodes.length > 0) {
    const { createRedisStore } = await import('./store/redis-store.ts');
    let lastLogged = 0;
    const address = storeAddress(config);
    return createRedisStore({
      url: redisUrl,
      clusterNodes,
      commandTimeoutMs,
      debitEntries,
      settledTtlSeconds: settledMarkerTtlSeconds(config),
      holdTtlMs: holdTtlMs(config),
      bucketMs: bucketMsFor(holdTtlMs(config)),
      leases: config.credit.leases,
      leaseLingerMs: config.credit.leaseLingerMs,
      onError: (err) => {
        // ioredis emits an error per reconnect attempt: one line for the outage, then one a minute.
        if (Date.now() - lastLogged > 60_000) {
          lastLogged = Date.now();
          logger.warn({ redis: address, err: err.message }, storeUnreachableMessage(address, err));
        }
      },
    });
  }
  if (env.NODE_ENV === 'production')
    throw new ConfigError(
      'REDIS_URL',
      'NODE_ENV=production requires REDIS_URL (or REDIS_CLUSTER_NODES): the embedded store loses all state on restart',
    );
  logger.warn(
    'no REDIS_URL: using the embedded in-process store; keys, credit and shares are lost on restart and not shared between instances',
  );
  const { createMemoryStore } = await import('./store/memory-store.ts');
  return createMemoryStore(Date.now, {
    holdTtlMs: holdTtlMs(config),
    reapedKeepMs: settledMarkerTtlSeconds(config) * 1000,
    bucketMs: bucketMsFor(holdTtlMs(config)),
  });
}

/**
 * Runs the gateway until SIGTERM/SIGINT; resolves with the listening URLs. With `server.workers > 1`
 * the first process becomes the primary (src/cluster/primary.ts: it forks the workers and resolves
 * with undefined) and each worker, re-running this entry point, serves both ports.
 */
export async function serve(env: NodeJS.ProcessEnv = process.env): Promise<{ publicUrl: string; adminUrl: string } | undefined> {
  let config: Config;
  let file: string;
  try {
    ({ config, file } = await loadConfig(env));
  } catch (e) {
    if (e instanceof ConfigError) {
      process.stderr.write(`${e.message}\n`);
      process.exit(1);
    }
    throw e;
  }
  const logger = createLogger(config.logLevel, config.logFormat === 'pretty' ? await prettyDestination() : undefined);
  const workers = config.server.workers;
  /** A port the operator can fix (in use, not allowed): its one line on stderr, exit 1; anything else is thrown. */
  const listenFailed: (e: unknown) => never = (e) => {
    const line = listenErrorMessage(e, config);
    if (!line) throw e;
    logger.flush();
    process.stderr.write(`${line}\n`);
    process.exit(1);
  };
  if (workers > 1 && cluster.isPrimary) {
    for (const w of bootWarnings(config)) logger.warn(w);
    // server.metrics_port: the primary answers it (cluster/primary-metrics.ts), bound before any worker is forked.
    let metricsListener: PrimaryMetricsListener | undefined;
    if (config.server.metricsPort !== undefined) {
      const { listenPrimaryMetrics } = await import('./cluster/primary-metrics.ts');
      try {
        metricsListener = await listenPrimaryMetrics({ server: config.server, logger });
      } catch (e) {
        listenFailed(e);
      }
      logger.info({ metrics: metricsListener.url }, 'metrics listening (the primary answers /metrics)');
    }
    runPrimary({ workers, logger, drainSeconds: config.server.drainSeconds, ...(metricsListener && { metricsListener }) });
    return undefined;
  }
  // The gateway's modules (undici, ioredis, the AWS SDK, prom-client's registry…) load only in a process
  // that serves: a primary that only forks workers imported them all before, tens of MB of RSS for nothing.
  const [{ createGateway }, { createMetrics }, { linkWorker }] = await Promise.all([
    import('./gateway.ts'),
    import('./obs/metrics.ts'),
    import('./cluster/worker-link.ts'),
  ]);
  const log = cluster.isWorker ? logger.child({ worker: cluster.worker!.id }) : logger;
  let store: Store;
  try {
    store = await openStore(config, env, log);
  } catch (e) {
    process.stderr.write(`${(e as Error).message}\n`);
    process.exit(1);
  }
  const metrics = createMetrics();
  const link = cluster.isWorker ? linkWorker(metrics.registry) : undefined;
  const gateway = createGateway({ config, store, logger: log, metrics, ...(link && { cluster: link }) });
  if (!link) for (const w of bootWarnings(config)) logger.warn(w);
  let urls: { publicUrl: string; adminUrl: string };
  try {
    urls = await gateway.listen();
  } catch (e) {
    listenFailed(e);
  }
  log.info({ config: file, ...bootSummary(config, store.kind, urls) }, 'tollgate listening');
  link?.listening();
  // In the background (it scans the key records), once per deployment process: not in every worker.
  if (!cluster.isWorker || cluster.worker?.id === 1) {
    void keyModelWarnings(config, store).then(
      (ws) => ws.forEach((w) => log.warn(w)),
      // Usually the store being unreachable (logged on its own): no ioredis internals here.
      () => log.warn("could not check the keys' models (is the store reachable?); checked again at the next start"),
    );
  }
  // Request lines are batched (4 KiB writes); boot lines should show at once.
  logger.flush();

  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    log.info({ signal, drain_seconds: config.server.drainSeconds }, 'draining');
    // SPEC §14: the process is gone within drain + 5 s whatever hangs. gateway.close() spools the settles still
    // owed and ends its jobs by drain + 2.5 s; the store's quit (it waits for Redis) gets at most 0.5 s.
    const hardStop = setTimeout(
      () => {
        log.error({ drain_seconds: config.server.drainSeconds }, 'shutdown overran drain + 5 s: exiting now');
        logger.flush();
        process.exit(1);
      },
      config.server.drainSeconds * 1000 + 4_800,
    );
    hardStop.unref();
    try {
      await gateway.close();
      await Promise.race([store.close(), new Promise((r) => setTimeout(r, 500).unref())]);
      log.info('stopped');
    } finally {
      logger.flush();
      setImmediate(() => process.exit(0));
    }
  };
  // `on`, not `once`: a second signal must not kill a draining process by the default action. A worker gets
  // two whenever the whole process group is signalled (systemd's control-group kill, a terminal's Ctrl-C):
  // one directly and one passed on by the primary. The hard stop above bounds the drain either way.
  process.on('SIGTERM', () => void stop('SIGTERM'));
  process.on('SIGINT', () => void stop('SIGINT'));
  return urls;
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) await serve();
