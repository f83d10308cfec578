/**
 * Compiles the parsed YAML into Tollgate's runtime config: validated once at boot, defaults filled,
 * prices turned into exact integers, the whole tree frozen. A bad value stops the boot, never a request.
 * Each section is read beside the module that owns it (`src/<owner>/config.ts`); this file assembles
 * them, reads the top-level scalars and makes the checks that span sections.
 */
import { ConfigError } from './errors.ts';
import { noUnknown, object, oneOf, str, type Obj } from './fields.ts';
import { adminTokenWeakness } from '../admin/token.ts';
import { otelSection, type OtelConfig } from './otel.ts';
import { S3_FIELDS } from './s3.ts';
import { SERVER_FIELDS, serverSection, type ServerConfig } from '../http/server-config.ts';
import { STORE_FIELDS, storeSection, type StoreConfig } from '../store/config.ts';
import {
  LIMITS_FIELDS,
  RATE_LIMITS_FIELDS,
  limitsSection,
  rateLimitsSection,
  type LimitsConfig,
  type RateLimitsConfig,
} from '../limits/config.ts';
import { AUTH_FIELDS, authSection, type AuthConfig } from '../auth/config.ts';
import { UPSTREAM_FIELDS, modelsSection, upstreamSection, type ModelConfig, type UpstreamPolicy } from '../upstream/config.ts';
import { CREDIT_FIELDS, creditSection, type CreditConfig } from '../credit/config.ts';
import { SHARES_FIELDS, sharesSection, type SharesConfig } from '../shares/config.ts';
import { CONSOLE_FIELDS, consoleSection, type ConsoleConfig } from '../console/config.ts';
import { LEDGER_EXPORT_FIELDS, LEDGER_FIELDS, ledgerSection, type LedgerConfig } from '../ledger/config.ts';
import { USAGE_FIELDS, usageSection, type UsageConfig } from '../usage/config.ts';

// The section types, for the modules that import them from here.
export type { S3Config } from './s3.ts';
export type { LimitSpec } from '../limits/config.ts';
export type { Endpoint, ModelConfig, UpstreamConfig } from '../upstream/config.ts';
export { DEFAULT_ENDPOINTS, ENDPOINTS } from '../upstream/config.ts';

export interface Config {
  readonly server: ServerConfig;
  readonly store: StoreConfig;
  readonly adminToken: string | undefined;
  readonly logLevel: string;
  /** `json` (one line per event, for collectors) or `pretty` (colourised, for a terminal). */
  readonly logFormat: 'json' | 'pretty';
  readonly limits: LimitsConfig;
  readonly auth: AuthConfig;
  readonly upstream: UpstreamPolicy;
  readonly credit: CreditConfig;
  readonly rateLimits: RateLimitsConfig;
  readonly shares: SharesConfig;
  readonly models: readonly ModelConfig[];
  /** The web console (SPEC §9). */
  readonly console: ConsoleConfig;
  /** SPEC §10: what stays in Redis, and the export of the ledger to S3 (docs/ledger-export.md). */
  readonly ledger: LedgerConfig;
  /** SPEC §10 usage aggregates (src/usage/). */
  readonly usage: UsageConfig;
  /** SPEC §15 traces over OTLP/HTTP (config/otel.ts, docs/tracing.md); undefined = off, the default. */
  readonly otel: OtelConfig | undefined;
}

const TOP = [
  'server',
  'store',
  'limits',
  'auth',
  'upstream',
  'credit',
  'rate_limits',
  'shares',
  'models',
  'console',
  'log_level',
  'log_format',
  'ledger',
  'usage',
  'otel',
] as const;

/**
 * Every section's field names (and nested mappings), in this order, checked before any value: a
 * misspelt field is reported first whatever else is wrong (as when all sections were read here).
 */
const SHAPES: readonly (readonly [string, readonly string[]])[] = [
  ['server', SERVER_FIELDS],
  ['store', STORE_FIELDS],
  ['limits', LIMITS_FIELDS],
  ['auth', AUTH_FIELDS],
  ['upstream', UPSTREAM_FIELDS],
  ['credit', CREDIT_FIELDS],
  ['rate_limits', RATE_LIMITS_FIELDS],
  ['shares', SHARES_FIELDS],
  ['shares.s3', S3_FIELDS],
  ['console', CONSOLE_FIELDS],
  ['ledger', LEDGER_FIELDS],
  ['ledger.export', LEDGER_EXPORT_FIELDS],
  ['usage', USAGE_FIELDS],
];

/** Validates and compiles a parsed (and interpolated) config document; `env` supplies the SPEC §6 overrides. */
export function compileConfig(doc: unknown, rawEnv: NodeJS.ProcessEnv): Config {
  // An override set to the empty string counts as unset, for every variable alike.
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(rawEnv)) if (v !== '') env[k] = v;
  const root = object(doc ?? {}, '(root)');
  noUnknown(root, '', TOP);
  for (const [path, fields] of SHAPES) {
    const [section, nested] = path.split('.') as [string, string | undefined];
    // A nested mapping's parent comes earlier in SHAPES, so it is a mapping or absent by now.
    const v = nested === undefined ? root[section] : ((root[section] ?? {}) as Obj)[nested];
    noUnknown(object(v, path, true), path, fields);
  }
  const models = modelsSection(root.models);
  const shares = object(root.shares, 'shares', true);

  const store = storeSection(root.store, env);
  const config: Config = {
    server: serverSection(root.server, env),
    store,
    adminToken: adminToken(env.TOLLGATE_ADMIN_TOKEN),
    logFormat: oneOf(
      env.LOG_FORMAT ?? str(root.log_format, 'log_format', 'json'),
      ['json', 'pretty'] as const,
      env.LOG_FORMAT !== undefined ? 'LOG_FORMAT (environment)' : 'log_format',
    ),
    logLevel: logLevel(
      env.LOG_LEVEL ?? str(root.log_level, 'log_level', 'info'),
      env.LOG_LEVEL !== undefined ? 'LOG_LEVEL (environment)' : 'log_level',
    ),
    limits: limitsSection(root.limits),
    auth: authSection(root.auth),
    upstream: upstreamSection(root.upstream),
    credit: creditSection(root.credit),
    rateLimits: rateLimitsSection(root.rate_limits),
    shares: sharesSection(shares, env, store.commandTimeoutMs),
    models,
    console: consoleSection(root.console),
    ledger: ledgerSection(root.ledger, shares.s3, env),
    usage: usageSection(root.usage),
    otel: otelSection(root.otel, 'otel'),
  };
  const weakness = config.adminToken === undefined ? undefined : adminTokenWeakness(config.adminToken);
  // Never echo the token: its length and estimate say enough.
  if (weakness !== undefined) throw new ConfigError('TOLLGATE_ADMIN_TOKEN (environment)', weakness);
  // Issue 27: `http://127.0.0.1:6379` was accepted and taken by ioredis for a unix socket path.
  if (config.store.redisUrl !== undefined && !/^(rediss?:\/\/|\/)/i.test(config.store.redisUrl)) {
    throw new ConfigError(
      env.REDIS_URL ? 'REDIS_URL (environment)' : 'store.redis_url',
      `must start with redis:// or rediss:// (TLS), or be a unix socket path starting with /; got a value starting ${JSON.stringify(config.store.redisUrl.split(':')[0] + ':')}`,
    );
  }
  if (config.server.workers > 1 && !config.store.redisUrl && config.store.clusterNodes.length === 0) {
    throw new ConfigError(
      'server.workers',
      `is ${config.server.workers}, but the embedded store lives inside one process: workers > 1 need REDIS_URL (or REDIS_CLUSTER_NODES)`,
    );
  }
  return deepFreeze(config);
}

/**
 * TOLLGATE_ADMIN_TOKEN without the whitespace around it. A token read from a file usually ends in a
 * newline (a Kubernetes Secret made with --from-file, `echo` into an env file), and HTTP strips the
 * whitespace around a header's value, so no client could ever send such a token: the gateway booted and
 * answered 401 to the right token for good. Whitespace inside cannot be sent either: refused.
 */
function adminToken(v: string | undefined): string | undefined {
  const token = v?.trim();
  if (token && /\s/.test(token)) {
    throw new ConfigError('TOLLGATE_ADMIN_TOKEN (environment)', 'contains whitespace, which no HTTP client can send in a bearer token');
  }
  return token || undefined;
}

const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'];

function logLevel(v: string, path: string): string {
  if (!LOG_LEVELS.includes(v)) throw new ConfigError(path, `must be one of ${LOG_LEVELS.join(', ')}, got ${JSON.stringify(v)}`);
  return v;
}

function deepFreeze<T>(o: T): T {
  if (o && typeof o === 'object') {
    for (const v of Object.values(o as Obj)) deepFreeze(v);
    Object.freeze(o);
  }
  return o;
}
