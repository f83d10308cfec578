/**
 * `tollgate spool replay`: applies the settles a gateway spooled at shutdown while Redis was unreachable
 * (SPEC §14, src/credit/spool.ts), exactly once by request id, then deletes the files applied. A gateway
 * does the same at start; this is for a spool whose gateway will not start again (a volume moved to
 * another host, a scaled-down deployment). It talks to Redis itself, with the gateway's config
 * (TOLLGATE_CONFIG, REDIS_URL): the hold buckets depend on the configured hold TTL. The usage flushes
 * spooled beside them (src/usage/spool.ts) are applied too, once each by their flush id.
 */
import { Writable } from 'node:stream';
import { expectPositionals, InputError, optString } from './args.ts';
import { ApiError } from './client.ts';
import type { CommandGroup } from './context.ts';
import { fields, json } from './output.ts';

const G = 'spool';

export const spoolGroup: CommandGroup = {
  name: G,
  summary: 'settles spooled at shutdown while Redis was unreachable (docs/operations.md)',
  notes: [
    'Reads the gateway config (TOLLGATE_CONFIG, REDIS_URL) and connects to Redis directly; --dir overrides server.spool_dir.',
    'Each settle is applied once by request id: replaying a file twice, or one the gateway already replayed, debits nothing again.',
    'Usage flushes spooled at shutdown (usage-….usage files) are applied too, each once by its flush id.',
    'Exit code 1 when a settle or usage flush could not reach Redis (its file is kept for the next replay).',
  ],
  commands: {
    replay: {
      args: '[--dir PATH]',
      summary: 'apply every spooled settle once, then delete the files applied',
      options: { dir: { type: 'string' } },
      async run(ctx, pos) {
        expectPositionals(pos, [], G);
        // Imported on demand: ioredis and pino are not needed by the admin commands.
        const [{ loadConfig }, { ConfigError }, { openStore }, { replaySpool }, { createLogger }] = await Promise.all([
          import('../config/load.ts'),
          import('../config/errors.ts'),
          import('../main.ts'),
          import('../credit/spool.ts'),
          import('../obs/logger.ts'),
        ]);
        const { replayUsageSpool } = await import('../usage/spool.ts');
        const env = ctx.env as NodeJS.ProcessEnv;
        let config;
        try {
          ({ config } = await loadConfig(env));
        } catch (e) {
          if (e instanceof ConfigError) throw new InputError(e.message);
          throw e;
        }
        if (!config.store.redisUrl && config.store.clusterNodes.length === 0)
          throw new InputError('spool replay needs REDIS_URL (or REDIS_CLUSTER_NODES): spooled settles are applied to Redis');
        // Log lines (an unresolved or failed settle, whole) go to stderr.
        const sink = new Writable({
          write(chunk, _e, cb) {
            ctx.io.err(String(chunk).trimEnd());
            cb();
          },
        });
        const logger = createLogger('warn', sink);
        const store = await openStore(config, env, logger);
        try {
          const dir = optString(ctx.values, 'dir') ?? config.server.spoolDir;
          const report = await replaySpool({
            dir,
            logger,
            async settle(s) {
              try {
                const r = await store.settle(s);
                if (r.replayed && r.entry_id === '')
                  logger.error(
                    { settle: s },
                    'spooled settle found no trace of its hold (bucket already emptied): nothing debited; reconcile the ledger from this line',
                  );
                return r;
              } catch (e) {
                logger.error({ err: (e as Error).message, settle: s }, 'spooled settle could not be applied; its file is kept');
                return undefined;
              }
            },
          });
          const usage = await replayUsageSpool({ dir, logger, flush: (f) => store.flushUsage(f) });
          ctx.io.out(
            ctx.json
              ? json({
                  ...report,
                  usage: { files: usage.files, flushes: usage.flushes, failed: usage.failed, torn: usage.torn, corrupt: usage.corrupt },
                })
              : fields([
                  ['files', String(report.files)],
                  ['settles', String(report.settles)],
                  ['debited', String(report.debited)],
                  ['already_settled', String(report.alreadySettled)],
                  ['unresolved', String(report.unresolved)],
                  ['failed', String(report.failed)],
                  ['torn', String(report.torn)],
                  ['corrupt', String(report.corrupt)],
                  ['usage_files', String(usage.files)],
                  ['usage_flushes', String(usage.flushes)],
                  ['usage_failed', String(usage.failed)],
                ]),
          );
          if (usage.failed > 0)
            throw new ApiError(
              'replay_incomplete',
              `${usage.failed} usage spool file(s) could not reach Redis; they are kept for the next replay.`,
            );
          if (report.failed > 0)
            throw new ApiError(
              'replay_incomplete',
              `${report.failed} settle(s) could not reach Redis; their files are kept for the next replay.`,
            );
        } finally {
          await store.close();
          logger.flush();
        }
      },
    },
  },
};
