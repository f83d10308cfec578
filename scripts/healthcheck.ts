/**
 * The container's HEALTHCHECK: GET /healthz on the admin listener the running gateway actually uses,
 * resolved the way main.ts resolves it (TOLLGATE_CONFIG or config/tollgate.yaml, then ADMIN_PORT /
 * ADMIN_HOST), so an admin_port set in YAML is followed too. Exit 0 when healthy, 1 otherwise.
 */
import { loadConfig } from '../src/config/load.ts';

/** The URL of /healthz for a config's admin listener (a wildcard host is reached on loopback). */
export function healthUrl(adminHost: string, adminPort: number): string {
  const host = adminHost === '0.0.0.0' || adminHost === '::' ? '127.0.0.1' : adminHost.includes(':') ? `[${adminHost}]` : adminHost;
  return `http://${host}:${adminPort}/healthz`;
}

if (import.meta.main) {
  try {
    const { config } = await loadConfig(process.env);
    const res = await fetch(healthUrl(config.server.adminHost, config.server.adminPort), { signal: AbortSignal.timeout(2_000) });
    process.exit(res.ok ? 0 : 1);
  } catch (e) {
    process.stderr.write(`healthcheck: ${(e as Error).message}\n`);
    process.exit(1);
  }
}
