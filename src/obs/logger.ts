/**
 * pino with redaction (SPEC §7): authorization headers and key material are censored on every path
 * where they could appear. Node lower-cases incoming header names; headers we build are lower-case too
 * (NOTES §7: redaction paths are case-sensitive).
 */
import { pino, type DestinationStream, type Logger } from 'pino';
import { isoTime } from './iso-time.ts';

/**
 * Explicit paths only: a `*.` wildcard made redaction re-parse and clone on every line (8.1 µs per
 * request line vs 2.5 µs; bench/micro/log-line.bench.ts). Tollgate's own lines are built from known
 * fields and never carry headers or keys; these paths guard the places a header object could appear.
 */
export const REDACT_PATHS = [
  'req.headers.authorization',
  'req.headers["x-api-key"]',
  'req.headers["api-key"]',
  'req.headers.cookie',
  'headers.authorization',
  'headers["x-api-key"]',
  'headers["api-key"]',
  'headers.cookie',
  'upstream.headers.authorization',
  'err.headers.authorization',
  'authorization',
  'api_key',
  'apiKey',
  'key',
];

export type { Logger };

/**
 * stdout is written in batches of at least 4 KiB (one write per ~10 request lines instead of one each),
 * and at least once a second: without the periodic flush a quiet gateway would hold its last lines
 * until ten more requests came.
 */
export const LOG_BATCH_BYTES = 4096;
export const LOG_FLUSH_MS = 1000;

/**
 * A colourised, human-readable destination for a terminal (LOG_FORMAT=pretty). pino-pretty is imported
 * only in that mode: JSON logging, the production default, never loads it. It formats on the main
 * thread, so it is for reading a terminal, not for load.
 */
export async function prettyDestination(): Promise<DestinationStream> {
  const { default: pretty } = await import('pino-pretty');
  return pretty({
    colorize: process.stdout.isTTY === true,
    translateTime: 'SYS:HH:MM:ss.l',
    ignore: 'pid,hostname,svc',
    singleLine: true,
    sync: true,
  });
}

/** The process logger; `dest` lets tests capture lines. */
export function createLogger(level: string, dest?: DestinationStream): Logger {
  const opts = {
    level,
    base: { svc: 'tollgate' },
    redact: { paths: REDACT_PATHS, censor: '[REDACTED]' },
    // pino.stdTimeFunctions.isoTime's format, from the cached clock (iso-time.ts).
    timestamp: () => `,"time":"${isoTime(Date.now())}"`,
  };
  return dest
    ? pino(opts, dest)
    : pino(opts, pino.destination({ dest: 1, sync: false, minLength: LOG_BATCH_BYTES, periodicFlush: LOG_FLUSH_MS }));
}

/** Top-level field names pino redacts (REDACT_PATHS without a dot or bracket). */
const REDACTED_FIELDS = new Set(REDACT_PATHS.filter((p) => !/[.[]/.test(p)));
const LOGGER_STATE = pino.symbols;

/**
 * An info-level writer for one message with flat fields: the request line, once per request (SPEC §7).
 * Writes exactly the line pino would (level, time, the logger's bindings, the fields in order, msg) with
 * one JSON.stringify instead of pino's per-field serialisation and redaction checks (bench/micro/log-line.bench.ts:
 * the writer against logger.info, in bench/results/micro.md). A line pino must shape (an object field such as `err`, a field name
 * it redacts) or a destination that wants metadata goes through `logger.info` unchanged.
 */
export function createLineWriter(logger: Logger, msg: string): (fields: Record<string, unknown>) => void {
  const state = logger as unknown as Record<symbol, unknown>;
  const stream = state[LOGGER_STATE.streamSym] as DestinationStream & Record<symbol, unknown>;
  const bindings = state[LOGGER_STATE.chindingsSym] as string;
  const direct = typeof bindings === 'string' && stream?.[LOGGER_STATE.needsMetadataGsym] !== true;
  const tail = `,"msg":${JSON.stringify(msg)}}\n`;
  return (fields) => {
    if (!logger.isLevelEnabled('info')) return;
    let plain = direct;
    for (const k in fields) {
      const v = fields[k];
      const t = typeof v;
      if ((t !== 'string' && t !== 'number' && t !== 'boolean' && t !== 'undefined') || REDACTED_FIELDS.has(k)) {
        plain = false;
        break;
      }
    }
    if (!plain) {
      logger.info(fields, msg);
      return;
    }
    const json = JSON.stringify(fields);
    stream.write(`{"level":30,"time":"${isoTime(Date.now())}"${bindings}${json.length > 2 ? `,${json.slice(1, -1)}` : ''}${tail}`);
  };
}
