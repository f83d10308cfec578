/** The `console` section (SPEC §9): on or off, its public origin, session length, the grant confirmation. */
import { ConfigError } from '../config/errors.ts';
import { bool, noUnknown, num, object, optional } from '../config/fields.ts';

export interface ConsoleConfig {
  readonly enabled: boolean;
  /** The console's origin in minted links and the CSRF check; undefined → http://127.0.0.1:<public port>. */
  readonly publicUrl: string | undefined;
  readonly sessionTtlSeconds: number;
  /** Grants (and corrections) above this many credits, in absolute value, ask the operator to confirm (docs/console.md). */
  readonly confirmGrantCredits: number;
}

export const CONSOLE_FIELDS = ['enabled', 'public_url', 'session_ttl_seconds', 'confirm_grant_credits'] as const;

/** Compiles `console`. */
export function consoleSection(v: unknown): ConsoleConfig {
  const consoleDoc = object(v, 'console', true);
  noUnknown(consoleDoc, 'console', CONSOLE_FIELDS);
  return {
    enabled: bool(consoleDoc.enabled, 'console.enabled', true),
    publicUrl: origin(optional(consoleDoc.public_url, 'console.public_url'), 'console.public_url'),
    sessionTtlSeconds: num(consoleDoc.session_ttl_seconds, 'console.session_ttl_seconds', {
      fallback: 43_200,
      min: 60,
      max: 30 * 86_400,
      integer: true,
    }),
    confirmGrantCredits: num(consoleDoc.confirm_grant_credits, 'console.confirm_grant_credits', { fallback: 1000, min: 0, max: 1e9 }),
  };
}

/**
 * The console's public origin (`https://console.example.com`): http or https, no path, query or
 * fragment, because it is compared with browsers' `Origin` header (SPEC §9) and prefixed to `/console/`.
 */
function origin(v: string | undefined, path: string): string | undefined {
  if (v === undefined) return undefined;
  let u: URL;
  try {
    u = new URL(v);
  } catch {
    throw new ConfigError(path, `is not a URL: ${JSON.stringify(v)}`);
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new ConfigError(path, 'must be http or https');
  if (u.pathname !== '/' || u.search || u.hash || u.username || u.password)
    throw new ConfigError(path, `must be an origin only (scheme, host, port), like https://console.example.com; got ${JSON.stringify(v)}`);
  return u.origin;
}
