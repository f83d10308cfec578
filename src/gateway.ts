/**
 * Assembles a gateway from its dependencies (config, store, clock, logger, metrics): builds every
 * component, the two route tables and the background jobs. No module-level state: tests build a whole
 * gateway in a few lines and run several against one Redis.
 */
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { Config } from './config/schema.ts';
import type { Store } from './store/types.ts';
import type { Logger } from './obs/logger.ts';
import { createMetrics, type Metrics } from './obs/metrics.ts';
import { createRouter, type Route } from './http/router.ts';
import { createEdge, drain, listen, portOf } from './http/server.ts';
import type { RequestContext } from './http/context.ts';
import { createKeyCache } from './auth/key-cache.ts';
import { createFailedAuthLimiter } from './auth/failed-auth-limiter.ts';
import { createAuthenticator } from './auth/authenticate.ts';
import { createKeyTable } from './auth/key-table.ts';
import { createAdminGuard } from './admin/token.ts';
import { createClientAddress } from './http/client-address.ts';
import { createFailureWindow } from './auth/failure-window.ts';
import { keyRoutes } from './admin/keys.ts';
import { budgetView } from './credit/budget.ts';
import { accountRoutes } from './admin/accounts.ts';
import { createAccountService } from './admin/account-service.ts';
import { opsRoutes } from './admin/ops.ts';
import { createWarmUp } from './admin/warm-up.ts';
import { modelRoutes } from './routes/models.ts';
import { keyInfoRoutes } from './routes/key-info.ts';
import { startReaper } from './credit/reaper.ts';
import { createCredit } from './credit/credit.ts';
import { createSpool, replaySpool, type Spool } from './credit/spool.ts';
import type { Limits } from './limits/limits.ts';
import { createRateLimits } from './limits/rate-limiter.ts';
import { createConcurrency } from './limits/concurrency.ts';
import { createBodyBudget } from './limits/body-budget.ts';
import { createUpstreams } from './upstream/pool.ts';
import { createTokenizer, type Tokenizer } from './meter/tokenizer.ts';
import { meteredRoute, type MeteredDeps } from './routes/metered.ts';
import { CHAT_COMPLETIONS } from './routes/chat-completions.ts';
import { RESPONSES_ENDPOINT } from './routes/responses.ts';
import { COMPLETIONS_ENDPOINT } from './routes/completions.ts';
import { EMBEDDINGS_ENDPOINT } from './routes/embeddings.ts';
import { createGate } from './http/gate.ts';
import { createShares } from './shares/setup.ts';
import { shareRoutes } from './shares/routes.ts';
import { shareAdminRoutes } from './shares/admin-routes.ts';
import { maxShareBodyBytes } from './shares/share-body.ts';
import type { ClusterLink } from './cluster/worker-link.ts';
import { openApiDocument } from './http/openapi.ts';
import { createRequire } from 'node:module';
import { createConsole, isConsolePath, type Console } from './console/setup.ts';
import { createUsage, type Usage } from './usage/usage.ts';
import { rebuildUsage } from './usage/rebuild.ts';
import { replayUsageSpool } from './usage/spool.ts';
import { within } from './deadline.ts';
import { usageRoutes } from './usage/routes.ts';
import { createLedgerExporter, type LedgerExporter } from './ledger/exporter.ts';
import { createS3Sink, type LedgerSink } from './ledger/sink.ts';
import { ledgerRoutes } from './ledger/routes.ts';
import type { Tracing } from './obs/tracing.ts';

/** The package version, for the OpenAPI document (read once at load). */
const VERSION = (createRequire(import.meta.url)('../package.json') as { version: string }).version;

export interface GatewayDeps {
  config: Config;
  store: Store;
  logger: Logger;
  metrics?: Metrics;
  /** The clock (ms since epoch); a seam for tests. */
  now?: () => number;
  /** Rate limits; defaults to the configured per-key limits on the store's Redis (or in memory). */
  limits?: Limits;
  /** The fallback token counter; defaults to gpt-tokenizer, loaded the first time usage is missing. */
  tokenizer?: Tokenizer;
  /** Set in a worker of `server.workers > 1`: cluster-wide metrics and readiness come from the primary. */
  cluster?: ClusterLink;
  /** Where the ledger export writes; defaults to the configured S3 bucket (ledger.export.s3, else shares.s3). */
  ledgerSink?: LedgerSink;
  /** SPEC §15 traces; defaults to an OTLP/HTTP exporter when `otel.endpoint` is set, else none (off). */
  tracing?: Tracing;
}

export interface Gateway {
  readonly metrics: Metrics;
  /** The route tables of the two listeners (the OpenAPI document is generated from them). */
  readonly routes: { readonly public: readonly Route[]; readonly admin: readonly Route[]; readonly console: readonly Route[] };
  /** Usage aggregates (SPEC §10): the query service the admin API and the console read. */
  readonly usage: Usage;
  /** The ledger export, when enabled. */
  readonly exporter: LedgerExporter | undefined;
  readonly publicHandler: (req: IncomingMessage, res: ServerResponse) => void;
  readonly adminHandler: (req: IncomingMessage, res: ServerResponse) => void;
  /** Listens on the configured hosts/ports (0 = any free port); metricsUrl when server.metrics_port is set (not in a worker: the primary listens on it). */
  listen(): Promise<{ publicUrl: string; adminUrl: string; metricsUrl?: string }>;
  /** Stops accepting, drains in-flight requests up to the deadline, stops background jobs. The store stays open. */
  close(deadlineMs?: number): Promise<void>;
}

/** After the drain deadline: streams cut with the shutting_down event get this long to flush it before connections are closed. */
const CUT_GRACE_MS = 1_000;
/** Settles still owed this long after the drain deadline are spooled (they had the whole drain to land). */
const SETTLE_GRACE_MS = 1_500;
/**
 * The usage flush and the other background jobs stop by then; main.ts gives the store 0.5 s more. That leaves
 * ~2 s of the SPEC §14 bound (drain + 5 s) to a loaded machine's late timers (1 s late was seen at load 30).
 */
const STOP_GRACE_MS = 2_500;
/**
 * A settle handed over after the spool was written makes one Redis attempt (up to store.command_timeout_ms)
 * and is then spooled: billing still waiting for a usage lookup is cut this long before that, and more.
 */
const BILLING_CUT_MARGIN_MS = 250;
/** The usage flush is tried until STOP_GRACE_MS; writing what did not land to the spool (a local fsync) gets this much more. */
const USAGE_SPOOL_GRACE_MS = 300;

export function createGateway(d: GatewayDeps): Gateway {
  const { config, store, logger } = d;
  const now = d.now ?? Date.now;
  const metrics = d.metrics ?? createMetrics();
  const keyCacheCounter = {
    hit: metrics.cache.labels({ cache: 'keys', outcome: 'hit' }),
    miss: metrics.cache.labels({ cache: 'keys', outcome: 'miss' }),
  };
  const keys = createKeyCache({
    store,
    ttlMs: config.auth.cacheTtlMs,
    negativeTtlMs: config.auth.negativeTtlMs,
    max: config.auth.cacheMax,
    onLookup: (o) => keyCacheCounter[o].inc(),
  });
  const clientAddress = createClientAddress(config.server.trustedProxies);
  const auth = createAuthenticator({
    keys,
    failed: createFailedAuthLimiter(config.auth.failedPerMinute),
    clientAddress,
    onFailure: (reason) => metrics.authFailures.inc({ reason }),
    now,
  });
  const keyTable = createKeyTable({
    store,
    now,
    maxPerAccount: config.limits.maxKeysPerAccount,
    maxMadePerDay: config.limits.maxKeysMadePerDay,
  });
  const accounts = createAccountService({ store, now });
  const adminGuard = createAdminGuard(config.adminToken, {
    failures: createFailureWindow({ perWindow: config.auth.adminFailedPerMinute, now }),
    clientAddress,
  });
  const guard = (ctx: RequestContext) => adminGuard(ctx.req);
  const limits = d.limits ?? createRateLimits({ ...config.rateLimits, redis: store.redis, metrics, logger, now });
  const tokenizer = d.tokenizer ?? createTokenizer();
  // Loaded by listen() before the gateway reports ready (SPEC §13: no first-use stalls).
  const warmUp = createWarmUp({ tokenizer, s3: config.shares.s3, logger });
  const credit = createCredit({
    store,
    logger,
    resendWindowMs: config.store.resendSettlesMs,
    onResent: (debited) => metrics.settleResends.inc({ outcome: debited ? 'debited' : 'replayed' }),
  });
  // Credit leases (credit.leases, Redis only): the store's counts, read at each scrape.
  if (store.leaseStats) metrics.watchLeases(store.leaseStats);
  const upstreams = createUpstreams(config.models, config.upstream);
  const shares = createShares({ config: config.shares, store, now, metrics, logger });
  // Per process (per worker with server.workers): SPEC §12's bounds on what one key or the whole mix can hold.
  const concurrency = createConcurrency(config.limits.maxConcurrentPerKey, config.limits.maxConcurrentPerAccount);
  // The gauge shows both budgets below: the keys' and the admin listener's.
  let keyBodyBytes = 0;
  let adminBodyBytes = 0;
  const bodyBudget = createBodyBudget(
    config.limits.maxInflightBodyBytes,
    (used) => metrics.inflightBodyBytes.set((keyBodyBytes = used) + adminBodyBytes),
    { perKey: config.limits.maxInflightBodyBytesPerKey, timeoutMs: config.server.bodyTimeoutMs },
  );
  // Admin bodies are read under a budget of their own, timed and counted like every other body (SPEC §13):
  // the admin token is one principal, so it gets a key's cap (but at least one whole share body), and it is
  // not in the keys' budget, so keys filling that one cannot keep the operator from disabling them.
  const adminBodyBudget = createBodyBudget(
    Math.max(config.limits.maxInflightBodyBytesPerKey, maxShareBodyBytes(shares.limits)),
    (used) => metrics.inflightBodyBytes.set(keyBodyBytes + (adminBodyBytes = used)),
    { timeoutMs: config.server.bodyTimeoutMs },
  );
  const usage = createUsage({
    store,
    logger,
    retentionDays: config.usage.retentionDays,
    flushIntervalMs: config.usage.flushIntervalMs,
    onFlushFailed: () => metrics.usageFlushFailures.inc(),
    // What cannot be flushed at exit goes beside the settles it was billed with (SPEC §10, §14).
    spoolDir: config.server.spoolDir,
    // Flushes a failed-over master acknowledged are sent again, as the settles are (docs/ledger.md "Failover").
    resendWindowMs: config.store.resendSettlesMs,
  });
  const ex = config.ledger.export;
  const ledgerSink = d.ledgerSink ?? (ex.enabled ? createS3Sink(ex.s3) : undefined);
  const exporter = ledgerSink
    ? createLedgerExporter({
        store,
        sink: ledgerSink,
        logger,
        now,
        prefix: ex.prefix,
        batchSize: ex.batchSize,
        retentionDays: config.ledger.retentionDays,
        intervalSeconds: ex.intervalSeconds,
        onReport: (r) => {
          metrics.ledgerExported.inc(r.entries);
          metrics.ledgerTrimmed.inc(r.trimmed);
          metrics.ledgerExportFailures.inc(r.failed);
        },
      })
    : undefined;
  const rebuild = (account: string, from: string, to: string) =>
    rebuildUsage({ store, sink: ledgerSink, prefix: ex.prefix, retentionDays: config.usage.retentionDays }, account, from, to);

  // Every key-authenticated route is authenticated, scoped and admitted once, by the edge's gate (http/gate.ts).
  const gate = createGate({ auth, limits, concurrency, adminGuard: guard, drainMs: config.server.bodyTimeoutMs });
  // Aborted at the drain deadline: the streams still open end with the shutting_down event (SPEC §14).
  const streamCut = new AbortController();
  // Aborted SETTLE_GRACE_MS after the drain deadline: usage lookups still running give way to the estimate.
  const billingCut = new AbortController();
  // `tracing` stays undefined unless `otel` is configured (then listen() sets it): the route reads it per request.
  const metered: MeteredDeps = {
    config,
    credit,
    upstreams,
    tokenizer,
    metrics,
    now,
    bodyBudget,
    concurrency,
    usage,
    shutdown: streamCut.signal,
    billingCut: billingCut.signal,
    tracing: d.tracing,
    auth,
  };
  const publicRoutes: Route[] = [
    meteredRoute(metered, CHAT_COMPLETIONS),
    meteredRoute(metered, RESPONSES_ENDPOINT),
    meteredRoute(metered, COMPLETIONS_ENDPOINT),
    meteredRoute(metered, EMBEDDINGS_ENDPOINT),
    ...modelRoutes({ models: config.models }),
    ...keyInfoRoutes({ store, now, rateLimits: config.rateLimits }),
    ...shareRoutes({
      metrics,
      bodyBudget,
      auth,
      clientAddress,
      failedReads: createFailureWindow({ perWindow: config.shares.failedReadsPerMinute, now }),
      ...shares,
    }),
  ];
  // The web console (SPEC §9): its own edge under /console on the public listener, its link minting on the admin one.
  let publicListenerUrl = '';
  const webConsole: Console | undefined = config.console.enabled
    ? createConsole({
        config: config.console,
        store,
        now,
        logger,
        metrics,
        keys: keyTable,
        accounts,
        shares: shares.service,
        usage,
        listenerUrl: () => publicListenerUrl,
        failedLogins: createFailureWindow({ perWindow: config.auth.failedPerMinute, now }),
        clientAddress,
        adminBodyBudget,
        bodyTimeoutMs: config.server.bodyTimeoutMs,
      })
    : undefined;
  // Built on first request from the final route tables (every route describes itself: http/openapi.ts).
  let openapi: Record<string, unknown> | undefined;
  const describe = () => (openapi ??= openApiDocument({ version: VERSION, publicRoutes, adminRoutes }));
  const adminRoutes: Route[] = [
    ...opsRoutes({ metrics, store, cluster: d.cluster, openapi: describe, warmUp }),
    ...keyRoutes({
      keys: keyTable,
      models: config.models.map((m) => m.name),
      lastUsed: (account) => usage.lastUsed(account),
      budget: (r) => budgetView(store, r, now()),
      bodyBudget: adminBodyBudget,
      now,
    }),
    ...accountRoutes({ accounts, bodyBudget: adminBodyBudget }),
    ...usageRoutes({ usage, rebuild, now, retentionDays: config.usage.retentionDays, bodyBudget: adminBodyBudget }),
    ...ledgerRoutes({ exporter }),
    ...shareAdminRoutes({ ...shares, bodyBudget: adminBodyBudget }),
    ...(webConsole?.adminRoutes ?? []),
  ];
  // The admin token guards /admin/ only through the gate: a route there that forgot `admin: true` would be
  // open to anyone who reaches the listener. Refuse to build such a gateway.
  for (const r of adminRoutes) {
    if (r.pattern.startsWith('/admin/') && r.admin !== true)
      throw new Error(`admin route ${r.method} ${r.pattern} must declare admin: true`);
  }
  const apiHandler = createEdge({ router: createRouter(publicRoutes), logger, metrics, listener: 'public', gate });
  const consoleHandler = webConsole?.handler;
  const publicHandler = consoleHandler
    ? (req: IncomingMessage, res: ServerResponse) => (isConsolePath(req.url!) ? consoleHandler : apiHandler)(req, res)
    : apiHandler;
  const adminHandler = createEdge({ router: createRouter(adminRoutes), logger, metrics, listener: 'admin', gate });
  // server.metrics_port: /metrics alone on a listener of its own, so Prometheus can reach it without /admin/.
  const metricsRoutes = opsRoutes({ metrics, store, cluster: d.cluster }).filter((r) => r.pattern === '/metrics');
  const metricsHandler = createEdge({ router: createRouter(metricsRoutes), logger, metrics, listener: 'metrics' });

  let servers: Server[] = [];
  let metricsUrl: string | undefined;
  const url = (host: string, srv: Server) => `http://${host === '0.0.0.0' || host === '::' ? '127.0.0.1' : host}:${portOf(srv)}`;
  let reaper: { stop(): void } | undefined;
  // Settles still owed at exit (SPEC §14): this process's spool file, created only if something is spooled.
  const spool: Spool = createSpool({ dir: config.server.spoolDir, now });
  let replaying: Promise<unknown> | undefined;
  let spoolScan: NodeJS.Timeout | undefined;

  return {
    metrics,
    routes: { public: publicRoutes, admin: adminRoutes, console: webConsole?.routes ?? [] },
    usage,
    exporter,
    publicHandler,
    adminHandler,
    async listen() {
      const s = config.server;
      // SPEC §15 traces: the OpenTelemetry SDK (~1 s and ~10 MB of heap to load) is imported only when configured,
      // before the first request can arrive.
      if (config.otel && !metered.tracing) metered.tracing = (await import('./obs/otlp.ts')).createOtlpTracing(config.otel, VERSION);
      const opts = { headersTimeoutMs: s.headersTimeoutMs, requestTimeoutMs: s.requestTimeoutMs, writeTimeoutMs: s.writeTimeoutMs };
      const pub = await listen(publicHandler, { ...opts, host: s.host, port: s.port });
      publicListenerUrl = url(s.host, pub);
      const adm = await listen(adminHandler, { ...opts, host: s.adminHost, port: s.adminPort });
      servers = [pub, adm];
      // In a worker of `server.workers > 1` the primary listens on metrics_port itself (cluster/primary-metrics.ts):
      // node:cluster would hand each scrape to some worker, and one handed to a stalled worker hung.
      if (s.metricsPort !== undefined && !d.cluster) {
        const met = await listen(metricsHandler, { ...opts, host: s.metricsHost, port: s.metricsPort });
        servers.push(met);
        metricsUrl = url(s.metricsHost, met);
      }
      // After the listeners (so /readyz can say 503 `warm_up: loading` meanwhile), before listen() resolves:
      // main.ts logs "listening" and a worker reports itself listening only once everything is loaded.
      await warmUp.run(`${url(s.adminHost, adm)}/healthz`);
      reaper = startReaper({
        store,
        now,
        intervalMs: config.credit.reaperIntervalMs,
        logger,
        onReaped: (n) => metrics.holdsReaped.inc(n),
        onStoreUp: (up) => metrics.storeUp.set(up ? 1 : 0),
      });
      // Settles other processes spooled at exit: applied once each, in the background (retried while the store is
      // away), at start and then every server.spool_scan_seconds (a readdir of a usually absent directory), so
      // the spool of the last pod of a rolling update, on a shared volume, does not wait for the next start.
      // Usage flushes spooled beside them (src/usage/spool.ts) likewise: each applied once by its flush id.
      const scan = () => {
        if (replaying) return;
        const failed = (e: unknown) => logger.error({ err: (e as Error).message, spool: config.server.spoolDir }, 'spool replay failed');
        replaying = Promise.all([
          replaySpool({ dir: config.server.spoolDir, settle: (s) => credit.settle(s), logger }).catch(failed),
          replayUsageSpool({ dir: config.server.spoolDir, flush: (f) => store.flushUsage(f), logger }).catch(failed),
        ]).finally(() => (replaying = undefined));
      };
      scan();
      spoolScan = setInterval(scan, config.server.spoolScanSeconds * 1000).unref();
      usage.start();
      exporter?.start();
      shares.janitor?.start();
      return { publicUrl: url(s.host, pub), adminUrl: url(s.adminHost, adm), ...(metricsUrl && { metricsUrl }) };
    },
    async close(deadlineMs = config.server.drainSeconds * 1000) {
      // SPEC §14: everything below ends within drain + 5 s (main.ts closes the store after it).
      const started = Date.now();
      const deadline = started + deadlineMs;
      reaper?.stop();
      clearInterval(spoolScan);
      // At the deadline the streams still open end with the shutting_down event and are billed for what they
      // produced; CUT_GRACE_MS later whatever is left (a client not reading, a request still waiting for its
      // upstream) is cut.
      const cut = setTimeout(() => streamCut.abort(), deadlineMs);
      // A stateful request's usage lookup (SPEC §4) may answer later than anything could still be spooled: it
      // is given up for the estimate in time for its settle's one Redis attempt and its spooling (BILLING_CUT_MARGIN_MS).
      const billingCutAt = setTimeout(
        () => billingCut.abort(),
        deadlineMs + Math.max(SETTLE_GRACE_MS, STOP_GRACE_MS - config.store.commandTimeoutMs - BILLING_CUT_MARGIN_MS),
      );
      const drained = Promise.all(servers.map((srv) => drain(srv, deadlineMs + CUT_GRACE_MS)));
      // Requests still running a moment into the drain may be cut at the deadline, and a cut stream has no usage
      // chunk: load the tokenizer now, while they run (its first load holds the event loop 0.3–1 s), rather than
      // after the cut, where it delayed the exit by as much.
      if (!tokenizer.loaded && !(await within(drained, 100))) void tokenizer.load().catch(() => {});
      await drained;
      clearTimeout(cut);
      servers = [];
      const drainedMs = Date.now() - started;
      // Settles land until the drain deadline (the store may come back), or SETTLE_GRACE_MS after it for the
      // last streams' settles; what is still owed then goes to the spool.
      await credit.drain(deadline + SETTLE_GRACE_MS - Date.now());
      const settledMs = Date.now() - started;
      const spooled = await credit.spool(spool);
      // Billing that outlived the drain (the tokenizer over a cut stream, a stateful request's usage asked
      // of its upstream) hands its settle over later: it lands, or goes to the spool, which stays open for
      // it until STOP_GRACE_MS after the deadline, alongside the background jobs below.
      const late = credit.settleLate(deadline + STOP_GRACE_MS - Date.now());
      // Usage stops once the last settle could record (a request records its usage as its settle starts,
      // billing that outlived the drain included): its final flush is tried until STOP_GRACE_MS, and what
      // did not land is spooled (SPEC §10: the aggregates follow the ledger, spooled settles included).
      let usageSpooled = 0;
      const usageStop = late.then(async () => (usageSpooled = await usage.stop(Math.max(0, deadline + STOP_GRACE_MS - Date.now()))));
      const rest = async () => {
        await exporter?.stop();
        await shares.janitor?.stop();
        await upstreams.close();
        await limits.close?.();
        // Last: the settles of drained requests end their spans before the final export.
        await metered.tracing?.shutdown();
      };
      const restStopped = await within(rest(), deadline + STOP_GRACE_MS - Date.now());
      const usageStopped = await within(usageStop, deadline + STOP_GRACE_MS + USAGE_SPOOL_GRACE_MS - Date.now());
      const stopped = restStopped && usageStopped;
      await late;
      clearTimeout(billingCutAt);
      // Whatever is still being billed now cannot be spooled (its cost is unknown): each gets an error line.
      const unbilled = credit.abandonExpected();
      await spool.close().catch((e: unknown) => logger.error({ err: (e as Error).message, spool: spool.file }, 'spool close failed'));
      const phases = {
        drained_ms: drainedMs,
        settled_ms: settledMs,
        spooled,
        usage_spooled: usageSpooled,
        unbilled,
        stopped_ms: Date.now() - started,
      };
      if (stopped) logger.info(phases, 'shutdown: drained, settled, background jobs stopped');
      else logger.warn(phases, 'shutdown: background jobs still stopping at their deadline; exiting without them');
    },
  };
}
