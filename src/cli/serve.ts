/** `tollgate serve`: runs the gateway itself, exactly as `node src/main.ts` does (config from the environment). */
import { expectPositionals, optString } from './args.ts';
import type { CommandGroup } from './context.ts';

/** The `serve` group: a single command without a sub-command word. */
export const serveGroup: CommandGroup = {
  name: 'serve',
  summary: 'run the gateway (config from TOLLGATE_CONFIG or config/tollgate.yaml)',
  notes: [
    'Listens on PORT (public) and ADMIN_PORT (admin); stops gracefully on SIGTERM/SIGINT.',
    'Environment: TOLLGATE_CONFIG, PORT, HOST, ADMIN_PORT, ADMIN_HOST, METRICS_PORT, REDIS_URL, TOLLGATE_ADMIN_TOKEN, LOG_LEVEL, LOG_FORMAT, TOLLGATE_WORKERS.',
    '--workers N|auto overrides server.workers: N processes share the ports (needs REDIS_URL); one /metrics sums them all.',
  ],
  commands: {
    '': {
      args: '[--workers N|auto]',
      summary: 'run the gateway until SIGTERM/SIGINT',
      options: { workers: { type: 'string' } },
      async run(ctx, pos) {
        expectPositionals(pos, [], 'serve');
        // Through the environment, so the forked workers (which re-run this command) see it too.
        const workers = optString(ctx.values, 'workers');
        if (workers !== undefined) ctx.env.TOLLGATE_WORKERS = workers;
        // Imported on demand: the gateway pulls in ioredis, pino, the AWS SDK and the tokenizer, which
        // admin commands never need. Measured on a loaded 2-core machine: importing src/main.ts took
        // 1.8–2.3 s, the CLI's own modules 0.25–0.37 s.
        const { serve } = await import('../main.ts');
        await serve(ctx.env);
      },
    },
  },
};
