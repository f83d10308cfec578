/**
 * What every command receives: parsed options, output, and lazily built HTTP clients. The admin URL,
 * the public URL and the token come from flags and the environment passed in by bin/tollgate.js.
 */
import { InputError, optString, type Values } from './args.ts';
import { createHttpClient, type HttpClient } from './client.ts';
import type { OptionSpec } from './args.ts';
import type { Io } from './output.ts';

export type Env = Record<string, string | undefined>;

/** The outside world, passed in by the entry point (and by tests that run the CLI in-process). */
export interface CliDeps {
  env: Env;
  io: Io;
  fetch: typeof fetch;
}

export interface CliContext {
  readonly env: Env;
  readonly io: Io;
  readonly fetch: typeof fetch;
  /** `--json`: print the raw response body instead of a table. */
  readonly json: boolean;
  readonly values: Values;
  /** A client for the admin listener; an InputError (exit 2) when TOLLGATE_ADMIN_TOKEN is unset. */
  admin(): HttpClient;
  /** A client for the public listener, without credentials (share reads need none). */
  publicApi(): HttpClient;
}

/** One command: `keys create`, `credits ledger`, … (`''` for a group that is itself the command). */
export interface Command {
  /** Arguments after `tollgate <group> <command>`, for the usage line. */
  args: string;
  summary: string;
  options?: OptionSpec;
  /** Resolves when done (exit 0); throws UsageError (exit 2) or ApiError (exit 1). */
  run(ctx: CliContext, positionals: string[]): Promise<void>;
}

export interface CommandGroup {
  name: string;
  summary: string;
  commands: Record<string, Command>;
  /** Extra help lines printed under the group's commands. */
  notes: string[];
}

/** The admin URL: `--admin-url`, else TOLLGATE_ADMIN_URL, else the admin listener's default on loopback. */
export function adminUrl(values: Values, env: Env): string {
  return optString(values, 'admin-url') || env.TOLLGATE_ADMIN_URL || `http://127.0.0.1:${env.ADMIN_PORT || 9090}`;
}

/** The public URL: `--public-url`, else TOLLGATE_URL, else the public listener's default on loopback. */
export function publicUrl(values: Values, env: Env): string {
  return optString(values, 'public-url') || env.TOLLGATE_URL || `http://127.0.0.1:${env.PORT || 8080}`;
}

/** Builds the context of one invocation from its parsed options. */
export function createContext(deps: CliDeps, values: Values): CliContext {
  return {
    env: deps.env,
    io: deps.io,
    fetch: deps.fetch,
    json: values.json === true,
    values,
    admin() {
      // Trimmed as the gateway trims it (config/schema.ts adminToken): a token file's newline is not part of it.
      const token = deps.env.TOLLGATE_ADMIN_TOKEN?.trim();
      if (!token) throw new InputError('TOLLGATE_ADMIN_TOKEN is not set: export the admin token before running admin commands');
      return createHttpClient({ baseUrl: adminUrl(values, deps.env), token, fetch: deps.fetch });
    },
    publicApi() {
      return createHttpClient({ baseUrl: publicUrl(values, deps.env), fetch: deps.fetch });
    },
  };
}
