/**
 * The `server` section: the public, admin and metrics listeners, their timeouts, the drain, the workers
 * and the spool. The environment overrides (SPEC §6: HOST, PORT, ADMIN_HOST, …) win over the file.
 */
import { isIP } from 'node:net';
import { ConfigError } from '../config/errors.ts';
import { at, list, MAX_TIMER_MS, MAX_TIMER_SECONDS, noUnknown, num, object, str } from '../config/fields.ts';

/** server.drain_seconds: drain + the 5 s shutdown margin, in ms, within MAX_TIMER_MS. */
const MAX_DRAIN_SECONDS = Math.floor((MAX_TIMER_MS - 5_000) / 1000);
import { autoWorkers } from '../config/cpus.ts';

export interface ServerConfig {
  readonly host: string;
  readonly port: number;
  readonly adminHost: string;
  readonly adminPort: number;
  readonly headersTimeoutMs: number;
  readonly requestTimeoutMs: number;
  /** A request body not complete this long after it started to be read → 408 request_timeout (SPEC §13). */
  readonly bodyTimeoutMs: number;
  /**
   * A response the client has stopped taking: bytes wait to be written and none has been for this long →
   * the connection is destroyed, the request ends as "client gone" (src/http/server.ts). A response with
   * nothing waiting (a slow upstream between events) is never cut by it.
   */
  readonly writeTimeoutMs: number;
  readonly drainSeconds: number;
  /** Processes serving the public port (node:cluster); 1 = no cluster. `auto` compiles to the cores available. */
  readonly workers: number;
  /** A listener of its own for `/metrics` (SPEC §12), on adminHost; undefined → the admin listener serves it. */
  readonly metricsPort: number | undefined;
  /** The metrics listener's address (`metrics_host` / METRICS_HOST; default adminHost): /metrics can be reachable where /admin/ is not. */
  readonly metricsHost: string;
  /** CIDRs whose `x-forwarded-for` / `forwarded` are believed for the client address (SPEC §12). */
  readonly trustedProxies: readonly string[];
  /** Where settles still owed at exit are spooled (SPEC §14, src/credit/spool.ts); relative to the working directory. */
  readonly spoolDir: string;
  /** How often a running gateway applies spool files other processes left (besides at start). */
  readonly spoolScanSeconds: number;
}

export const SERVER_FIELDS = [
  'host',
  'port',
  'admin_host',
  'admin_port',
  'metrics_port',
  'trusted_proxies',
  'headers_timeout_ms',
  'request_timeout_ms',
  'body_timeout_ms',
  'write_timeout_ms',
  'drain_seconds',
  'workers',
  'spool_dir',
  'spool_scan_seconds',
  'metrics_host',
] as const;

/** Compiles `server`; `env` has the SPEC §6 overrides, empty strings already dropped. */
/**
 * A listener's address; empty counts as unset, as it does for HOST / ADMIN_HOST (schema.ts). Node's
 * listen() reads '' as "every interface", so `admin_host: ${ADMIN_HOST:-}` with the variable unset put
 * /admin/ on every address of the machine instead of 127.0.0.1 (SPEC §2).
 */
function host(v: unknown, path: string, fallback: string): string {
  return str(v, path, fallback) || fallback;
}

export function serverSection(v: unknown, env: NodeJS.ProcessEnv): ServerConfig {
  const server = object(v, 'server', true);
  noUnknown(server, 'server', SERVER_FIELDS);
  const port = (envName: string, v: unknown, path: string, d: number) =>
    num(env[envName] ?? v, env[envName] !== undefined ? `${envName} (environment)` : path, {
      fallback: d,
      min: 0,
      max: 65535,
      integer: true,
    });
  const out: ServerConfig = {
    host: env.HOST ?? host(server.host, 'server.host', '0.0.0.0'),
    port: port('PORT', server.port, 'server.port', 8080),
    adminHost: env.ADMIN_HOST ?? host(server.admin_host, 'server.admin_host', '127.0.0.1'),
    adminPort: port('ADMIN_PORT', server.admin_port, 'server.admin_port', 9090),
    metricsPort:
      env.METRICS_PORT === undefined && server.metrics_port === undefined
        ? undefined
        : port('METRICS_PORT', server.metrics_port, 'server.metrics_port', 0),
    metricsHost:
      env.METRICS_HOST ??
      host(server.metrics_host, 'server.metrics_host', env.ADMIN_HOST ?? host(server.admin_host, 'server.admin_host', '127.0.0.1')),
    trustedProxies: list(server.trusted_proxies, 'server.trusted_proxies', true).map((c, i) =>
      cidr(str(c, at('server.trusted_proxies', i)), at('server.trusted_proxies', i)),
    ),
    headersTimeoutMs: num(server.headers_timeout_ms, 'server.headers_timeout_ms', { fallback: 10_000, min: 100, max: MAX_TIMER_MS }),
    requestTimeoutMs: num(server.request_timeout_ms, 'server.request_timeout_ms', { fallback: 30_000, min: 100, max: MAX_TIMER_MS }),
    bodyTimeoutMs: num(server.body_timeout_ms, 'server.body_timeout_ms', { fallback: 10_000, min: 100, max: MAX_TIMER_MS }),
    writeTimeoutMs: num(server.write_timeout_ms, 'server.write_timeout_ms', { fallback: 30_000, min: 100, max: MAX_TIMER_MS }),
    // The shutdown arms drain + 5 s at most (main.ts hard stop, gateway.ts graces): that sum must fit a timer.
    drainSeconds: num(server.drain_seconds, 'server.drain_seconds', { fallback: 30, min: 0, max: MAX_DRAIN_SECONDS }),
    workers: workerCount(
      env.TOLLGATE_WORKERS ?? server.workers,
      env.TOLLGATE_WORKERS !== undefined ? 'TOLLGATE_WORKERS (environment)' : 'server.workers',
    ),
    spoolDir: spoolDir(server.spool_dir),
    spoolScanSeconds: num(server.spool_scan_seconds, 'server.spool_scan_seconds', { fallback: 60, min: 1, max: MAX_TIMER_SECONDS }),
  };
  // Two of our own listeners on one port: the second failed to bind with "already in use (another
  // Tollgate may be running)" naming the public listener; the config itself is the cause.
  const name = (envName: string, path: string) => (env[envName] !== undefined ? `${envName} (environment)` : path);
  const listeners = [
    { path: name('PORT', 'server.port'), host: out.host, port: out.port },
    { path: name('ADMIN_PORT', 'server.admin_port'), host: out.adminHost, port: out.adminPort },
    ...(out.metricsPort === undefined
      ? []
      : [{ path: name('METRICS_PORT', 'server.metrics_port'), host: out.metricsHost, port: out.metricsPort }]),
  ];
  for (const [i, b] of listeners.entries()) {
    for (const a of listeners.slice(0, i)) {
      if (b.port !== 0 && b.port === a.port && hostsOverlap(a.host, b.host)) {
        throw new ConfigError(
          b.path,
          `is ${b.port}, the port of ${a.path} on an overlapping address (${a.host}, ${b.host}): give each listener its own port`,
        );
      }
    }
  }
  return out;
}

const WILDCARDS = ['0.0.0.0', '::', '[::]'];
/** Whether two listen addresses may collide on one port: the same address, or one of them every address. */
function hostsOverlap(a: string, b: string): boolean {
  return a === b || WILDCARDS.includes(a) || WILDCARDS.includes(b);
}

/** `server.spool_dir`: a path (default `./data/spool`); an empty string would spool into the working directory. */
function spoolDir(v: unknown): string {
  const dir = str(v, 'server.spool_dir', './data/spool');
  if (dir.trim() === '') throw new ConfigError('server.spool_dir', 'must not be empty');
  return dir;
}

/** `server.workers`: a whole number ≥ 1, or `auto` (the CPUs this process may use: cgroup quota, else cores). */
function workerCount(v: unknown, path: string): number {
  if (v === 'auto') return autoWorkers();
  return num(v, path, { fallback: 1, min: 1, max: 1024, integer: true });
}

/** A CIDR (`10.0.0.0/8`, `::1/128`) or a bare address, checked with node:net so the runtime accepts it too. */
function cidr(v: string, path: string): string {
  const [addr, bits, extra] = v.trim().split('/');
  const family = isIP(addr ?? '');
  const prefix = bits === undefined ? (family === 6 ? 128 : 32) : Number(bits);
  if (family === 0 || extra !== undefined || !Number.isInteger(prefix) || prefix < 0 || prefix > (family === 6 ? 128 : 32)) {
    throw new ConfigError(path, `is not an IP address or CIDR: ${JSON.stringify(v)}`);
  }
  return `${addr}/${prefix}`;
}
