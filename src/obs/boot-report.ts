/**
 * What an operator should read at boot (issue "first ten minutes"): one summary line, a warning for each
 * setting that is valid but almost certainly a mistake, and a listen error that names the variable to
 * change instead of a stack trace. Pure functions of the compiled config; main.ts and the demo log them.
 */
import type { Config } from '../config/schema.ts';
import type { Store } from '../store/types.ts';
import { clusterAddress } from '../store/cluster-nodes.ts';

/** The one-line summary's fields: models → upstreams, store, admin API on/off. */
export function bootSummary(config: Config, store: string, urls: { publicUrl: string; adminUrl: string }): Record<string, unknown> {
  return {
    public: urls.publicUrl,
    admin: urls.adminUrl,
    store,
    admin_api: config.adminToken ? 'on' : 'off (set TOLLGATE_ADMIN_TOKEN to enable /admin/)',
    models: Object.fromEntries(config.models.map((m) => [m.name, m.upstreams.map((u) => u.url)])),
  };
}

/** A path like `/v1`, `/v1beta`, `/api/v2`: OpenAI-compatible servers serve `/chat/completions` below one. */
const VERSION_PATH = /\/v\d+[a-z0-9]*(\/|$)/i;

/** True for a loopback host or origin hostname (127.0.0.0/8, ::1, localhost). */
export function isLoopback(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, '').toLowerCase();
  return h === 'localhost' || h === '::1' || /^127\.\d+\.\d+\.\d+$/.test(h);
}

/** Settings that are valid but probably wrong, one sentence each. */
export function bootWarnings(config: Config): string[] {
  const out: string[] = [];
  config.models.forEach((m, i) =>
    m.upstreams.forEach((u, j) => {
      if (!VERSION_PATH.test(new URL(u.url).pathname)) {
        out.push(
          `models[${i}].upstreams[${j}].url ${JSON.stringify(u.url)} has no version path: Tollgate calls <url>/chat/completions, so vLLM, SGLang, TGI, llama.cpp and Ollama usually need ".../v1"`,
        );
      }
    }),
  );
  // Issue 27: behind a real hostname, the loopback default made every minted link point at 127.0.0.1
  // and every console form posted from the real origin a 403.
  if (config.console.enabled && !isLoopback(config.server.host)) {
    const url = config.console.publicUrl;
    if (url === undefined || isLoopback(new URL(url).hostname)) {
      out.push(
        `console.public_url is ${url ?? `unset (http://127.0.0.1:<port>)`} while the public listener is on ${config.server.host}: console links point at loopback and forms posted from any other address are refused (403). Set CONSOLE_PUBLIC_URL (console.public_url) to the origin people use, e.g. https://api.example.com`,
      );
    }
  }
  return out;
}

/** How many offending keys the warning names; the rest are counted. */
const KEYS_NAMED = 10;

/**
 * Keys whose model allow-list names a model the config does not serve (removed or renamed since the
 * key was created; creating such a key is refused): one warning naming up to ten key ids. Scans the
 * key records, so main.ts runs it in the background after the listeners are up.
 */
export async function keyModelWarnings(config: Config, store: Pick<Store, 'scanKeys'>): Promise<string[]> {
  const served = new Set(config.models.map((m) => m.name));
  const bad: string[] = [];
  const unknown = new Set<string>();
  await store.scanKeys((records) => {
    for (const r of records) {
      const missing = r.models.filter((m) => !served.has(m));
      if (missing.length === 0) continue;
      bad.push(r.id);
      for (const m of missing) unknown.add(m);
    }
  });
  if (bad.length === 0) return [];
  const named = bad.slice(0, KEYS_NAMED).join(', ') + (bad.length > KEYS_NAMED ? ` and ${bad.length - KEYS_NAMED} more` : '');
  return [
    `${bad.length} key(s) name models this config does not serve (${[...unknown]
      .sort()
      .map((m) => JSON.stringify(m))
      .join(', ')}): ${named}; those models answer 404 for them`,
  ];
}

/** The environment variable that moves each listener. */
const PORT_VARIABLE = { public: 'PORT', admin: 'ADMIN_PORT', metrics: 'METRICS_PORT' } as const;

/** One line for a listen failure (EADDRINUSE, EACCES, EADDRNOTAVAIL); undefined for any other error. */
export function listenErrorMessage(err: unknown, config: Config): string | undefined {
  const e = err as { code?: string; port?: number; address?: string };
  if (e.code !== 'EADDRINUSE' && e.code !== 'EACCES' && e.code !== 'EADDRNOTAVAIL') return undefined;
  const s = config.server;
  const which = e.port === s.port ? 'public' : e.port === s.adminPort ? 'admin' : e.port === s.metricsPort ? 'metrics' : undefined;
  const where = `${e.address ?? '?'}:${e.port ?? '?'}`;
  const what =
    e.code === 'EADDRINUSE'
      ? 'is already in use (another Tollgate, or `npm run demo`, may be running)'
      : e.code === 'EACCES'
        ? 'may not be bound by this user (ports below 1024 need privileges)'
        : 'is not an address of this machine';
  const fix = which
    ? ` Set ${PORT_VARIABLE[which]}=<port> (or server.${which === 'public' ? 'port' : `${which}_port`} in the config) to move the ${which} listener.`
    : '';
  return `cannot listen on ${where}: the address ${what}.${fix}`;
}

/** Where the store is, for log lines: `host:port` of REDIS_URL or of each cluster node, never a password. */
export function storeAddress(config: Config): string {
  const { redisUrl, clusterNodes } = config.store;
  if (clusterNodes.length > 0) return clusterAddress(clusterNodes);
  if (!redisUrl) return 'embedded';
  if (redisUrl.startsWith('/')) return redisUrl;
  try {
    const u = new URL(redisUrl);
    return `${u.hostname}:${u.port || 6379}`;
  } catch {
    return '?';
  }
}

/**
 * The one warn line an unreachable Redis earns (issue 27: ioredis errors every 5 s and a reaper stack
 * trace): where, why, what clients get meanwhile, and that it retries. main.ts logs it on the first
 * error of an outage and then at most once a minute.
 */
export function storeUnreachableMessage(address: string, err: Error): string {
  return `Redis at ${address} is unreachable (${err.message}): live keys answer 503 store_unavailable and test keys run on per-instance rate limits until it is back; retrying in the background`;
}
