// The gateway's log lines, kept for a test to assert what was (and was not) logged.
import { Writable } from 'node:stream';
import { createLogger, type Logger } from '../../src/obs/logger.ts';

/** A logger at `level` whose lines land in `lines`, parsed (one JSON object a line, as pino writes them). */
export function captureLogs(level = 'info'): { logger: Logger; lines: Record<string, unknown>[] } {
  const lines: Record<string, unknown>[] = [];
  const sink = new Writable({
    write(chunk, _e, cb) {
      for (const l of String(chunk).split('\n').filter(Boolean)) lines.push(JSON.parse(l));
      cb();
    },
  });
  return { logger: createLogger(level, sink), lines };
}
